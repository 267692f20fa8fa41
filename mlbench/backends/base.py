"""The contract every backend fulfils: export what shapes an artifact, then measure a variant.

The runner owns ordering, caching decisions, failures and journaling; a backend only knows how
to turn a loaded model into an artifact and an artifact into figures.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mlbench.records import ArtifactInfo, Latency, Metric, Placement, Verification

if TYPE_CHECKING:
    from mlbench.config.base import TargetBase
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel
    from mlbench.store.cache import ArtifactCache
    from mlbench.thread_check import ThreadCheck


NO_SOURCE = "no model source to compare with (the model names only existing artifacts)"
"""Why a variant measured from an existing artifact has no verification."""


class VariantSkipped(Exception):
    """This machine cannot run the variant (no CUDA, not macOS, provider missing): not a failure."""


def require_modules(backend: str, extra: str, modules: tuple[tuple[str, str], ...]) -> None:
    """VariantSkipped naming the extra when a package the backend imports is not installed (`modules`:
    (import name, distribution name) pairs): this machine cannot run the variant, which is no failure of
    the model. `find_spec` looks without importing."""
    import importlib.util

    missing = [dist for module, dist in modules if importlib.util.find_spec(module) is None]
    if missing:
        names = ", ".join(missing[:-1]) + f" and {missing[-1]}" if len(missing) > 1 else missing[0]
        raise VariantSkipped(f"the {backend} backend needs {names}, which {'is' if len(missing) == 1 else 'are'} "
                             f"not installed: pip install 'mlbench-ondevice[{extra}]'")


@dataclass
class Exported:
    """What `export` hands to `measure`: an in-memory object, a cached file, or both."""

    payload: Any
    info: ArtifactInfo | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Measurement:
    metrics: dict[str, Metric] = field(default_factory=dict)
    latency: Latency | None = None
    verify: Verification | None = None
    placement: Placement | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallTimer:
    """An artifact loaded once and ready to be timed in blocks of calls, on demand: what `mlbench ab`
    interleaves with another side's timer. `context` is entered around each block (a backend's thread
    settings, torch's inference mode); `release` frees what was loaded."""

    call: Callable[[], Any]
    context: Callable[[], AbstractContextManager[Any]] = nullcontext
    release: Callable[[], None] | None = None
    threads: int | None = None
    """The runtime's configured thread count, where `set_threads` can switch its pool (`mlbench.thread_check`)."""
    set_threads: Callable[[int], None] | None = None
    """Switches the pool `call` runs on to a count, from then on (inside `context`, whose settings it outlives)."""

    def time(self, calls: int, warmup: int) -> list[float]:
        """Milliseconds of each of `calls` timed calls, after `warmup` untimed ones."""
        from mlbench.timing import time_block

        with self.context():
            return time_block(self.call, calls=calls, warmup=warmup)

    def check_threads(self) -> ThreadCheck | None:
        """The thread-pool stall check (`mlbench.thread_check.check_threads`) on this copy; None where its pool
        cannot be switched or has one thread."""
        from mlbench.thread_check import check_threads
        from mlbench.timing import time_once

        if self.set_threads is None:
            return None
        with self.context():
            first_ms, _ = time_once(self.call)
            return check_threads(self.call, configured=self.threads, first_ms=first_ms, set_threads=self.set_threads)

    def use_threads(self, count: int) -> None:
        """Every block from now on on a pool of `count` threads."""
        if self.set_threads is not None:
            with self.context():
                self.set_threads(count)

    def close(self) -> None:
        if self.release is not None:
            self.release()
        self.call = _released


def _released() -> Any:
    raise RuntimeError("this timer was closed")


