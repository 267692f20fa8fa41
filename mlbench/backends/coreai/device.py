"""Core AI on the device (macOS 27 on Apple silicon): the asset loaded with ``SpecializationOptions`` for the
variant's compute units, timed with mlbench's loop, and verified on the device's own arithmetic.

Written against the documented API (``coreai.runtime.SpecializationOptions``, ``ComputeUnitKind``,
``AIModelAsset.executable(specialization_options=…)``); untestable on Linux, so the tests drive it through a
fake ``coreai`` at the import boundary. Placement stays absent: no Core AI API says where a function ran.
"""

from __future__ import annotations

import asyncio
import platform
from typing import TYPE_CHECKING, Any

from mlbench.backends.base import Measurement, runtime_metrics
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric

if TYPE_CHECKING:
    from pathlib import Path

    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

DEVICE_NOTE = "Core AI ran the asset on this Mac (macOS 27) with the variant's compute units"
NO_PLAN = "Core AI tells no placement: no API says where a function ran, even on a device"


def macos_major() -> int | None:
    """macOS's major version (27 for macOS 27), None elsewhere or when unknown."""
    release = platform.mac_ver()[0]
    return int(release.split(".")[0]) if release and release.split(".")[0].isdigit() else None


def specialization_options(compute_units: str) -> Any:
    """The variant's compute units as Core AI's SpecializationOptions (all: Core AI's default choice)."""
    from coreai.runtime import ComputeUnitKind, SpecializationOptions

    if compute_units == "cpu_only":
        return SpecializationOptions.cpu_only()
    if compute_units == "cpu_and_gpu":
        return SpecializationOptions.from_preferred_compute_unit_kind(ComputeUnitKind.gpu())
    if compute_units == "cpu_and_ne":
        return SpecializationOptions.from_preferred_compute_unit_kind(ComputeUnitKind.neural_engine())
    return SpecializationOptions.default()


def measure_on_device(path: Path, model: LoadedModel, variant: Variant, config: PipelineConfig,
                      metrics: dict[str, Metric], function_name: str = "main") -> Measurement:
    """Load (timed), first call (timed), the latency loop, then verification on the device's outputs."""
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    from mlbench.memory import MemoryMeter
    from mlbench.timing import time_calls, time_once
    from mlbench.verify import compare_samples

    loop = asyncio.new_event_loop()
    options = specialization_options(variant.axis("compute_units"))
    alternative = model.alternative(variant.shape)
    context = AIModelAsset.load(path).executable(specialization_options=options)
    meter = MemoryMeter.start()  # macOS: the task's phys_footprint, what jetsam judges
    try:
        load_ms, executable = time_once(lambda: loop.run_until_complete(context.__aenter__()))
        function = executable.load_function(function_name)
        desc = function.desc

        def feeds(index: int) -> dict[str, Any]:
            inputs = model.sample(index, alternative)[0]
            return {name: NDArray(tensor.detach().cpu().numpy().astype(desc.input_descriptor(name).dtype))
                    for name, tensor in zip(desc.input_names, inputs)}

        def outputs(result: dict[str, Any]) -> list[Any]:
            return [result[name].numpy().astype("float32") for name in desc.output_names]

        feed = feeds(0)
        meter.loaded()
        first_ms, first = time_once(lambda: loop.run_until_complete(function(feed)))
        settings = config.latency
        latency = time_calls(lambda: loop.run_until_complete(function(feed)), warmup=settings.warmup,
                             repeats=settings.repeats, min_time_s=settings.min_time_s, max_repeats=settings.max_repeats)
        metrics.update(meter.metrics())
        pairs = [(model.sample(0, alternative)[1], outputs(first))]
        for index in range(1, config.verify.samples):
            pairs.append((model.sample(index, alternative)[1], outputs(loop.run_until_complete(function(feeds(index))))))
    finally:
        loop.run_until_complete(context.__aexit__(None, None, None))
        loop.close()
    precision, optimize = variant.axis("precision"), variant.axis("optimize")
    verify = (compare_samples(pairs, tolerance=config.verify.tolerance_for(precision, optimize),
                              min_snr_db=config.verify.min_snr_db_for(precision, optimize),
                              reference_name=REFERENCE, method=DEVICE_NOTE) if model.has_source else None)
    metrics.update(runtime_metrics(latency, first_ms=first_ms, load_ms=load_ms, verify=verify))
    details = {"session": {"compute_units": variant.axis("compute_units"), "options": str(options)},
               "placement": {"absent": NO_PLAN}, "memory": meter.facts()}
    return Measurement(metrics=metrics, latency=latency, verify=verify, details=details)
