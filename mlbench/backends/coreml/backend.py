"""The Core ML backend: cached export, static analysis everywhere, measurement on macOS only.

On Linux (or any non-macOS machine) a variant still exports, is analysed, and reports its
static figures; its latency and verification are absent with the reason, never zero.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench import __version__
from mlbench.backends.base import (
    Backend,
    CallTimer,
    Exported,
    Measurement,
    VariantSkipped,
    existing_artifact_info,
    placement_metrics,
    require_modules,
)
from mlbench.backends.cached_export import build_cached
from mlbench.backends.coreml.artifact import CoremlArtifact
from mlbench.backends.coreml.emulated_verify import verification_metrics
from mlbench.backends.coreml.target import LOCAL_DEVICE, CoremlTarget, recipe_dict
from mlbench.backends.localize_hook import localize_if_close
from mlbench.machine import package_version
from mlbench.records import Metric

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import ProgramAnalysis
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

__all__ = ["CoremlArtifact", "CoremlBackend", "artifact_key_inputs", "placement_for", "static_metrics"]

NOT_MACOS = "Core ML runs only on macOS; this machine runs {system}"
PACKAGE_LAYOUT = 2
"""What an mlbench package holds beyond the program; bump when it changes (it is part of the cache key).
2: each op's PyTorch module and source line in the metadata (``origins``)."""


def artifact_key_inputs(model: LoadedModel, precision: str, recipe: dict | None, deployment_target: str) -> dict:
    """Everything that shapes a Core ML package. compute_units is absent: it is chosen at load time."""
    return {
        "backend": "coreml",
        "format": "mlprogram",
        "layout": PACKAGE_LAYOUT,
        "model_digest": model.digest,
        "inputs": [i.export_signature() for i in model.spec.inputs],
        "options": {"precision": precision, "optimization": recipe, "deployment_target": deployment_target},
        "versions": {"coremltools": package_version("coremltools"), "torch": package_version("torch"), "mlbench": __version__},
    }


def static_metrics(analysis: ProgramAnalysis) -> dict[str, Metric]:
    """Figures read from the saved package: sizes and counts are exact (measured on this machine's
    copy); MACs/FLOPs come from mlbench's per-op formulas (estimated)."""
    totals = analysis.totals
    metrics = {
        "size.package": Metric.measured(analysis.package_size_bytes, "bytes"),
        "ops.compute": Metric.measured(totals.compute_ops, "count"),
    }
    for name, value, unit in (("size.weights", totals.weight_bytes, "bytes"), ("params", totals.params, "count")):
        metrics[name] = (Metric.measured(value, unit) if value is not None
                         else Metric.absent(unit, "not analysed for this model type"))
    if totals.macs is not None and totals.macs_complete:
        metrics["macs"] = Metric.estimated(totals.macs, "count")
    else:
        metrics["macs"] = Metric.absent("count", "some operations have unknown shapes")
    return metrics


