"""What a backend tells the rest of mlbench about itself: one `BackendSpec` per backend package.

The core (config, matrix, runner, reports, compare, machine snapshot, CLI) reads specs from the
registry and never names a backend or a device. A spec is light: pydantic models and strings
naming the heavy parts (`"module:attr"`), which are imported only when a run needs them, so
`mlbench validate` never imports torch, coremltools or onnxruntime.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Literal

REFERENCE = "torch/cpu/float32"
"""The variant every other is verified against: eager PyTorch, float32, on the CPU."""


def load_attr(path: str) -> Any:
    """The object a `"package.module:attr"` string names."""
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class DeviceInfo:
    """A place where operations run, as placement summaries name it (`neural_engine`, `gpu`, `cpu`)."""

    name: str
    label: str
    short: str
    color: str
    rank: int = 50
    """Display order across backends: lower first (the accelerator a backend prefers comes first)."""


@dataclass(frozen=True)
class Deployment:
    """Where a variant ships, as advice ("which variant to ship") groups variants: a star is given among the
    variants of one deployment only, so an iPhone estimate is never ranked against an x86 measurement."""

    name: str
    label: str
    basis: str
    """How the group's latency figures compare, in words (what they stand for, and on what)."""
    rank: int = 50
    """Display order: lower first."""


APPLE_DEVICES = Deployment(
    name="apple", label="Apple devices", rank=10,
    basis="compared by one chip: measured where this machine ran it (macOS), else estimated for the pipeline's "
    "first estimate_on chip")
ANDROID = Deployment(
    name="android", label="Android", rank=20,
    basis="measured on this machine's CPU: a stand-in for a phone's CPU, not a phone's latency")
SERVER_CPU = Deployment(
    name="server", label="server or desktop CPU", rank=30, basis="measured on this machine")
"""The deployment targets a backend's variants can ship to; a backend names its own (`BackendSpec.deployment`)."""


@dataclass(frozen=True)
class MetricFamily:
    """Metrics a backend adds to the catalog under one prefix, named by the pipeline: `prefix` + an id
    (e.g. `latency.estimated.` + a chip id). Compare rules may name any of them."""

    prefix: str
    placeholder: str
    """What follows the prefix, in words, e.g. `chip` (shown as `latency.estimated.<chip>`)."""
    unit: str
    label: str
    """Column or row label; `{name}` stands for what follows the prefix, e.g. `≈ms {name}`."""
    describe: str
    """One line on what the figures are, for the notes under a report's table."""
    better: Literal["lower", "higher"] | None = None
    column: bool = False
    """Reports show one column per such metric found in a model's records."""


@dataclass(frozen=True)
class InspectCommand:
    """`mlbench inspect PATH` for the artifact files this backend makes."""

    suffixes: tuple[str, ...]
    describe: str
    configure: str
    """"module:function(parser)" adding this backend's inspect options (must stay light)."""
    run: str
    """"module:function(args) -> int" doing the inspection."""


@dataclass(frozen=True)
class BackendSpec:
    """One backend: its target model, its class, and what the core needs to know to show it."""

    name: str
    target: type[Any]
    """The backend's target model, a `mlbench.config.base.TargetBase` subclass (typed loosely: the spec sits
    below config, which builds its target union from these)."""
    backend: str
    """"module:Class" of the Backend subclass; imported only when a variant is exported or measured."""
    packages: tuple[str, ...] = ()
    """Distributions whose versions the machine snapshot records."""
    warmup: tuple[str, ...] = ()
    """"module:function" calls that ready a fresh export child for this backend's exports before its first
    request (a converter's import, done quietly); when empty, each of `packages` is imported."""
    devices: tuple[DeviceInfo, ...] = ()
    """Devices its placement summaries use, each counted in `placement.<device>` fractions."""
    recipes: Any = None
    """A pydantic type for `optimizations:` entries this backend's targets refer to, or None."""
    report_sections: tuple[str, ...] = ()
    """"module:function(records, artifacts) -> list[str]" Markdown sections added below each model's table."""
    default_rules: tuple[str, ...] = ()
    """Compare rules this backend adds to mlbench's defaults (e.g. a placement share that must not fall)."""
    inspect: InspectCommand | None = None
    rules: str | None = None
    """"module:function() -> list[dict]" listing the rules behind this backend's estimates (id, kind,
    applies_to, confidence, says, source), for `mlbench rules`."""
    metrics: tuple[MetricFamily, ...] = ()
    """Families of metrics its records carry beyond mlbench's own catalog."""
    commands: tuple[str, ...] = ()
    """"module:register(subparsers)" functions adding this backend's own subcommands (e.g. `calibrate`)."""
    order: int = 100
    """Position in the schema and in listings (built-ins first)."""
    localize: str | None = None
    """"module:function(backend, model, variant) -> mlbench.localization.ErrorLocalization": where a variant
    loses accuracy, op by op (`mlbench explain`); None when this backend's runtime cannot expose intermediates."""
    localize_missing: str = "mlbench does not localize this backend's error yet (docs/accuracy.md)"
    """Why `localize` is None, in a few words."""
    requires: tuple[tuple[str, str], ...] = ()
    """(import name, distribution) pairs without which none of its variants can run: a run whose every variant
    lacks one stops before starting, naming `extra` (`mlbench.run.preflight`)."""
    extra: str | None = None
    """The `mlbench-ondevice[EXTRA]` that installs `requires`."""
    deployment: Deployment = SERVER_CPU
    """Where this backend's variants ship (what ship advice groups them by)."""
    deployment_by_axis: tuple[str, dict[str, Deployment]] | None = None
    """(axis, value → deployment) for a backend whose variants ship to different places by one axis (ExecuTorch
    by its delegate); a value not listed ships to `deployment`."""
    extras: dict[str, Any] = field(default_factory=dict)

    def deployment_of(self, axes: dict[str, str]) -> Deployment:
        """Where the variant with these axis values ships."""
        if self.deployment_by_axis is not None:
            axis, chosen = self.deployment_by_axis
            return chosen.get(axes.get(axis, ""), self.deployment)
        return self.deployment

    def warmups(self) -> tuple[str, ...]:
        """What a fresh export child does for this backend before its first request: `warmup`, else
        an import of each of `packages`."""
        return self.warmup or self.packages

    def backend_class(self) -> Any:
        """The `mlbench.backends.base.Backend` subclass. Typed loosely on purpose: naming Backend here
        would make the ground floor import the backends above it."""
        return load_attr(self.backend)


CPU = DeviceInfo(name="cpu", label="CPU", short="CPU", color="#ef6c00", rank=90)
GPU = DeviceInfo(name="gpu", label="GPU", short="GPU", color="#1565c0", rank=50)
"""Devices every runtime has; a backend adds its own accelerators beside them."""
