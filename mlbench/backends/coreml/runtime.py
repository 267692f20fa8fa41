"""Core ML measurement on macOS: compile once, load, first prediction, timed predictions, verification.

Kept thin and apart because it cannot run on Linux (coremltools predicts only on macOS); everything
it hands back goes through the same records as every other backend. Written against coremltools
9.0's source (see /docs/backends/coreml.md):

- An app ships a compiled `.mlmodelc` and loads that; `MLModel(<.mlpackage>)` compiles afresh on every
  load. So each artifact is compiled once (`coremltools.models.utils.compile_model(path, dest)`,
  coremltools ≥ 8.2) into a compiled-model cache beside the package, reused across runs, and every
  variant loads the compiled model (`CompiledMLModel`): `compile_time` and `load_time` are apart.
- Core ML's own prediction durations exist from coremltools 8.3; 8.3 is the least version measured.
- The load is timed here, in the measurement process, before the variant's compute plan is read
  (the plan runs in a child of its own afterwards), so the plan never warms the load it follows.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.base import CallTimer, Measurement, VariantSkipped, runtime_metrics
from mlbench.memory import MemoryMeter
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric
from mlbench.sustained import sustained_figures
from mlbench.timing import time_calls, time_once

if TYPE_CHECKING:
    import numpy as np

    from mlbench.backends.coreml.artifact import CoremlArtifact
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

_NUMPY_DTYPES = {"fp32": "float32", "fp16": "float16", "int32": "int32", "fp64": "float64"}
MIN_COREMLTOOLS = (8, 3)
COMPILED_DIR = "compiled"
LOAD_ORDER = ("timed in the measurement process, loading the compiled model (CompiledMLModel), before this "
              "variant's compute plan was read")


def prediction_inputs(artifact: CoremlArtifact, model: LoadedModel, alternative: int = 0) -> dict[str, Any]:
    """The seeded example inputs as numpy arrays of the dtypes the package declares; an image input as
    a PIL image of its pixels (Core ML's ImageType takes nothing else)."""
    from mlbench.backends.coreml.emulated_verify import package_feeds

    declared = {t.name: t for t in artifact.analysis.inputs}
    arrays: dict[str, Any] = {}
    for item, (name, array) in zip(model.spec.inputs, package_feeds(model, model.sample(0, alternative)[0]).items()):
        description = declared.get(name)
        if item.kind == "image" or (description is not None and description.kind == "image"):
            arrays[name] = pil_image(array, item.layout)
            continue
        dtype = _NUMPY_DTYPES.get((description.dtype if description else None) or "")
        arrays[name] = array.astype(dtype) if dtype else array
    return arrays


def pil_image(array: np.ndarray, layout: str) -> Any:
    """A PIL image of pixels shaped [1, C, H, W] (BGR channels reversed: PIL holds RGB)."""
    import numpy as np
    from PIL import Image

    channels = np.asarray(array, dtype=np.float32)[0].clip(0, 255).astype(np.uint8)
    if layout == "GRAYSCALE":
        return Image.fromarray(channels[0], mode="L")
    if layout == "BGR":
        channels = channels[::-1]
    return Image.fromarray(np.ascontiguousarray(channels.transpose(1, 2, 0)), mode="RGB")


def ordered_outputs(artifact: CoremlArtifact, prediction: dict[str, Any]) -> list[Any]:
    """Outputs in the package's declared order, which follows the torch model's output order."""
    return [prediction[t.name] for t in artifact.analysis.outputs]


def load_hints(ct: Any, config: PipelineConfig, variant: Variant) -> dict[str, Any] | None:
    """Core ML's load-time optimization hints: the target's reshape_frequency (iOS17.4+/macOS14.4+)."""
    target = [*config.targets, *config.include][variant.target_index]
    frequency = getattr(target, "reshape_frequency", None)
    if frequency is None:
        return None
    return {"reshapeFrequency": getattr(ct.ReshapeFrequency, frequency.capitalize())}


def too_old(version: str) -> str | None:
    """Why this coremltools cannot measure, or None."""
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts >= MIN_COREMLTOOLS:
        return None
    return (f"Core ML measurement needs coremltools {'.'.join(map(str, MIN_COREMLTOOLS))} or later (it compiles a "
            f"package by path and reads Core ML's own load and prediction durations); this machine has {version}")


def compiled_model(ct: Any, package: Path) -> tuple[Path, float, bool]:
    """(the compiled `.mlmodelc`, the compile's ms, reused) for `package`, compiled once per OS build and
    coremltools version into `<entry>/compiled/` beside it and published by an atomic rename."""
    tag = f"macos-{platform.mac_ver()[0] or platform.release()}-coremltools-{ct.__version__}"
    home = package.parent / COMPILED_DIR / tag
    final = home / "model.mlmodelc"
    facts = home / "compile.json"
    if final.is_dir() and facts.is_file():
        return final, float(json.loads(facts.read_text())["compile_ms"]), True
    try:
        home.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{tag}-{uuid.uuid4().hex[:8]}-", dir=home.parent))
    except OSError:  # a read-only shared cache: compile for this process only
        work = Path(tempfile.mkdtemp(prefix="mlbench-compiled-"))
    t0 = time.perf_counter_ns()
    ct.models.utils.compile_model(str(package), str(work / "model.mlmodelc"))
    compile_ms = (time.perf_counter_ns() - t0) / 1e6
    (work / "compile.json").write_text(json.dumps({"compile_ms": compile_ms}))
    try:
        os.rename(work, home)
    except OSError:  # another process published first, or no place to publish: use what is there
        if final.is_dir():
            shutil.rmtree(work, ignore_errors=True)
            return final, compile_ms, False
        return work / "model.mlmodelc", compile_ms, False
    return final, compile_ms, False


CORE_ML_KEEPS = ("Core ML's own caches of compiled and specialised programs (the OS keeps them, per model; a fresh "
                 "compile in a new folder is the nearest mlbench gets to a miss)")


def cold_and_warm_loads(ct: Any, package: Path, compiled: Path, compute_units: Any,
                        options: dict[str, Any]) -> tuple[dict[str, Metric], dict[str, Any]]:
    """`load_time.cold`: the package compiled afresh into a new folder and that copy loaded (the compile not
    counted); `load_time.warm`: the compiled model mlbench keeps, loaded again. Made after the timed calls, so
    nothing before them changes; with the caches cleared and not (`mlbench.cold_start`)."""
    from mlbench.cold_start import evict_files, load_metrics

    caches = evict_files([package], CORE_ML_KEEPS)
    with tempfile.TemporaryDirectory(prefix="mlbench-cold-") as folder:
        fresh = Path(folder) / "model.mlmodelc"
        compile_ms, _ = time_once(lambda: ct.models.utils.compile_model(str(package), str(fresh)))
        cold_ms, model = time_once(lambda: ct.models.CompiledMLModel(str(fresh), compute_units=compute_units,
                                                                     **options))
        del model
    warm_ms, model = time_once(lambda: ct.models.CompiledMLModel(str(compiled), compute_units=compute_units, **options))
    del model
    caches["cleared"].insert(0, f"mlbench's compiled model: the package compiled afresh into a new folder for the "
                                f"cold load ({compile_ms:.0f} ms, not counted)")
    return load_metrics(cold_ms, warm_ms), caches


def _own_duration_ms(mlmodel: Any) -> float | None:
    """Core ML's own duration of the last prediction, where this coremltools gives it for a compiled model."""
    duration = getattr(mlmodel, "last_predict_duration_in_nano_seconds", None)
    if duration is None:
        getter = getattr(getattr(mlmodel, "_proxy", None), "get_last_predict_duration_in_nano_seconds", None)
        duration = getter() if getter is not None else None
    return None if duration is None else duration / 1e6


def measure_package(
    artifact: CoremlArtifact, model: LoadedModel, variant: Variant, config: PipelineConfig,
    metrics: dict[str, Metric],
) -> Measurement:
    import coremltools as ct

    from mlbench.overflow import float16_overflow
    from mlbench.verify import compare_outputs

    why_not = too_old(ct.__version__)
    if why_not:
        raise VariantSkipped(why_not)
    compute_units = getattr(ct.ComputeUnit, variant.axis("compute_units").upper())
    compiled, compile_ms, reused = compiled_model(ct, artifact.package)
    hints = load_hints(ct, config, variant)
    options = {"optimization_hints": hints} if hints else {}
    meter = MemoryMeter.start()  # macOS: the task's phys_footprint, what jetsam judges
    load_ms, mlmodel = time_once(lambda: ct.models.CompiledMLModel(str(compiled), compute_units=compute_units,
                                                                   **options))
    alternative = model.alternative(variant.shape)
    inputs = prediction_inputs(artifact, model, alternative)
    meter.loaded()
    first_ms, prediction = time_once(lambda: mlmodel.predict(inputs))
    own: list[float] = []  # Core ML's own predict durations, beside our wall clock

    def predict() -> None:
        mlmodel.predict(inputs)
        duration = _own_duration_ms(mlmodel)
        if duration is not None:
            own.append(duration)

    settings = config.latency
    latency = time_calls(predict, warmup=settings.warmup, repeats=settings.repeats,
                         min_time_s=settings.min_time_s, max_repeats=settings.max_repeats)
    metrics.update(meter.metrics())
    precision = variant.axis("precision")
    tolerance = config.verify.tolerance_for(precision, variant.axis("optimize"))
    floor = config.verify.min_snr_db_for(precision, variant.axis("optimize"))
    verify = None
    if model.has_source:
        reference, outputs = model.sample(0, alternative)[1], ordered_outputs(artifact, prediction)
        verify = compare_outputs(reference, outputs, tolerance=tolerance, min_snr_db=floor, reference_name=REFERENCE)
        verify = verify.model_copy(update={"overflow": float16_overflow([(reference, outputs)])})
    metrics.update(runtime_metrics(latency, first_ms=first_ms, load_ms=load_ms, verify=verify))
    metrics["compile_time"] = Metric.measured(compile_ms, "ms")
    sustained: dict[str, Any] = {}
    sustained_figures(lambda: mlmodel.predict(inputs), settings, metrics, sustained)
    loads, caches = cold_and_warm_loads(ct, artifact.package, compiled, compute_units, options)
    metrics.update(loads)
    details: dict[str, Any] = {
        "load_time": LOAD_ORDER,
        "compile": (f"compiled once into {compiled} by an earlier variant or run, reused" if reused
                    else f"compiled by this variant into {compiled}"),
        "compiled_model": str(compiled),
        "memory": meter.facts(),
        "load_caches": caches, **sustained,
    }
    own = own[settings.warmup:]  # the warmup calls are thrown away here too
    if own:
        from mlbench.timing import summarise

        coreml_latency = summarise(own, warmup=settings.warmup, threads=None, total_s=sum(own) / 1e3,
                                   stopped_by=latency.stopped_by)
        metrics["latency.coreml_median"] = Metric.measured(coreml_latency.median, "ms")
        details["coreml_latency"] = coreml_latency.model_dump(mode="json")
    return Measurement(metrics=metrics, latency=latency, verify=verify, details=details)


def prediction_timer(artifact: CoremlArtifact, model: LoadedModel, variant: Variant) -> CallTimer:  # pragma: no cover
    """The compiled package loaded once for the variant's compute units; each call one prediction (macOS only)."""
    import coremltools as ct

    compute_units = getattr(ct.ComputeUnit, variant.axis("compute_units").upper())
    compiled, _compile_ms, _reused = compiled_model(ct, artifact.package)  # the same compiled model `run` loads
    mlmodel = ct.models.CompiledMLModel(str(compiled), compute_units=compute_units)
    inputs = prediction_inputs(artifact, model, model.alternative(variant.shape))
    predict = mlmodel.predict
    return CallTimer(lambda: predict(inputs))
