"""The ExecuTorch backend: a cached .pte per delegate × precision × recipe, run by executorch.runtime.

Per variant:

1. the program is loaded and timed (``load_time``), its first call timed apart (``first_call``), then the
   pipeline's latency loop runs on it (the shared timing loop: warmup, median, best, p90, raw samples);
2. the outputs are verified against the eager float32 reference, over verify.samples input sets;
3. a separate, event-traced load of the same program runs ``profile_runs`` times: ETDump gives the
   per-call table and the measured time share of each delegate.

Placement (which nodes each delegate took, what stays on portable kernels, the boundaries) is read from
the lowered graph at export: a fact of the program on any OS. The Core ML delegate runs only where the
ExecuTorch runtime has CoreMLBackend registered (macOS); elsewhere its latency and verification are
absent with the reason, and its partition and size are still reported.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench import __version__
from mlbench.backends.base import (
    Backend,
    CallTimer,
    Exported,
    Measurement,
    VariantSkipped,
    placement_metrics,
    require_modules,
    runtime_metrics,
)
from mlbench.backends.cached_export import build_cached
from mlbench.backends.capture import quiet_native_stderr
from mlbench.backends.executorch.export import ETRECORD, PTE, SUMMARY, require_executorch
from mlbench.backends.executorch.target import ExecutorchTarget
from mlbench.config.base import NO_OPTIMIZATION
from mlbench.machine import package_version
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

RUNTIME_BACKENDS = {"xnnpack": "XnnpackBackend", "coreml": "CoreMLBackend"}
RUNTIME_KEEPS = "ExecuTorch's runtime and its kernel and backend registries (Runtime.get(), one per process)"
"""What a cold program load still finds warm: nothing clears it short of a new process."""
TIMED_METRICS = (("load_time", "ms"), ("first_call", "ms"), ("latency.median", "ms"), ("latency.best", "ms"),
                 ("latency.p90", "ms"), ("verify.max_abs", "abs"), ("verify.max_rel", "rel"))


@dataclass
class PteArtifact:
    folder: Path
    summary: dict[str, Any]

    @property
    def pte(self) -> Path:
        return self.folder / PTE


def artifact_key_inputs(model: LoadedModel, delegate: str, precision: str, recipe: dict[str, Any] | None) -> dict:
    """Everything that shapes the .pte: delegate, precision, recipe. Measurement settings are absent."""
    versions = {name: package_version(name) for name in ("torch", "executorch", "torchao")}
    if delegate == "coreml":
        versions["coremltools"] = package_version("coremltools")
        versions["layout"] = "coreml programs unpacked"  # older folders lack coreml/ for the analysis
    return {
        "backend": "executorch",
        "format": "pte",
        "model_digest": model.digest,
        "inputs": [i.export_signature() for i in model.spec.inputs],
        "options": {"delegate": delegate, "precision": precision, "recipe": recipe},
        "versions": {**versions, "mlbench": __version__},
    }


class ExecutorchBackend(Backend):
    name = "executorch"
    cached_export = True
    localizes_against_export = False  # its reference is the model's float32 program before lowering
    target: ExecutorchTarget

    def _recipe(self, variant: Variant) -> dict[str, Any] | None:
        name = variant.axis("optimize")
        if name == NO_OPTIMIZATION:
            return None
        return self.config.optimizations[name].model_dump(exclude_none=True)

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        from mlbench.backends.executorch.export import PteExportResult, export_pte

        require_modules(self.name, "executorch", (("executorch", "executorch"),))
        require_executorch()
        delegate, precision = variant.axis("delegate"), variant.axis("precision")
        recipe = self._recipe(variant)

        def export(folder: Path) -> PteExportResult:
            return export_pte(model.torch_module, model.example_inputs, delegate=delegate, precision=precision,
                              recipe=recipe, dest=folder)

        cached = build_cached(self.cache, artifact_key_inputs(model, delegate, precision, recipe), export,
                              label=variant.artifact_id)
        summary = json.loads((cached.path / SUMMARY).read_text())
        details = {"export": cached.facts("export_path", "warnings"),
                   "partition": {k: summary[k] for k in ("delegates", "portable_ops", "switches", "planned_memory")}}
        # the size a device downloads: the .pte alone (the ETRecord and program.json beside it are for mlbench)
        info = cached.info.model_copy(update={"size_bytes": (cached.path / PTE).stat().st_size})
        return Exported(payload=PteArtifact(cached.path, summary), info=info, details=details)

    def _unavailable(self, delegate: str) -> str | None:
        """Why this machine's ExecuTorch runtime cannot run the delegate, or None."""
        backend = RUNTIME_BACKENDS.get(delegate)
        if backend is None:
            return None
        from executorch.runtime import Runtime

        if Runtime.get().backend_registry.is_available(backend):
            return None
        system = {"linux": "Linux", "win32": "Windows"}.get(sys.platform, sys.platform)
        where = "runs only on macOS and iOS" if delegate == "coreml" else "is not built into this runtime"
        return f"the ExecuTorch {backend} {where}; this machine runs {system}"

    def measure_times(self, variant: Variant) -> bool:
        return not (variant.axis("delegate") == "coreml" and sys.platform != "darwin")

    def untimeable(self, variant: Variant) -> str | None:
        if variant.axis("delegate") == "coreml" and sys.platform != "darwin":
            return "the ExecuTorch CoreMLBackend runs only on macOS and iOS"
        return None

    def _embedded(self, artifact: PteArtifact, details: dict[str, Any], exported: Exported | None = None,
                  label: str = "") -> dict[str, Metric]:
        """The Core ML analysis of the programs the Core ML delegate embeds: `coreml_delegate.<device>` and
        `latency.estimated.<chip>` (estimated); their placement and estimate parts go to details. Computed once
        per artifact and chips, and cached beside it (`cached_figures`)."""
        from mlbench.backends.cached_figures import DerivedFigures, cached_figures, code_version
        from mlbench.backends.executorch.coreml_programs import analyse_programs

        packages = artifact.summary.get("coreml_programs") or []
        if not packages:
            return {}
        estimate_on = list(self.target.estimate_on)

        def compute() -> DerivedFigures:
            metrics, programs = analyse_programs(artifact.folder, packages, estimate_on)
            return DerivedFigures(metrics=metrics, details={"coreml_programs": programs})

        code = code_version("mlbench.backends.apple", "mlbench.backends.executorch.coreml_programs")
        figures = cached_figures(self.cache, exported.info if exported is not None else None,
                                 "executorch.coreml_delegate_estimates", {"estimate_on": estimate_on, "code": code},
                                 compute, work="estimated", label=label)
        details["coreml_programs"] = figures.details["coreml_programs"]
        return dict(figures.metrics)

    def _load(self, artifact: PteArtifact) -> Any:
        from executorch.runtime import Runtime

        try:
            with quiet_native_stderr():
                return Runtime.get().load_program(str(artifact.pte)).load_method("forward")
        except Exception as exc:  # noqa: BLE001 - a missing kernel or a bad program: the variant's one line
            raise RuntimeError(f"ExecuTorch could not load the program: {_first(exc)}") from None

    def memory_round(self, model: LoadedModel, exported: Exported, variant: Variant) -> dict[str, Metric] | None:
        """The program loaded inside the meter's span (as `measure` loads it), then its first call: what
        `measure` reads its memory after (before the thread check's reloads). None where nothing runs here."""
        from mlbench.memory import MemoryRound

        if self._unavailable(variant.axis("delegate")) or model.alternative(variant.shape) != 0:
            return None
        artifact: PteArtifact = exported.payload

        def load() -> Any:
            method = self._load(artifact)
            inputs = _inputs(model, 0, 0)
            return lambda: method.execute(inputs)

        return MemoryRound(1).one(load)

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        why = self._unavailable(variant.axis("delegate"))
        if why:
            raise VariantSkipped(why)
        method = self._load(exported.payload)
        inputs = _inputs(model, 0, model.alternative(variant.shape))
        return CallTimer(lambda: method.execute(inputs))

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        from mlbench.backends.executorch.profile import build_placement, op_time_table
        from mlbench.backends.executorch.threads import PoolSwitch
        from mlbench.cold_start import evict_files, load_metrics
        from mlbench.memory import MemoryMeter
        from mlbench.sustained import sustained_figures
        from mlbench.thread_check import timed_with_check
        from mlbench.timing import time_calls, time_once
        from mlbench.verify import compare_samples

        artifact: PteArtifact = exported.payload
        delegate, precision = variant.axis("delegate"), variant.axis("precision")
        size = artifact.pte.stat().st_size
        metrics = {"size.package": Metric.measured(size, "bytes"),
                   "memory.planned": Metric.measured(artifact.summary["planned_memory"], "bytes"),
                   "ops.compute": Metric.measured(len(artifact.summary["ops"]), "count")}
        details: dict[str, Any] = {"partition": {k: artifact.summary[k] for k in ("delegates", "portable_ops")
                                                 if k in artifact.summary}}
        if "flops" in artifact.summary:
            details["partition"]["flops"] = artifact.summary["flops"]
        if delegate == "coreml":
            metrics.update(self._embedded(artifact, details, exported, variant.artifact_id))
        why = self._unavailable(delegate)
        if why:
            placement = build_placement(artifact.summary, delegate, None)
            metrics.update(placement_metrics(placement))
            for name, unit in TIMED_METRICS:
                metrics[name] = Metric.absent(unit, why)
            return Measurement(metrics=metrics, placement=placement, details=details)
        alternative = model.alternative(variant.shape)
        if alternative != 0:
            raise VariantSkipped("the .pte is exported for the first input shape only")
        details["load_caches"] = evict_files([artifact.pte], RUNTIME_KEEPS)  # the first load is the cold one
        meter = MemoryMeter.start()
        load_ms, loaded = time_once(lambda: self._load(artifact))
        held = [loaded]  # the one reference to the method: the thread check replaces it (see threads.py)
        loaded = None
        inputs = _inputs(model, 0, alternative)
        meter.loaded()
        first_ms, first_outputs = time_once(lambda: held[0].execute(inputs))
        metrics.update(meter.metrics())  # before the thread check, whose reloads are not this load's
        details["memory"] = meter.facts()
        switch = PoolSwitch(held, lambda: self._load(artifact))
        configured = switch.configured()
        settings = self.config.latency
        try:
            latency, check = timed_with_check(
                lambda: held[0].execute(inputs), configured=configured, first_ms=first_ms, set_threads=switch,
                time_with=lambda count: time_calls(lambda: held[0].execute(inputs), warmup=settings.warmup,
                                                   repeats=settings.repeats, min_time_s=settings.min_time_s,
                                                   max_repeats=settings.max_repeats, threads=count))
            if check is not None:
                details["thread_check"] = check.details()
            sustained_figures(lambda: held[0].execute(inputs), settings, metrics, details)
            pairs = [(model.sample(0, alternative)[1], _numpy(first_outputs))]
            for index in range(1, self.config.verify.samples):
                pairs.append((model.sample(index, alternative)[1],
                              _numpy(held[0].execute(_inputs(model, index, alternative)))))
        finally:
            switch.restore(configured)  # the traced program runs alone, on the pool this process had
        warm_ms, _ = time_once(lambda: self._load(artifact))  # the second load: the warm one
        metrics.update(load_metrics(load_ms, warm_ms))
        recipe = variant.axis("optimize")
        verify = compare_samples(pairs, tolerance=self.config.verify.tolerance_for(precision, recipe),
                                 min_snr_db=self.config.verify.min_snr_db_for(precision, recipe),
                                 reference_name=REFERENCE)
        etrecord = artifact.folder / ETRECORD
        op_time = op_time_table(artifact.pte, etrecord, inputs, self.target.profile_runs)
        placement = build_placement(artifact.summary, delegate, op_time)
        metrics.update(runtime_metrics(latency, first_ms=first_ms, load_ms=load_ms, verify=verify))
        metrics.update(placement_metrics(placement))
        details["op_time"] = op_time
        details["runtime"] = {"executorch": package_version("executorch")}
        from mlbench.backends.executorch.localize import localize_variant
        from mlbench.backends.localize_hook import localize_if_close

        details.update(localize_if_close(self, model, variant, verify, localize_variant, existing=False,
                                         info=exported.info))
        return Measurement(metrics=metrics, latency=latency, verify=verify, placement=placement, details=details)


def _first(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _inputs(model: LoadedModel, sample: int, alternative: int) -> list[Any]:
    return [t.detach().cpu().contiguous() for t in model.sample(sample, alternative)[0]]


def _numpy(outputs: Any) -> list[Any]:
    return [o.detach().float().numpy() if hasattr(o, "detach") else o for o in outputs]
