"""The Core AI backend: cached export to a `.aimodel` asset, static analysis, and numerics from Core AI's own
runtime: on Linux its bundled CPU reference runtime (`source: reference`), on macOS 27 the device (`runtime`).

Off macOS 27 nothing is timed: the reference runtime's time per call is kept in details as such, never as
latency; latency and placement are absent with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench import __version__
from mlbench.backends.base import (
    NO_SOURCE,
    Backend,
    CallTimer,
    Exported,
    Measurement,
    VariantSkipped,
    existing_artifact_info,
)
from mlbench.backends.cached_export import build_cached
from mlbench.backends.coreai.availability import unavailable
from mlbench.backends.coreai.recipes import resolve
from mlbench.backends.coreai.target import CoreaiTarget
from mlbench.errors import one_line
from mlbench.machine import package_version
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric, Placement

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel

NO_DEVICE = ("Core AI runs on a device only on macOS 27; here Apple's CPU reference runtime gives numerics, and "
             "its time is not latency")
NOT_TIMED_ON_DEVICE = ("a Core AI generation is not timed on macOS 27 yet: the reference runtime gives its numerics, "
                       "its time is not latency")
NO_PLACEMENT = ("Core AI tells no placement off macOS 27 (and no API says where a function ran even there); "
                "Core ML's placement rules are applied only where every Core AI op maps onto a Core ML op")


def artifact_key_inputs(model: LoadedModel, precision: str, recipe: dict | None) -> dict:
    """Everything that shapes the asset. compute_units is absent: it is chosen when the asset is loaded."""
    return {
        "backend": "coreai",
        "format": "aimodel",
        "model_digest": model.digest,
        "inputs": [i.export_signature() for i in model.spec.inputs],
        "options": {"precision": precision, "optimization": recipe},
        "functions": _functions(model),
        "versions": {"torch": package_version("torch"), "coreai-torch": package_version("coreai-torch"),
                     "coreai-core": package_version("coreai-core"), "coreai-opt": package_version("coreai-opt"),
                     "mlbench": __version__},
    }


def _functions(model: LoadedModel) -> list[str]:
    """The asset's functions as the export lays them out: one per enumerated shape, else ``main``."""
    from mlbench.backends.coreai.shapes import ENTRYPOINT, enumerated

    return [f"{ENTRYPOINT}_{key}" for key in enumerated(list(model.spec.inputs))] or [ENTRYPOINT]


def calibration_inputs(model: LoadedModel, verify_samples: int) -> list[list[Any]]:
    """Input lists to calibrate activation quantization on: the model's real samples (`values:`) if it has
    any, else the verify.samples seeded input sets (as the coreml backend does)."""
    count = (model.maker.value_samples if model.maker is not None else None) or verify_samples
    return [list(model.sample(index)[0]) for index in range(count)]