class CoremlBackend(Backend):
    name = "coreml"
    cached_export = True
    generative = True  # a generate: model takes generate_backend's path (state, prefill and decode functions)
    target: CoremlTarget

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        require_modules(self.name, "coreml", (("coremltools", "coremltools"),))
        from mlbench.backends.apple.analysis import ANALYSIS_VERSION, ProgramAnalysis, analyse_package
        from mlbench.backends.coreml.deployment import check_deployment_target, shared_deployment_target
        from mlbench.backends.coreml.export import ExportResult, export_coreml

        precision = variant.axis("precision")
        if self.target.package is not None:
            return self._existing(self.resolve(self.target.package), precision)
        if model.spec.generate is not None:
            from mlbench.backends.coreml.generate.backend import export_generative

            return export_generative(self, model, variant, artifact_key_inputs)
        recipe = recipe_dict(self.config.optimizations.get(variant.axis("optimize")), self.config.optimizations)
        if self.target.deployment_target is not None:
            deployment_target = check_deployment_target(self.target.deployment_target, precision, recipe,
                                                        enumerated_inputs=model.spec.enumerated_inputs)
        else:
            deployment_target = shared_deployment_target(precision, recipe, self._siblings(variant),
                                                         enumerated_inputs=model.spec.enumerated_inputs)
        calibration = (calibration_data(model, self.config.verify.samples)
                       if recipe is not None and recipe["kind"] == "linear_quantize_activations" else None)

        def export(folder: Path) -> ExportResult:
            return export_coreml(model.torch_module, model.example_inputs, model.input_names, precision=precision,
                                 optimization=recipe, deployment_target=deployment_target, dest=folder,
                                 inputs=list(model.spec.inputs), calibration=calibration)

        def own_facts(result: ExportResult) -> dict[str, Any]:
            return {"deployment_target": result.deployment_target,
                    # derived from the package and stored beside it, so a cache hit needs no coremltools
                    "analysis": analyse_package(result.artifact).model_dump(mode="json")}

        key_inputs = artifact_key_inputs(model, precision, recipe, deployment_target)
        if calibration is not None:  # the calibration data shapes an activation-quantized package
            key_inputs["calibration"] = _digest_feeds(calibration)
        cached = build_cached(self.cache, key_inputs, export, label=variant.artifact_id, own_facts=own_facts)
        stored = cached.meta.get("analysis")
        if not isinstance(stored, dict) or stored.get("analysis_version") != ANALYSIS_VERSION:
            stored = None  # stored by an older analysis (or none): read the package again
        analysis = (ProgramAnalysis.model_validate(stored).model_copy(update={"path": str(cached.path)})
                    if stored else analyse_package(cached.path))
        details: dict[str, Any] = {
            "program": analysis.model_dump(mode="json"),
            "export": cached.facts("deployment_target", "fallback_reason", "warnings"),
        }
        return Exported(payload=CoremlArtifact(cached.path, analysis), info=cached.info, details=details)

    def _siblings(self, variant: Variant) -> list[tuple[str, dict | None]]:
        """(precision, recipe) of every variant of `variant`'s model in its sweep target, excludes applied."""
        from mlbench.matrix import expand

        names = {(v.axis("precision"), v.axis("optimize")) for v in expand(self.config)
                 if v.model == variant.model and v.target_index == variant.target_index}
        return [(precision, recipe_dict(self.config.optimizations.get(name), self.config.optimizations))
                for precision, name in sorted(names)]

    def untimeable(self, variant: Variant) -> str | None:
        if on_device(variant) != LOCAL_DEVICE:
            return ON_DEVICE_AB
        return _not_macos() if sys.platform != "darwin" else None

    def measure_times(self, variant: Variant) -> bool:
        return sys.platform == "darwin"  # elsewhere: analysis, estimates and emulated verification only

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        if on_device(variant) != LOCAL_DEVICE:
            raise VariantSkipped(ON_DEVICE_AB)
        if sys.platform != "darwin":
            raise VariantSkipped(_not_macos())
        if model.spec.generate is not None:
            raise VariantSkipped("a generative Core ML variant is timed as prefill and decode steps, not as one call")
        from mlbench.backends.coreml.runtime import prediction_timer

        return prediction_timer(exported.payload, model, variant)

    def _existing(self, path: Path, precision: str) -> Exported:
        """A package the user already has: analysed and measured as it is (no export, no cache)."""
        from mlbench.backends.apple.analysis import analyse_package
        from mlbench.backends.coreml.deployment import ExportError

        if path.suffix != ".mlpackage" and path.suffix != ".mlmodel":
            raise ExportError(f"{path.name} is not a Core ML package (.mlpackage or .mlmodel)")
        analysis = analyse_package(path)
        declared = {"FLOAT16": "float16", "FLOAT32": "float32"}.get(analysis.precision)
        if declared is not None and declared != precision:
            raise ExportError(f"{path.name} computes in {declared}, not {precision}: set precision: {declared}")
        info = existing_artifact_info(path, "existing package")
        details = {"program": analysis.model_dump(mode="json"), "export": {"existing": str(path)}}
        return Exported(payload=CoremlArtifact(path, analysis), info=info, details=details)

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        if (wanted := on_device(variant)) != LOCAL_DEVICE:
            return self._measure_on_device(model, exported, variant, wanted)
        if model.spec.generate is not None:
            from mlbench.backends.coreml.generate.backend import measure_generative

            return measure_generative(self, model, exported, variant, placement_for=placement_for,
                                      static_metrics=static_metrics, not_macos=_not_macos())
        from mlbench.backends.coreml import derived_figures as derived

        artifact: CoremlArtifact = exported.payload
        metrics = static_metrics(artifact.analysis)
        memory, memory_details = derived.memory(self.cache, exported, variant)  # on any OS; once per package
        metrics.update(memory)
        compute_units = variant.axis("compute_units")

        if sys.platform != "darwin":
            estimated = self._estimated(exported, variant)  # once per package, compute units and chips
            placement = estimated.placement
            metrics.update(estimated.metrics)
            details = dict(estimated.details)
            details["memory_estimate"] = memory_details
            emulated, why_not = derived.emulated(self.cache, self.config, exported, model, variant)  # once per inputs
            reason = _not_macos()
            for name, unit in (("load_time", "ms"), ("first_call", "ms"), ("latency.median", "ms"),
                               ("latency.best", "ms"), ("latency.p90", "ms")):
                metrics[name] = Metric.absent(unit, reason)
            # the emulated verification is the headline here: the program is checked on any OS
            metrics.update(verification_metrics(emulated, why_not and f"{why_not}; {reason}"))
            details.update(self._localize(model, exported, variant, emulated))
            return Measurement(metrics=metrics, placement=placement, verify=emulated, details=details)
        from pathlib import Path

        from mlbench.backends.coreml.runtime import measure_package

        # timed first: the load is measured before this variant's compute plan is read, and nothing
        # else (the plan, the interpreter) runs in this process before the timing loop
        result = measure_package(artifact, model, variant, self.config, metrics)
        compiled = result.details.get("compiled_model")
        result.placement = with_reshape_note(placement_for(artifact, compute_units, Path(compiled) if compiled else None),
                                             artifact, self.target.reshape_frequency)
        result.metrics.update(placement_metrics(result.placement))
        result.details.update(self._estimates(artifact, result.placement, result.metrics))
        result.details["memory_estimate"] = memory_details
        emulated, why_not = derived.emulated(self.cache, self.config, exported, model, variant)
        # on macOS the measured verification leads; the emulated one stays beside it, so their
        # difference shows what the hardware's own arithmetic adds
        result.metrics.update(verification_metrics(emulated, why_not, prefix="verify.emulated"))
        if emulated is not None:
            result.details["verify_emulated"] = emulated.model_dump(mode="json")
        result.details.update(self._localize(model, exported, variant, result.verify or emulated))
        return result

    def _localize(self, model: LoadedModel, exported: Exported, variant: Variant, verification: Any) -> dict[str, Any]:
        from mlbench.backends.coreml.localize.variant import localize_variant

        return localize_if_close(self, model, variant, verification, localize_variant,
                                 existing=self.target.package is not None, info=exported.info)

    def _measure_on_device(self, model: LoadedModel, exported: Exported, variant: Variant, wanted: str) -> Measurement:
        """A connected iPhone or iPad (`device:`), through coremltools' remote device (`remote.py`)."""
        from mlbench.backends.coreml.memory_estimate import memory_metrics
        from mlbench.backends.coreml.remote import measure_on_device

        if model.spec.generate is not None:
            raise VariantSkipped("a generative model is not measured on a connected device yet (prefill and decode "
                                 "against state need the local runtime)")
        artifact: CoremlArtifact = exported.payload
        result = measure_on_device(artifact, model, variant, self.config, wanted)
        memory, memory_details = memory_metrics(artifact.package, artifact.analysis)
        result.metrics = {**static_metrics(artifact.analysis), **memory, **result.metrics}
        result.details.update(self._estimates(artifact, result.placement, result.metrics))
        result.details["memory_estimate"] = memory_details
        return result

    def _estimated(self, exported: Exported, variant: Variant) -> Any:
        """Off macOS: the estimated placement at the variant's compute units, its metrics and latency estimates
        (`DerivedFigures`), computed once per package, compute units and chips (`derived_figures.estimates`)."""
        from mlbench.backends.cached_figures import DerivedFigures
        from mlbench.backends.coreml.derived_figures import estimates
        from mlbench.store.hashing import sha256_path

        artifact: CoremlArtifact = exported.payload
        target = self.target

        def compute() -> DerivedFigures:
            placement = with_reshape_note(placement_for(artifact, variant.axis("compute_units"),
                                                        observed=self._observing()), artifact, target.reshape_frequency)
            metrics = placement_metrics(placement)
            details = self._estimates(artifact, placement, metrics)
            return DerivedFigures(metrics=metrics, placement=placement, details=details)

        calibration = None
        if target.calibration is not None:
            path = self.resolve(target.calibration)
            calibration = sha256_path(path) if path.exists() else f"missing: {path}"
        settings = {"estimate_on": list(target.estimate_on), "calibration": calibration,
                    "chip_profiles": {k: v.model_dump(mode="json") for k, v in target.chip_profiles.items()},
                    "reshape_frequency": target.reshape_frequency, "this_machine": machine_chip()}
        return estimates(self.cache, exported, variant, settings, compute)

    def _estimates(self, artifact: CoremlArtifact, placement: Any, metrics: dict[str, Metric]) -> dict[str, Any]:
        """latency.estimated.<chip> for the target's estimate_on chips (into metrics); their parts as details."""
        if not self.target.estimate_on:
            return {}
        from mlbench.backends.apple.latency import latency_metrics

        estimates, parts = latency_metrics(artifact.analysis, placement, list(self.target.estimate_on),
                                           dict(self.target.chip_profiles), this_machine=machine_chip(),
                                           calibrations=self._calibrations())
        metrics.update(estimates)
        return {"latency_estimate": parts}


    def _calibrations(self) -> dict[str, Any]:
        """The target's calibration profiles by chip id (`calibration:`), read once."""
        if self.target.calibration is None:
            return {}
        if not hasattr(self, "_loaded_calibrations"):
            from mlbench.backends.apple.calibration.profile import load_profiles

            self._loaded_calibrations = load_profiles(self.resolve(self.target.calibration))
        return self._loaded_calibrations

    def _observing(self) -> Any:
        """The profile whose placement observations the estimate uses: the first estimate_on chip's that has
        one, else the first profile's (by chip id)."""
        profiles = self._calibrations()
        chip = next((c for c in self.target.estimate_on if c in profiles), min(profiles, default=None))
        return None if chip is None else profiles[chip]


