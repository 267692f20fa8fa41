"""The LiteRT backend: cached litert-torch export (+ ai-edge-quantizer), measured through the LiteRT interpreter
with XNNPACK on this machine's CPU.

Per variant (one precision × one optimization × one thread count):

1. an interpreter is created with `num_threads` = the variant's threads (load_time), its first call timed
   apart (first_call), then the pipeline's latency loop runs on the serving signature;
2. the outputs are verified against eager float32 on verify.samples input sets (an int8 model's inputs
   are quantized and its outputs dequantized at the boundary);
3. placement: which operations the XNNPACK delegate took (by count; LiteRT's Python API has no
   per-operator profiler, so there is no share by cost).
"""

from __future__ import annotations

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
from mlbench.backends.litert.target import LitertQuantizeRecipe, LitertTarget
from mlbench.config.base import NO_OPTIMIZATION
from mlbench.machine import package_version
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric

if TYPE_CHECKING:
    import numpy as np

    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

MODULES = (("litert_torch", "litert-torch"), ("ai_edge_litert", "ai-edge-litert"),
           ("ai_edge_quantizer", "ai-edge-quantizer"))
"""(import name, distribution) of what the backend imports: a missing one skips the variant naming the extra."""
PER_SHAPE = ("one export per shape: litert-torch 0.10 does not convert a dynamic dimension (its lowering of "
             "torch.export's symbolic sizes fails, e.g. `reshape new_sizes must all be positive` on a Linear over a "
             "flexible axis), so each shape is its own static .tflite")
FLOAT16_WITH_RECIPE = ("precision float16 with optimize {name}: the recipe sets the weight type itself; "
                       "quantize the float32 export (optimize none for float16)")


@dataclass
class LitertArtifact:
    path: Path


def calibration_samples(model: LoadedModel, verify_samples: int, alternative: int = 0) -> list[list[np.ndarray]]:
    """Input sets to calibrate full_int8 on: the model's real samples (`values:`) if it has any, else the
    verify.samples seeded input sets (at the exported shape)."""
    count = (model.maker.value_samples if model.maker is not None else None) or verify_samples
    return [[t.detach().cpu().numpy() for t in model.sample(index, alternative)[0]] for index in range(count)]


