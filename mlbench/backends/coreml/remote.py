"""Core ML measured on a connected iPhone or iPad through coremltools' remote device (macOS with Xcode; thin).

Written against coremltools 9.0's source (`coremltools/models/ml_program/experimental/`):

- `Device.prepare_for_model_debugging(credentials, working_directory)` (remote_device.py) builds, signs, installs
  and launches the ModelRunner app through xcodebuild and devicectl and returns the device with its session: once
  per device per measuring process (minutes the first time);
- `perf_utils.MLModelBenchmarker(model, device)`: `benchmark_load(iterations=2)` loads twice, each from a fresh
  compile on the host (`RemoteMLModelAsyncWrapper.load`, async_wrapper.py), timed by the device
  (`MLModelService.Load`'s `duration`): the first is `load_time.cold`, the second `load_time.warm`;
  `benchmark_predict(inputs, iterations)` gives the device's own prediction durations (`last_predict_duration_in_
  nano_seconds`); `benchmark_operation_execution(inputs, iterations)` gives each operation's compute-device usage
  from the device's compute plan (measured placement) and its time as the prediction's time × the plan's estimated
  cost share (an estimate, labelled so).
- The ModelRunner protocol (Load, Prediction, ComputePlan, Unload) reports no thermal state: absent, saying so.

A device that disconnects fails the variant in hand in one line and every later variant on it in this process.
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import TYPE_CHECKING, Any

from mlbench.backends.base import Measurement, placement_metrics, runtime_metrics
from mlbench.backends.coreml import devices
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric

if TYPE_CHECKING:
    from mlbench.backends.coreml.artifact import CoremlArtifact
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

OP_ITERATIONS = 3
NO_THERMAL = ("the ModelRunner app reports no thermal state (coremltools 9: MLModelService has Load, Prediction, "
              "ComputePlan and Unload only)")
NOT_ON_DEVICE = "not made on a connected device yet: {what}"

_prepared: dict[str, Any] = {}  # udid → the device with its ModelRunner session, per measuring process
_lost: dict[str, str] = {}  # udid → why it was lost


class DeviceLost(RuntimeError):
    """The device went away during a measurement: the variant fails, in one line."""


def measure_on_device(artifact: CoremlArtifact, model: LoadedModel, variant: Variant, config: PipelineConfig,
                      wanted: str) -> Measurement:
    rd = devices.remote_api()
    found = devices.find_device(rd, wanted)
    if found.udid in _lost:
        raise DeviceLost(_lost[found.udid])
    identity = devices.identify(rd, found)
    device = _prepared.get(found.udid)
    if device is None:
        chosen = devices.signing()
        folder = tempfile.mkdtemp(prefix="mlbench-modelrunner-")
        device = asyncio.run(found.prepare_for_model_debugging(credentials=devices.credentials(rd, chosen),
                                                               working_directory=folder))
        _prepared[found.udid] = device
    try:
        return asyncio.run(_measure(device, identity, artifact, model, variant, config))
    except DeviceLost:
        raise
    except Exception as exc:
        if _still_connected(rd, found.udid):
            raise
        why = f"{identity.kind_name()} '{identity.name}' disconnected during the measurement ({devices.first_line(exc)})"
        _lost[found.udid] = f"{identity.kind_name()} '{identity.name}' disconnected earlier in this sweep"
        _prepared.pop(found.udid, None)
        raise DeviceLost(why) from None


def _still_connected(rd: Any, udid: str) -> bool:
    try:
        return any(d.udid == udid and d.state == rd.DeviceState.CONNECTED for d in rd.Device.get_devices())
    except Exception:  # noqa: BLE001 - devicectl itself failing: the device is not reachable
        return False


async def _measure(device: Any, identity: devices.DeviceIdentity, artifact: CoremlArtifact, model: LoadedModel,
                   variant: Variant, config: PipelineConfig) -> Measurement:
    import coremltools as ct
    from coremltools.models.ml_program.experimental.perf_utils import MLModelBenchmarker

    from mlbench.backends.coreml.runtime import ordered_outputs, prediction_inputs
    from mlbench.cold_start import load_metrics
    from mlbench.timing import summarise
    from mlbench.verify import compare_outputs

    units = variant.axis("compute_units")
    mlmodel = ct.models.MLModel(str(artifact.package), compute_units=getattr(ct.ComputeUnit, units.upper()),
                                skip_model_load=True)
    bench = MLModelBenchmarker(model=mlmodel, device=device)
    loads = (await bench.benchmark_load(iterations=2)).samples  # the first load is kept (perf_utils: _loaded_model)
    alternative = model.alternative(variant.shape)
    inputs = prediction_inputs(artifact, model, alternative)
    loaded = bench._loaded_model
    outputs = await loaded.predict(inputs)
    first_ns = loaded.last_predict_duration_in_nano_seconds  # None where the device sent no duration
    settings = config.latency
    calls = min(settings.warmup + settings.repeats, settings.max_repeats + settings.warmup)
    samples = (await bench.benchmark_predict(inputs=inputs, iterations=calls)).samples[settings.warmup:]
    latency = summarise(samples, warmup=settings.warmup, threads=None, total_s=sum(samples) / 1e3,
                        stopped_by="repeats")
    infos = await bench.benchmark_operation_execution(inputs=inputs, iterations=OP_ITERATIONS)
    placement, op_estimates = _placement(infos, units, artifact.analysis.precision, identity)
    verify = None
    if model.has_source:
        precision, recipe = variant.axis("precision"), variant.axis("optimize")
        verify = compare_outputs(model.sample(0, alternative)[1], ordered_outputs(artifact, outputs),
                                 tolerance=config.verify.tolerance_for(precision, recipe),
                                 min_snr_db=config.verify.min_snr_db_for(precision, recipe), reference_name=REFERENCE)
    metrics = runtime_metrics(latency, first_ms=(first_ns or 0) / 1e6, load_ms=loads[0], verify=verify)
    if first_ns is None:
        metrics["first_call"] = Metric.absent("ms", "the device sent no duration for the first prediction")
    metrics.update(load_metrics(loads[0], loads[1] if len(loads) > 1 else None))
    metrics["latency.coreml_median"] = Metric.measured(latency.median, "ms")  # the device's own durations
    metrics.update(placement_metrics(placement))
    if settings.sustained_s:
        for name, unit in (("latency.sustained.first", "ms"), ("latency.sustained.last", "ms"),
                           ("latency.sustained.slope", "ms/min")):
            metrics[name] = Metric.absent(unit, NOT_ON_DEVICE.format(what="sustained runs"))
    details: dict[str, Any] = {
        "device": identity.facts(),
        "load_time": ("timed by the device: each load sends a model compiled afresh on the host to the ModelRunner "
                      "app; cold is the first in this app session, warm the second"),
        "load_caches": {"cleared": ["mlbench's compiled model: coremltools compiles the package afresh on the host "
                                    "for every load"],
                        "not_cleared": ["the device's own Core ML caches of compiled and specialised programs (iOS "
                                        "keeps them; the ModelRunner app cannot clear them)"]},
        "latency_source": "the device's own prediction durations (MLModelService.Prediction), transfers excluded",
        "op_time_estimated": op_estimates,
        "thermal": {"before": {"method": "ModelRunner", "state": None, "reason": NO_THERMAL}},
    }
    return Measurement(metrics=metrics, latency=latency, verify=verify, placement=placement, details=details)


def _placement(infos: list[Any], units: str, precision: str, identity: devices.DeviceIdentity) -> tuple[Any, dict]:
    """The device's compute plan as a measured placement, and the per-operation time estimates."""
    from mlbench.backends.coreml.compute_plan import _device_name, placement_from_plan

    medians = [info.measurement.statistics.median if info.measurement.statistics else None for info in infos]
    total = sum(m for m in medians if m is not None)
    ops, estimates = [], []
    for info, median in zip(infos, medians):
        usage = info.compute_device_usage
        output = info.spec.outputs[0].name if info.spec.outputs else None
        ops.append({"operator": info.spec.type, "output": output,
                    "preferred": _device_name(usage.preferred_compute_device) if usage else None,
                    "supported": [_device_name(d) for d in usage.supported_compute_devices] if usage else None,
                    "cost": median / total if median is not None and total else None})
        if median is not None:
            estimates.append({"op": output or info.spec.type, "op_type": info.spec.type, "ms": median})
    placement = placement_from_plan(ops, units, precision)
    placement.method = f"MLComputePlan on {identity.name} ({identity.model or identity.kind})"
    per_op = {"source": "estimated", "basis": "the device's prediction time × each operation's estimated cost share "
              "from its compute plan (MLModelBenchmarker.benchmark_operation_execution)",
              "ops": sorted(estimates, key=lambda e: -e["ms"])[:50]}
    if estimates:
        per_op["total_ms"] = sum(e["ms"] for e in estimates)
    return placement, per_op
