"""What `validate` can tell about a model's code source without running it or importing an ML framework:
a `pkg.module:attr` module can be found (`importlib` finders, nothing imported: the parent packages are
walked by their search paths), and a `file.py:attr` file exists and defines that name at its top level
(read with `ast`, never executed), and the kwargs given to that factory are parameters it has (`signatures`).
The same holds for a module source whose module is a plain `.py` file.

Each check gives (place, message) pairs; `load` turns them into FILE:LINE:COL lines.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench.config.base import suggest
from mlbench.validate.signatures import keyword_problems

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig

Problem = tuple[tuple[str | int, ...], str]
MAX_SOURCE_BYTES = 5_000_000  # past this a model file is read by the run, not parsed by validate


def check_sources(config: PipelineConfig, base_dir: Path) -> tuple[list[Problem], list[Problem]]:
    """(problems of the sources, problems of the kwargs keys given to their factories: placed at the key)."""
    problems: list[Problem] = []
    keys: list[Problem] = []
    for m, spec in enumerate(config.models):
        if spec.source_kind not in ("file", "module") or spec.source is None:
            continue
        where: tuple[str | int, ...] = ("models", m, "source")
        module, _, attr = spec.source.rpartition(":")
        path: Path | None
        if spec.source_kind == "file":
            what, path = _file_problem(base_dir, module, attr), (base_dir / module).resolve()
        else:
            what, path = _module_problem(module, attr)
        if what is not None:
            problems.append((where, what))
        elif path is not None:
            keys.extend((("models", m, "kwargs", key), message)
                        for key, message in keyword_problems(path, attr, spec.kwargs))
    return problems, keys


def _file_problem(base_dir: Path, name: str, attr: str) -> str | None:
    path = (base_dir / name).resolve()
    if not path.is_file():
        siblings = sorted(p.name for p in path.parent.glob("*.py")) if path.parent.is_dir() else []
        return f"model file not found: {path}{suggest(path.name, siblings)}"
    return _definition_problem(path, attr)


def _definition_problem(path: Path, attr: str) -> str | None:
    """Why `path` has no top-level `attr` (its first dotted part), or None when it has or may have one."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        return f"{path.name} line {exc.lineno}: {exc.msg}: Python cannot read it"
    except (OSError, ValueError) as exc:
        return f"cannot read {path}: {exc}"
    names = top_level_names(tree)
    if names is None:  # a star import or a module __getattr__: the names are not all written down
        return None
    head = attr.split(".")[0]
    if head in names:
        return None
    return f"{path.name} has no top-level definition of '{head}'{suggest(head, sorted(names))}"


def top_level_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level (inside top-level if/try/with blocks too); None when it
    may bind others unseen (`from x import *`, a module-level `__getattr__`)."""
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(body: list[ast.stmt]) -> bool:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    bind(target)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars)
            elif sys.version_info >= (3, 12) and isinstance(node, ast.TypeAlias):
                bind(node.name)
            for block in ("body", "orelse", "finalbody"):
                if isinstance(node, (ast.If, ast.Try, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)) \
                        and not visit(getattr(node, block, [])):
                    return False
            if isinstance(node, ast.Try) and not all(visit(h.body) for h in node.handlers):
                return False
        return True

    complete = visit(tree.body)
    return names if complete and "__getattr__" not in names else None


def _search_path() -> list[str]:
    """Where a run's child process looks for modules: the current folder first (`python -m`), then this
    interpreter's path."""
    cwd = os.getcwd()
    return [cwd, *(p for p in sys.path if p and os.path.abspath(p) != cwd)]


def _module_problem(name: str, attr: str) -> tuple[str | None, Path | None]:
    """Why the module source `name:attr` cannot be found, and the plain `.py` file it is in when one is."""
    parts = name.split(".")
    spec = _top_level_spec(parts[0])
    if spec is None:
        known = [m.name for m in pkgutil.iter_modules(_search_path())]
        return (f"no module named '{parts[0]}' in the current folder or on the Python path"
                f"{suggest(parts[0], known)}"), None
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        locations = list(spec.submodule_search_locations or [])
        if not locations:
            return f"'{package}' is a module, not a package: it has no '{parts[depth]}'", None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth + 1]), locations)
        if spec is None:
            known = [m.name for m in pkgutil.iter_modules(locations)]
            return f"package '{package}' has no module '{parts[depth]}'{suggest(parts[depth], known)}", None
    origin = spec.origin
    if origin and origin.endswith(".py") and os.path.isfile(origin):
        return _definition_problem(Path(origin), attr), Path(origin)
    return None, None


def _top_level_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """A top-level module's spec (a top-level find_spec imports nothing), the current folder included."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    return spec or importlib.machinery.PathFinder.find_spec(name, _search_path())