def digest_samples(samples: list[list[np.ndarray]]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for sample in samples:
        for array in sample:
            digest.update(f"{array.dtype}:{list(array.shape)}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def artifact_key_inputs(model: LoadedModel, precision: str, recipe: dict[str, Any] | None,
                        calibration: str | None, shape: str | None = None) -> dict[str, Any]:
    """Everything that shapes the .tflite file (one per shape of a model with shape alternatives); threads are
    chosen when the interpreter is created."""
    key: dict[str, Any] = {
        "backend": "litert",
        "format": "tflite",
        "model_digest": model.digest,
        "inputs": [i.export_signature() for i in model.spec.inputs],
        "options": {"precision": precision, "recipe": recipe},
        "versions": {"torch": package_version("torch"), "litert-torch": package_version("litert-torch"),
                     "ai-edge-quantizer": package_version("ai-edge-quantizer"), "mlbench": __version__},
    }
    if calibration is not None:  # the calibration data shapes a full-int8 model
        key["calibration"] = calibration
    if shape is not None:  # one static export per shape (PER_SHAPE)
        key["shape"] = shape
    return key


class LitertBackend(Backend):
    name = "litert"
    cached_export = True
    target: LitertTarget

    @staticmethod
    def _alternative(model: LoadedModel, variant: Variant) -> int:
        """The variant's shape alternative: its own export (`shape` is an artifact axis of this target)."""
        return model.alternative(variant.shape)

    def _recipe(self, name: str) -> LitertQuantizeRecipe | None:
        if name == NO_OPTIMIZATION:
            return None
        recipe = self.config.optimizations.get(name)
        assert isinstance(recipe, LitertQuantizeRecipe)  # the target's check made sure
        return recipe

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        from mlbench.backends.litert.export import LitertExportResult, export_tflite

        require_modules(self.name, "litert", MODULES)
        precision, name = variant.axis("precision"), variant.axis("optimize")
        recipe = self._recipe(name)
        if recipe is not None and precision == "float16":
            raise VariantSkipped(FLOAT16_WITH_RECIPE.format(name=name))
        scheme = recipe.scheme if recipe is not None else None
        alternative = self._alternative(model, variant)
        samples = (calibration_samples(model, self.config.verify.samples, alternative) if scheme == "full_int8"
                   else None)

        def export(folder: Path) -> LitertExportResult:
            return export_tflite(model.torch_module, model.sample(0, alternative)[0], precision=precision,
                                 scheme=scheme, dest=folder, calibration=samples)

        def own_facts(result: LitertExportResult) -> dict[str, Any]:
            return {"quantization": result.quantization, "calibration_samples": result.calibration_samples}

        key = artifact_key_inputs(model, precision, recipe.model_dump() if recipe else None,
                                  digest_samples(samples) if samples else None, variant.shape)
        cached = build_cached(self.cache, key, export, label=variant.artifact_id, own_facts=own_facts)
        details: dict[str, Any] = {"export": cached.facts("quantization", "calibration_samples", "warnings")}
        if variant.shape is not None:
            details["export"].update({"shape": variant.shape, "flexible": PER_SHAPE})
        return Exported(payload=LitertArtifact(cached.path), info=cached.info, details=details)

    def _timed(self, artifact: LitertArtifact, runner: Any, feed: dict, threads: int,
               first_ms: float) -> tuple[Any, Any, Any]:
        """The timed calls around the thread-pool stall check (`mlbench.thread_check`), against a second
        interpreter with one thread (LiteRT fixes an interpreter's `num_threads`, and XNNPACK's pool with it,
        when it is created); (latency, check, the call that was timed, on the interpreter it chose)."""
        from mlbench.backends.litert.runtime import Runner, interpreter
        from mlbench.thread_check import timed_with_check
        from mlbench.timing import time_calls

        settings = self.config.latency
        runners = {threads: runner}
        current = [runner]

        def set_threads(count: int) -> None:
            if count not in runners:
                runners[count] = Runner(interpreter(artifact.path, count))
            current[0] = runners[count]

        latency, check = timed_with_check(
            lambda: current[0](feed), configured=threads, first_ms=first_ms, set_threads=set_threads,
            time_with=lambda count: time_calls(lambda: current[0](feed), warmup=settings.warmup,
                                               repeats=settings.repeats, min_time_s=settings.min_time_s,
                                               max_repeats=settings.max_repeats, threads=count))
        chosen = current[0]
        return latency, check, lambda: chosen(feed)

    def memory_round(self, model: LoadedModel, exported: Exported, variant: Variant) -> dict[str, Metric] | None:
        """An interpreter created inside the meter's span (as `measure` creates it), then its first call: what
        `measure` reads its memory after (before the thread check's second interpreter)."""
        from mlbench.backends.litert.runtime import Runner, interpreter
        from mlbench.memory import MemoryRound

        artifact: LitertArtifact = exported.payload
        alternative = self._alternative(model, variant)

        def load() -> Any:
            runner = Runner(interpreter(artifact.path, int(variant.axis("threads"))))
            feed = runner.feed([t.detach().cpu().numpy() for t in model.sample(0, alternative)[0]])
            return lambda: runner(feed)

        return MemoryRound(1).one(load)

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        from mlbench.backends.litert.runtime import Runner, interpreter

        threads = int(variant.axis("threads"))
        runner = Runner(interpreter(exported.payload.path, threads))
        feed = runner.feed([t.detach().cpu().numpy() for t in model.sample(0, self._alternative(model, variant))[0]])
        runners, current = {threads: runner}, [runner]

        def set_threads(count: int) -> None:  # a second interpreter: XNNPACK's pool is fixed at its creation
            if count not in runners:
                runners[count] = Runner(interpreter(exported.payload.path, count))
            current[0] = runners[count]

        return CallTimer(lambda: current[0](feed), threads=threads, set_threads=set_threads)

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        from mlbench.backends.capture import quiet_native_stderr
        from mlbench.backends.litert.runtime import (
            DELEGATED_METRIC,
            NO_OP_TIMES,
            Runner,
            build_placement,
            interpreter,
            op_counts,
        )
        from mlbench.memory import MemoryMeter
        from mlbench.sustained import sustained_figures
        from mlbench.timing import time_once
        from mlbench.verify import compare_samples

        with quiet_native_stderr():
            import ai_edge_litert
        artifact: LitertArtifact = exported.payload
        precision, threads = variant.axis("precision"), int(variant.axis("threads"))
        alternative = self._alternative(model, variant)
        meter = MemoryMeter.start()
        load_ms, interp = time_once(lambda: interpreter(artifact.path, threads))
        runner = Runner(interp)

        def inputs(index: int) -> list[np.ndarray]:
            return [t.detach().cpu().numpy() for t in model.sample(index, alternative)[0]]

        feed = runner.feed(inputs(0))
        meter.loaded()
        first_ms, first = time_once(lambda: runner(feed))
        memory = meter.metrics()  # before the thread check, whose second interpreter is not this load's
        latency, check, timed = self._timed(artifact, runner, feed, threads, first_ms)
        sustained: dict[str, Any] = {}
        sustained_figures(timed, self.config.latency, memory, sustained)  # its figures ride with memory's
        timed = None
        pairs = [(model.sample(0, alternative)[1], runner.outputs_of(first))]
        for index in range(1, self.config.verify.samples):
            pairs.append((model.sample(index, alternative)[1], runner.outputs_of(runner(runner.feed(inputs(index))))))
        name = variant.axis("optimize")
        verify = compare_samples(pairs, tolerance=self.config.verify.tolerance_for(precision, name),
                                 min_snr_db=self.config.verify.min_snr_db_for(precision, name), reference_name=REFERENCE)
        ops = list(interp._get_ops_details())
        placement, share = build_placement(ops, threads)
        metrics = {
            DELEGATED_METRIC: Metric.measured(share, "ratio"),
            "size.package": Metric.measured(exported.info.size_bytes if exported.info else 0, "bytes"),
            "ops.compute": Metric.measured(placement.compute_ops, "count"),
        }
        metrics.update(runtime_metrics(latency, first_ms=first_ms, load_ms=load_ms, verify=verify))
        metrics.update(placement_metrics(placement))
        metrics.update(memory)
        details = {
            "memory": meter.facts(), **sustained,
            **({"thread_check": check.details()} if check is not None else {}),
            "tflite_ops": op_counts(ops),
            "op_time": {"absent": NO_OP_TIMES},
            "interpreter": {"num_threads": threads, "delegate": "XNNPACK (LiteRT's default CPU delegate)",
                            "ai-edge-litert": getattr(ai_edge_litert, "__version__", package_version("ai-edge-litert"))},
        }
        from mlbench.backends.litert.localize import localize_variant
        from mlbench.backends.localize_hook import localize_if_close

        details.update(localize_if_close(self, model, variant, verify, localize_variant, existing=False,
                                         info=exported.info))
        return Measurement(metrics=metrics, latency=latency, verify=verify, placement=placement, details=details)
