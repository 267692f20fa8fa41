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


LAYERS = (
    "mlbench", "errors", "units", "cpus", "machine_load", "thermal", "stability", "records", "overflow", "timing", "sustained",
    "cold_start", "thread_check", "memory", "verify", "localization",
    "plugins", "metrics", "machine", "store", "config", "matrix", "compare", "sources", "generate", "plan_diff",
    "report", "backends", "validate", "run", "cli", "__main__",
)
"""mlbench's rooms (a top-level package or module) from the ground floor up, declared once: a room imports
only rooms before it. `plugins` (the registry and what a backend publishes) is the ground floor that config,
reports, compare and the CLI read backends through; `validate` checks a pipeline whole, above what it
consults; `backends` stands above the core it uses; `run` and `cli` at the top. `stability` (a figure's grade,
pure) sits below `records`, which carry the grade."""


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mlbench"


def test_rooms_import_only_rooms_below_them():
    mods = _modules()
    rooms = {_room(name) for name in mods}
    assert rooms == set(LAYERS), f"rooms not in LAYERS: {sorted(rooms - set(LAYERS))}; gone: {sorted(set(LAYERS) - rooms)}"
    level = {room: i for i, room in enumerate(LAYERS)}
    upward = sorted(f"{name} -> {target}" for name, path in mods.items() for target in _imports(name, path, set(mods))
                    if level[_room(target)] > level[_room(name)])
    assert upward == []


def test_every_package_has_its_test_folder():
    """tests/ mirrors mlbench/: each top-level package and each backend has a folder of its tests."""
    tests = Path(__file__).resolve().parent
    packages = [p.relative_to(PACKAGE) for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    packages += [p.relative_to(PACKAGE) for p in (PACKAGE / "backends").iterdir() if (p / "__init__.py").exists()]
    missing = [str(p) for p in packages if not any((tests / p).glob("test_*.py"))]
    assert missing == []


def test_test_files_are_named_by_subject_not_by_round():
    tests = Path(__file__).resolve().parent
    names = [p.name for p in tests.rglob("test_*.py")]
    assert [n for n in names if re.search(r"_v\d+\.py$|^test_zz|_new\.py$|_old\.py$", n)] == []
