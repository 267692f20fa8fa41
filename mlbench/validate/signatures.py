"""A model's `kwargs:` checked against its factory's parameters before anything runs: a typo (`num_class` for
`num_classes`) would otherwise cost a child process, torch's import and the factory's own error, variant by
variant, at run time.

The factory is read with `ast` from the file a `file.py:attr` or `pkg.module:attr` source names (never
imported, never executed), so what is checked is only what the file writes down: a function, or a class with
its own `__init__`. Whatever could take other keywords unseen (`**kwargs`, a decorator, an inherited or
generated `__init__`, a name bound twice or by an assignment) is left to the run.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from mlbench.config.base import suggest

MAX_SOURCE_BYTES = 5_000_000  # past this a model file is read by the run, not parsed by validate


def keyword_problems(path: Path, attr: str, kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for each key of `kwargs` that the factory `attr` defined in `path` takes no parameter
    for; [] when every key fits, or when the file does not say for certain which keywords it takes."""
    if not kwargs or "." in attr:
        return []
    parameters = _parameters(path, attr)
    if parameters is None:
        return []
    problems = []
    for key in kwargs:
        if str(key) not in parameters:
            takes = f" (it takes: {', '.join(parameters)})" if parameters else " (it takes no keyword arguments)"
            problems.append((key, f"'{attr}' in {path.name} has no parameter '{key}'"
                                  f"{suggest(str(key), parameters)}{takes}"))
    return problems


def _parameters(path: Path, attr: str) -> list[str] | None:
    """The keyword-passable parameter names of the top-level `attr` in `path` (a class: of its `__init__`,
    without `self`), or None when they cannot be known without running the file."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None  # the source check says why
    definitions = [node for node in tree.body if _binds(node, attr)]
    if len(definitions) != 1:
        return None  # not defined here by one plain def or class (an import, an assignment, two branches)
    node = definitions[0]
    if isinstance(node, ast.ClassDef):
        if node.decorator_list:  # @dataclass and its kind write their own __init__
            return None
        inits = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        if len(inits) != 1:
            return None  # inherited: its base classes decide
        return _names(inits[0], skip_first=True)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _names(node, skip_first=False)
    return None


def _binds(node: ast.stmt, name: str) -> bool:
    """Whether the top-level statement `node` binds `name` in any way (a def, a class, an assignment, an import,
    a block that may)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name or a.name == "*" for a in node.names)
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node)) \
        or any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
               for n in ast.walk(node) if n is not node)


def _names(function: ast.FunctionDef | ast.AsyncFunctionDef, *, skip_first: bool) -> list[str] | None:
    """Parameters a keyword can fill (positional-only ones cannot); None with `**kwargs` or a decorator."""
    if function.decorator_list or function.args.kwarg is not None:
        return None
    positional = [*function.args.posonlyargs, *function.args.args]
    if skip_first and positional:
        positional = positional[1:]
    keyword = [a.arg for a in positional if a not in function.args.posonlyargs]
    return [*keyword, *(a.arg for a in function.args.kwonlyargs)]
