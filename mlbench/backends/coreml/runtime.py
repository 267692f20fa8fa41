"""Core ML measurement on macOS: load, first prediction, timed predictions, verification.

Kept thin and apart because it cannot run on Linux (coremltools predicts only on macOS); everything
it hands back goes through the same records as every other backend. Written against coremltools'
documented API: `MLModel(path, compute_units=ct.ComputeUnit.X)`, `MLModel.predict(dict)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlbench.backends.base import REFERENCE, CallTimer, Measurement, runtime_metrics
from mlbench.records import Metric
from mlbench.timing import time_calls, time_once

if TYPE_CHECKING:
    import numpy as np

    from mlbench.backends.coreml.artifact import CoremlArtifact
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

_NUMPY_DTYPES = {"fp32": "float32", "fp16": "float16", "int32": "int32", "fp64": "float64"}


def prediction_inputs(artifact: CoremlArtifact, model: LoadedModel) -> dict[str, np.ndarray]:
    """The seeded example inputs as numpy arrays of the dtypes the package declares."""
    declared = {t.name: t.dtype for t in artifact.analysis.inputs}
    arrays = {}
    for name, tensor in zip(model.input_names, model.example_inputs):
        array = tensor.detach().cpu().numpy()
        dtype = _NUMPY_DTYPES.get(declared.get(name) or "")
        arrays[name] = array.astype(dtype) if dtype else array
    return arrays


def ordered_outputs(artifact: CoremlArtifact, prediction: dict[str, Any]) -> list[Any]:
    """Outputs in the package's declared order, which follows the torch model's output order."""
    return [prediction[t.name] for t in artifact.analysis.outputs]


def measure_package(
    artifact: CoremlArtifact, model: LoadedModel, variant: Variant, config: PipelineConfig,
    metrics: dict[str, Metric],
) -> Measurement:  # pragma: no cover - macOS only
    import coremltools as ct

    from mlbench.verify import compare_outputs

    compute_units = getattr(ct.ComputeUnit, variant.axis("compute_units").upper())
    # The first load compiles and specialises for the device: it is reported apart from everything else.
    load_ms, mlmodel = time_once(lambda: ct.models.MLModel(str(artifact.package), compute_units=compute_units))
    inputs = prediction_inputs(artifact, model)
    first_ms, prediction = time_once(lambda: mlmodel.predict(inputs))
    own: list[float] = []  # Core ML's own predict durations (coremltools >= 8.3), beside our wall clock

    def predict() -> None:
        mlmodel.predict(inputs)
        duration = getattr(mlmodel, "last_predict_duration_in_nano_seconds", None)
        if duration is not None:
            own.append(duration / 1e6)

    settings = config.latency
    latency = time_calls(predict, warmup=settings.warmup, repeats=settings.repeats,
                         min_time_s=settings.min_time_s, max_repeats=settings.max_repeats)
    precision = variant.axis("precision")
    tolerance = config.verify.tolerance_for(precision, variant.axis("optimize"))
    verify = compare_outputs(model.reference, ordered_outputs(artifact, prediction), tolerance=tolerance,
                             reference_name=REFERENCE)
    metrics.update(runtime_metrics(latency, first_ms=first_ms, load_ms=load_ms, verify=verify))
    details: dict[str, Any] = {}
    coreml_load = getattr(mlmodel, "load_duration_in_nano_seconds", None)
    if coreml_load is not None:
        metrics["load_time.coreml"] = Metric.measured(coreml_load / 1e6, "ms")
    own = own[settings.warmup:]  # the warmup calls are thrown away here too
    if own:
        from mlbench.timing import summarise

        coreml_latency = summarise(own, warmup=settings.warmup, threads=None, total_s=sum(own) / 1e3,
                                   stopped_by=latency.stopped_by)
        metrics["latency.coreml_median"] = Metric.measured(coreml_latency.median, "ms")
        details["coreml_latency"] = coreml_latency.model_dump(mode="json")
    return Measurement(metrics=metrics, latency=latency, verify=verify, details=details)


def prediction_timer(artifact: CoremlArtifact, model: LoadedModel, variant: Variant) -> CallTimer:  # pragma: no cover
    """The package loaded once for the variant's compute units; each call one prediction (macOS only)."""
    import coremltools as ct

    compute_units = getattr(ct.ComputeUnit, variant.axis("compute_units").upper())
    mlmodel = ct.models.MLModel(str(artifact.package), compute_units=compute_units)
    inputs = prediction_inputs(artifact, model)
    predict = mlmodel.predict
    return CallTimer(lambda: predict(inputs))