@functools.cache
def machine_chip() -> str | None:
    """The chip profile id of this Mac (from its CPU brand, e.g. 'Apple M1 Pro'); None elsewhere."""
    if sys.platform != "darwin":
        return None
    import subprocess

    from mlbench.backends.apple.chips import builtin_chips, chip_for_machine

    try:  # pragma: no cover - macOS only
        brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                               timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # pragma: no cover
        return None
    return chip_for_machine(brand, builtin_chips())  # pragma: no cover


ON_DEVICE_AB = "mlbench ab times artifacts on this machine; a connected device is measured by mlbench run"


def on_device(variant: Variant) -> str:
    """The device a variant is measured on (`device:`): local unless its target names one."""
    return dict(variant.axes).get("device", LOCAL_DEVICE)


def _not_macos() -> str:
    return NOT_MACOS.format(system={"linux": "Linux", "win32": "Windows"}.get(sys.platform, sys.platform))
def calibration_data(model: LoadedModel, verify_samples: int) -> list[dict[str, Any]]:
    """Input dicts to calibrate activation quantization on: the model's real samples (`values:`) if it has
    any, else the verify.samples seeded input sets."""
    from mlbench.backends.coreml.emulated_verify import package_feeds

    count = (model.maker.value_samples if model.maker is not None else None) or verify_samples
    return [package_feeds(model, model.sample(index)[0]) for index in range(count)]


