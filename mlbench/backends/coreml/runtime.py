"""Core ML measurement on macOS: load, first prediction, timed predictions, verification.

Kept thin and apart because it cannot run on Linux (coremltools predicts only on macOS); everything
it hands back goes through the same records as every other backend. Written against coremltools'
documented API: `MLModel(path, compute_units=ct.ComputeUnit.X)`, `MLModel.predict(dict)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlbench.backends.base import Measurement
from mlbench.measure import time_calls, time_once
from mlbench.records import Metric

if TYPE_CHECKING:
    import numpy as np

    from mlbench.backends.coreml.backend import CoremlArtifact
    from mlbench.config import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.models import LoadedModel

_NUMPY_DTYPES = {"fp32": "float32", "fp16": "float16", "int32": "int32", "fp64": "float64"}


def prediction_inputs(artifact: CoremlArtifact, model: LoadedModel) -> dict[str, np.ndarray]:
    """The seeded example inputs as numpy arrays of the dtypes the package declares."""
    declared = {t.name: t.dtype for t in artifact.analysis.inputs}
    arrays = {}
    for name, tensor in zip(model.input_names, model.example_inputs):
        array = tensor.detach().cpu().numpy()
        dtype = _NUMPY_DTYPES.get(declared.get(name) or "", None)
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
    load_ms, mlmodel = time_once(lambda: ct.models.MLModel(str(artifact.package), compute_units=compute_units))
    inputs = prediction_inputs(artifact, model)
    first_ms, prediction = time_once(lambda: mlmodel.predict(inputs))
    settings = config.latency
    latency = time_calls(lambda: mlmodel.predict(inputs), warmup=settings.warmup, repeats=settings.repeats,
                         min_time_s=settings.min_time_s, max_repeats=settings.max_repeats)
    precision = variant.axis("precision")
    tolerance = config.verify.tolerance_for(precision, variant.axis("optimize"))
    verify = compare_outputs(model.reference, ordered_outputs(artifact, prediction), tolerance=tolerance,
                             reference_name="torch/cpu/float32")
    metrics.update({
        "load_time": Metric.measured(load_ms, "ms"),
        "first_call": Metric.measured(first_ms, "ms"),
        "latency.median": Metric.measured(latency.median, "ms"),
        "latency.best": Metric.measured(latency.best, "ms"),
        "latency.p90": Metric.measured(latency.p90, "ms"),
        "verify.max_abs": Metric.measured(verify.max_abs, "abs"),
        "verify.max_rel": Metric.measured(verify.max_rel, "rel"),
    })
    return Measurement(metrics=metrics, latency=latency, verify=verify)