class Backend:
    """Base class: one instance per target entry of a pipeline."""

    name: ClassVar[str]
    cached_export: ClassVar[bool] = False
    """True when export() builds a file in the artifact cache: such exports may run in parallel
    worker processes ahead of measurement."""
    generative: ClassVar[bool] = False
    """True when export() and measure() handle a generative model's variants (`generate:`: prefill and decode
    against a key/value cache, `variant.prompt` the prompt length); otherwise the runner skips them, saying
    so (`generation_unsupported`), and the backend never sees one."""
    localizes_against_export: ClassVar[bool] = True
    """True when the backend's localization compares a variant with the same model's float32 artifact, exported
    through the cache (its key and checksum enter the cached localization's key, `localize_hook`); False when
    the reference is built from the model itself, whose digest stands for it."""

    def __init__(self, target: TargetBase, config: PipelineConfig, cache: ArtifactCache) -> None:
        self.target = target
        self.config = config
        self.cache = cache
        self.base_dir: Path | None = None  # the pipeline file's folder (set by the runner)

    def resolve(self, path: Path) -> Path:
        """A path from the pipeline file, relative to its folder unless absolute."""
        return path if path.is_absolute() or self.base_dir is None else (self.base_dir / path).resolve()

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        """Build (or fetch from the cache) what the variant's artifact axes describe."""
        raise NotImplementedError

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        """Time, verify and analyse one variant. Raise VariantSkipped when this machine can't."""
        raise NotImplementedError

    def memory_round(self, model: LoadedModel, exported: Exported, variant: Variant) -> dict[str, Metric] | None:
        """One more load-and-predict round of `memory.load` and `memory.peak`, in a fresh child (the run asks for
        `memory.rounds` of them and records their median): None where this backend measures memory once."""
        return None

    def measure_times(self, variant: Variant) -> bool:
        """Whether `measure` times anything on this machine. False lets a local run on several cores
        measure the variant beside the exports (other work cannot disturb what it finds); True, the
        safe default, keeps it in the phase where measurements run one at a time."""
        return True

    def untimeable(self, variant: Variant) -> str | None:
        """Why `call_timer` cannot time this variant on this machine, asked before anything is exported;
        None when it can."""
        if type(self).call_timer is Backend.call_timer:
            return f"the {self.name} backend cannot time an artifact's calls on demand"
        return None

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        """Load the variant's artifact as `measure` would and return a timer of its calls, for
        measurements interleaved with another artifact's. Raise VariantSkipped when this machine can't."""
        raise VariantSkipped(f"the {self.name} backend cannot time an artifact's calls on demand")


def generation_unsupported(backend: type[Backend] | Backend, model: str) -> str | None:
    """Why `backend` skips a variant of the generative model `model`; None when it runs them."""
    if backend.generative:
        return None
    return (f"the {backend.name} backend does not run generative models yet: model '{model}' has a generate "
            "block (prefill and decode against a key/value cache)")


def runtime_metrics(latency: Latency, *, first_ms: float, load_ms: float | None = None,
                    verify: Verification | None = None) -> dict[str, Metric]:
    """The measured figures every runtime reports the same way, so reports and compare rules line up."""
    metrics = {
        "first_call": Metric.measured(first_ms, "ms"),
        **{name: Metric(value=value, unit="ms", source="measured", stability=latency.stability)  # the grade rides
           for name, value in (("latency.median", latency.median), ("latency.best", latency.best),  # on each figure
                               ("latency.p90", latency.p90))},
    }
    if load_ms is not None:
        metrics["load_time"] = Metric.measured(load_ms, "ms")
    if verify is not None:
        why = verify.why_not_finite  # an overflow makes these inf: absent, saying so
        metrics["verify.max_abs"] = Metric.figure(verify.max_abs, "abs", verify.source, why_not_finite=why)
        metrics["verify.max_rel"] = Metric.figure(verify.max_rel, "rel", verify.source, why_not_finite=why)
        if verify.snr_db is not None:
            metrics["verify.snr_db"] = Metric.figure(verify.snr_db, "dB", verify.source, why_not_finite=why)
        if verify.top1_agreement is not None:
            metrics["verify.top1_agreement"] = Metric(value=verify.top1_agreement, unit="ratio", source=verify.source)
    return metrics


def existing_artifact_info(path: Path, export_path: str) -> ArtifactInfo:
    """An artifact the user already has: no export; its key is the sha256 of its bytes."""
    from mlbench.store.hashing import path_size, sha256_path

    return ArtifactInfo(key=sha256_path(path), cache_hit=False, export_seconds=0.0, path=str(path),
                        size_bytes=path_size(path), export_path=export_path)


def placement_metrics(placement: Placement) -> dict[str, Metric]:
    """`placement.<device>` (share of the cost: what a device's work weighs; absent, with the reason, where
    nothing says what each operation costs), `placement.count.<device>` (share of compute operations; 0 for
    the usual devices it did not use) and `placement.switches`, with the placement's own source, for
    reports and compare rules."""
    devices = dict.fromkeys(["neural_engine", "gpu", "cpu", *placement.by_count, *(placement.by_cost or {})])
    metrics = {}
    for device in devices:
        metrics[f"placement.{device}"] = (
            Metric(value=placement.by_cost.get(device, 0.0), unit="ratio", source=placement.source)
            if placement.by_cost else
            Metric.absent("ratio", f"{placement.method} gave no cost per operation; placement.count.{device} "
                          "is the share by operation count"))
    for device in devices:
        metrics[f"placement.count.{device}"] = Metric(value=placement.by_count.get(device, 0.0), unit="ratio",
                                                      source=placement.source)
    metrics["placement.switches"] = Metric(value=placement.switches, unit="count", source=placement.source)
    return metrics