def _digest_feeds(feeds: list[dict[str, Any]]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for feed in feeds:
        for name, array in feed.items():
            digest.update(f"{name}:{array.dtype}:{list(array.shape)}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def with_reshape_note(placement: Any, artifact: CoremlArtifact, frequency: str | None) -> Any:
    """The placement, its note naming the flexible inputs and the reshape-frequency hint they ran with."""
    flexible = [i.name for i in artifact.analysis.inputs if i.flexible]
    if flexible and placement.note is not None:
        placement.note += " " + reshape_note(flexible, frequency)
    return placement


def reshape_note(flexible: list[str], frequency: str | None) -> str:
    """What the placement note says about flexible inputs and the reshape-frequency hint."""
    names = ", ".join(flexible)
    if frequency is None:
        return (f"Flexible input(s) {names}: Core ML may re-plan for each new shape; on iOS17.4+/macOS14.4+ "
                "reshape_frequency: infrequent lets it specialise for a shape and keep it.")
    return (f"Flexible input(s) {names}: loaded with reshape_frequency {frequency} (iOS17.4+/macOS14.4+; "
            "the estimate does not model it).")


def placement_for(artifact: CoremlArtifact, compute_units: str, compiled: Path | None = None, observed: Any = None):
    """Measured from a compute plan where this machine can build one, else estimated by the rules (and, with
    `observed`, a calibration profile's placement observations before them)."""
    from mlbench.backends.apple.placement import estimate_placement
    from mlbench.backends.coreml.compute_plan import compute_plan_available, placement_from_plan, plan_operations

    why_not = compute_plan_available()
    if why_not is None and artifact.analysis.model_type == "mlProgram":  # pragma: no cover - macOS only
        try:
            ops = plan_operations(compiled or artifact.package, compute_units)
            return placement_from_plan(ops, compute_units, artifact.analysis.precision)
        except Exception as exc:  # noqa: BLE001 - fall back to the estimate, and say so
            why_not = f"the compute plan failed ({exc})"
    estimate = estimate_placement(artifact.analysis, compute_units)
    if estimate.note is not None and why_not and compute_units != "cpu_only":
        estimate.note += f" Not measured: {why_not}."
    if observed is not None:
        from mlbench.backends.apple.calibration.signature import apply_observations

        estimate = apply_observations(estimate, artifact.analysis, compute_units, observed.profile, observed.path.name)
    return estimate
