"""The shape of the house: no import cycles in mlbench/ (lazy and TYPE_CHECKING imports count: they
are dependencies of the design too), no module past ~450 lines, and no core module that names a
backend or a device — the core reads the backend registry instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mlbench.plugins.registry import devices, specs

PACKAGE = Path(__file__).resolve().parent.parent / "mlbench"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return (found & known) - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles():
    mods = _modules()
    graph = {name: _imports(name, path, set(mods)) for name, path in mods.items()}
    assert _cycles(graph) == []


def test_no_module_is_too_large():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in sizes.items() if n > 450} == {}


def test_the_core_names_no_backend_or_device():
    words = "|".join(re.escape(w) for w in [*(s for s in specs() if s != "torch"), *devices()] if w not in ("cpu", "gpu"))
    quoted = re.compile(rf"""["']({words})["']""")
    core = {name: path for name, path in _modules().items() if not name.startswith("mlbench.backends")}
    assert [name for name, path in core.items() if quoted.search(path.read_text(encoding="utf-8"))] == []