def digest_inputs(samples: list[list[Any]]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for inputs in samples:
        for tensor in inputs:
            array = tensor.detach().cpu().numpy()
            digest.update(f"{array.dtype}:{list(array.shape)}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def static_metrics(analysis: dict[str, Any]) -> dict[str, Metric]:
    """Figures read from the saved asset (measured: counted on this machine's copy)."""
    return {
        "size.package": Metric.measured(analysis["package_bytes"], "bytes"),
        "ops.compute": Metric.measured(analysis["compute_ops"], "count"),
        "size.weights": Metric.measured(analysis["weight_bytes"], "bytes"),
        "params": Metric.absent("count", "Core AI's summary counts stored scalars by type, not parameters"),
        "macs": Metric.absent("count", "not analysed for Core AI programs"),
    }


def verification_metrics(verification: Verification | None, reason: str | None) -> dict[str, Metric]:
    if verification is None:
        why = reason or "not verified"
        return {"verify.max_abs": Metric.absent("abs", why), "verify.max_rel": Metric.absent("rel", why)}
    source = verification.source
    metrics = {"verify.max_abs": Metric(value=verification.max_abs, unit="abs", source=source),
               "verify.max_rel": Metric(value=verification.max_rel, unit="rel", source=source)}
    if verification.snr_db is not None:
        metrics["verify.snr_db"] = Metric(value=verification.snr_db, unit="dB", source=source)
    if verification.top1_agreement is not None:
        metrics["verify.top1_agreement"] = Metric(value=verification.top1_agreement, unit="ratio", source=source)
    return metrics


def reference_memory(measured: dict[str, Any] | None, why_not: str | None) -> dict[str, Metric]:
    """memory.load and memory.peak of Core AI's reference runtime (source "reference": its process on this
    machine's CPU, not a device's memory); absent with the reason where it did not run."""
    if measured:
        return {name: Metric.model_validate(value) for name, value in measured.items()}
    reason = f"the reference runtime did not run: {why_not}" if why_not else "the reference runtime reported none"
    return {name: Metric.absent("bytes", reason) for name in ("memory.load", "memory.peak")}


def _on_device() -> bool:
    """Whether Core AI runs on this machine's devices (macOS 27 on Apple silicon)."""
    if sys.platform != "darwin":
        return False
    from mlbench.backends.coreai.device import macos_major  # pragma: no cover - macOS only

    return (macos_major() or 0) >= 27  # pragma: no cover


class CoreaiBackend(Backend):
    name = "coreai"
    cached_export = True
    generative = True
    target: CoreaiTarget

    def _require(self) -> None:
        why = unavailable()
        if why is not None:
            raise VariantSkipped(why)

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        self._require()
        from mlbench.backends.coreai.analysis import analyse_asset
        from mlbench.backends.coreai.export import CoreaiExportResult, export_coreai

        precision = variant.axis("precision")
        if self.target.package is not None:
            path = self.resolve(self.target.package)
            analysis = analyse_asset(path)
            return Exported(payload=(path, analysis), info=existing_artifact_info(path, "existing Core AI asset"),
                            details={"coreai_asset": analysis, "export": {"existing": str(path)}})
        recipe = resolve(variant.axis("optimize"), self.config.optimizations)
        if model.spec.generate is not None:
            return self._export_generation(model, variant, precision, recipe)
        output_names = [name for name, _ in model.reference]
        calibration = (calibration_inputs(model, self.config.verify.samples)
                       if recipe is not None and recipe["kind"] == "linear_quantize_activations" else None)

        def export(folder: Path) -> CoreaiExportResult:
            return export_coreai(model.torch_module, model.example_inputs, model.input_names, output_names,
                                 precision=precision, optimization=recipe, dest=folder, calibration=calibration,
                                 inputs=list(model.spec.inputs))

        def own_facts(result: CoreaiExportResult) -> dict[str, Any]:
            # read from the asset and stored beside it, so a cache hit needs no Core AI import for the figures
            return {"float16_cast": result.float16_cast, "analysis": analyse_asset(result.artifact)}

        key_inputs = artifact_key_inputs(model, precision, recipe)
        if calibration is not None:  # the calibration data shapes an activation-quantized asset
            key_inputs["calibration"] = digest_inputs(calibration)
        cached = build_cached(self.cache, key_inputs, export, label=variant.artifact_id, own_facts=own_facts)
        analysis = dict(cached.meta.get("analysis") or analyse_asset(cached.path), path=str(cached.path))
        analysis["package_bytes"] = cached.info.size_bytes
        details = {"coreai_asset": analysis,
                   "export": cached.facts("float16_cast", "fallback_reason", "warnings")}
        return Exported(payload=(cached.path, analysis), info=cached.info, details=details)

    def _export_generation(self, model: LoadedModel, variant: Variant, precision: str, recipe: dict | None
                           ) -> Exported:
        """A generative model's asset: prefill and decode functions, the KV cache as states (``generate``)."""
        from mlbench.backends.coreai.analysis import analyse_asset
        from mlbench.backends.coreai.export import CoreaiExportResult
        from mlbench.backends.coreai.generate import GENERATE_FORMAT, export_generation
        from mlbench.generate.eager import causal_lm

        generate = model.spec.generate
        assert generate is not None
        if recipe is not None and recipe["kind"] == "linear_quantize_activations":
            raise VariantSkipped("W8A8 needs calibration inputs of one shape; a generative model's prefill and "
                                 "decode take two, so it is not applied to one")
        key = artifact_key_inputs(model, precision, recipe)
        key["generate"] = {"format": GENERATE_FORMAT, "context": generate.context,
                           "transformers": package_version("transformers")}

        def export(folder: Path) -> CoreaiExportResult:
            return export_generation(causal_lm(model.torch_module, model.spec.name), context=generate.context,
                                     precision=precision, optimization=recipe, dest=folder)

        def own_facts(result: CoreaiExportResult) -> dict[str, Any]:
            return {"float16_cast": result.float16_cast, "analysis": analyse_asset(result.artifact)}

        cached = build_cached(self.cache, key, export, label=variant.artifact_id, own_facts=own_facts)
        analysis = dict(cached.meta.get("analysis") or analyse_asset(cached.path), path=str(cached.path))
        analysis["package_bytes"] = cached.info.size_bytes
        details = {"coreai_asset": analysis, "export": cached.facts("float16_cast", "warnings")}
        return Exported(payload=(cached.path, analysis), info=cached.info, details=details)

    def measure_times(self, variant: Variant) -> bool:
        return _on_device()  # elsewhere: analysis and reference numerics, which other work cannot disturb

    def untimeable(self, variant: Variant) -> str | None:
        return None if _on_device() else NO_DEVICE

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        raise VariantSkipped(NO_DEVICE if not _on_device() else "the coreai backend times calls in `measure` only")

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        self._require()
        path, analysis = exported.payload
        metrics = static_metrics(analysis)
        if model.spec.generate is not None:
            from mlbench.backends.coreai import derived_figures as derived
            from mlbench.backends.coreai.generate import generation_measurement

            why = NOT_TIMED_ON_DEVICE if _on_device() else NO_DEVICE
            # each once per asset and prompt length (and compute units for the estimates), cached beside it
            verify, run_details = derived.reference_generation(self, exported, model, variant)
            estimated = derived.generation_estimates(self, exported, model, variant)
            generated, details = generation_measurement(analysis, model, variant, verify, run_details, estimated,
                                                        list(self.target.estimate_on), why)
            metrics.update(generated)
            return Measurement(metrics=metrics, verify=verify, placement=estimated.placement, details=details)
        if _on_device():  # pragma: no cover - macOS 27 only
            from mlbench.backends.coreai.device import measure_on_device

            return measure_on_device(path, model, variant, self.config, metrics, self._function(model, variant))
        from mlbench.backends.coreai import derived_figures as derived

        verification, why_not, details = derived.reference(self, exported, model, variant)  # once per asset, inputs
        metrics.update(verification_metrics(verification, why_not))
        metrics.update(reference_memory(details.pop("memory", None), why_not))
        for name, unit in (("load_time", "ms"), ("first_call", "ms"), ("latency.median", "ms"),
                           ("latency.best", "ms"), ("latency.p90", "ms")):
            metrics[name] = Metric.absent(unit, NO_DEVICE)
        estimated = derived.estimates(self, exported, variant, self._function(model, variant))
        metrics.update(estimated.metrics)
        details.update(estimated.details)
        return Measurement(metrics=metrics, verify=verification, placement=estimated.placement, details=details)

    def _function(self, model: LoadedModel, variant: Variant) -> str:
        """The function a variant runs: ``main``, or its enumerated shape's ``main_s<label>`` (``shapes``)."""
        from mlbench.backends.coreai.shapes import function_for

        return "main" if self.target.package is not None else function_for(list(model.spec.inputs), variant.shape)

    def _estimates(self, path: Path, variant: Variant, metrics: dict[str, Metric], function: str = "main"
                   ) -> tuple[Placement | None, dict[str, Any]]:
        """Core ML's placement rules and cost model applied to the Core AI ops where each maps onto a Core ML op
        (``estimate``): estimated placement, and latency.estimated.<chip> for estimate_on; else absent, why."""
        from mlbench.backends.apple.latency import latency_metrics
        from mlbench.backends.apple.placement import estimate_placement
        from mlbench.backends.coreai.estimate import NOTE, walk_function

        try:
            analysis, why_not = walk_function(path, function)
        except Exception as exc:  # noqa: BLE001 - an estimate that cannot be made never fails a measured variant
            analysis, why_not = None, f"the IR walk failed: {one_line(f'{type(exc).__name__}: {exc}')}"
        if analysis is None:
            for chip_id in self.target.estimate_on:
                metrics[f"latency.estimated.{chip_id}"] = Metric.absent("ms", f"not estimated: {why_not}")
            return None, {"placement": {"absent": f"{NO_PLACEMENT}: {why_not}"}}
        placement = estimate_placement(analysis, variant.axis("compute_units"))
        placement.note = f"{NOTE}. {placement.note or ''}".strip()
        details: dict[str, Any] = {}
        if self.target.estimate_on:
            estimates, parts = latency_metrics(analysis, placement, list(self.target.estimate_on))
            metrics.update(estimates)
            details["latency_estimate"] = {"note": NOTE, **parts}
        return placement, details

    def _reference(self, path: Path, model: LoadedModel, variant: Variant
                   ) -> tuple[Verification | None, str | None, dict[str, Any]]:
        """Verification by Core AI's reference runtime (None and the reason when there is no model to compare
        with), and what the run left worth keeping (its time per call, how its process ended)."""
        from mlbench.backends.coreai.reference import REFERENCE_NOTE, run_reference
        from mlbench.verify import compare_samples

        if not model.has_source:
            return None, NO_SOURCE, {}
        alternative = model.alternative(variant.shape)
        samples = [model.sample(index, alternative) for index in range(self.config.verify.samples)]
        feeds = [{name: tensor.detach().cpu().numpy() for name, tensor in zip(model.input_names, inputs)}
                 for inputs, _ in samples]
        run = run_reference(path, feeds, function=self._function(model, variant))
        pairs = [(reference, [out.astype("float32") if out.dtype.kind == "f" else out for out in outputs])
                 for (_, reference), outputs in zip(samples, run.outputs)]
        precision, optimize = variant.axis("precision"), variant.axis("optimize")
        verification = compare_samples(pairs, tolerance=self.config.verify.tolerance_for(precision, optimize),
                                       min_snr_db=self.config.verify.min_snr_db_for(precision, optimize),
                                       reference_name=REFERENCE, source="reference", method=REFERENCE_NOTE)
        details: dict[str, Any] = {"reference_runtime": {
            "function": self._function(model, variant), "seconds_per_call": run.seconds,
            "output_names": run.output_names,
            "note": "time of Core AI's single-threaded CPU reference runtime on this machine: not latency",
            **({"exit": run.exit_note} if run.exit_note else {}),
            **({"op_time": run.op_time} if run.op_time else {})}}
        if run.memory:  # the reference runtime's process, not a device's: source "reference"
            details["memory"] = run.memory["metrics"]
            details["reference_runtime"]["memory"] = run.memory["facts"]
        return verification, None, details
