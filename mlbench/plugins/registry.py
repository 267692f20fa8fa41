"""The backend registry: every `BackendSpec` published under the `mlbench.backends` entry-point group.

mlbench's own backends register exactly as an outside package would, in its `pyproject.toml`:

    [project.entry-points."mlbench.backends"]
    coreml = "mlbench.backends.coreml.spec:SPEC"

so adding a backend is its folder plus one registration line. The registry is read once per process.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any

from mlbench.errors import UserError
from mlbench.plugins.spec import BackendSpec, DeviceInfo, MetricFamily

GROUP = "mlbench.backends"


@functools.cache
def specs() -> dict[str, BackendSpec]:
    """Every registered backend by name, in display order (built-ins first, then by name)."""
    found: dict[str, BackendSpec] = {}
    for entry in entry_points(group=GROUP):
        if entry.name in found:
            continue  # the same distribution seen twice on sys.path (an editable install and a copy)
        try:
            spec = entry.load()
        except Exception as exc:  # an outside package's entry point: whatever it raises becomes one line
            raise UserError(f"backend '{entry.name}' ({entry.value}) cannot be loaded: "
                            f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(spec, BackendSpec) or spec.name != entry.name:
            raise UserError(f"entry point '{entry.name}' in group {GROUP} must name a BackendSpec called "
                            f"'{entry.name}', got {entry.value}")
        found[entry.name] = spec
    if not found:
        raise UserError(f"no backend is registered under the '{GROUP}' entry points: is mlbench installed "
                        "(pip install -e .)?")
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def get(name: str) -> BackendSpec:
    return specs()[name]


def backend_class(name: str) -> Any:
    """The backend's `Backend` subclass (see BackendSpec.backend_class)."""
    return get(name).backend_class()


def devices() -> dict[str, DeviceInfo]:
    """Every device any backend places operations on, in display order."""
    merged: dict[str, DeviceInfo] = {}
    for spec in specs().values():
        for device in spec.devices:
            merged.setdefault(device.name, device)
    return dict(sorted(merged.items(), key=lambda item: item[1].rank))


def packages() -> tuple[str, ...]:
    """Distributions the backends ask the machine snapshot to record, without repeats."""
    return tuple(dict.fromkeys(p for spec in specs().values() for p in spec.packages))


def default_rules() -> tuple[str, ...]:
    return tuple(dict.fromkeys(r for spec in specs().values() for r in spec.default_rules))


def metric_families() -> tuple[MetricFamily, ...]:
    """The metric families every backend adds to the catalog, first registration of a prefix wins."""
    merged: dict[str, MetricFamily] = {}
    for spec in specs().values():
        for family in spec.metrics:
            merged.setdefault(family.prefix, family)
    return tuple(merged.values())
