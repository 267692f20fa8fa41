"""The ONNX Runtime backend: cached torch.onnx export, then sessions measured on this machine.

Per variant (one precision × one provider):

1. a session is created and timed (``load_time``), its first run timed apart (``first_call``), then
   the pipeline's latency loop runs on it (warmup thrown away; median, best, p90, raw samples);
2. the outputs of that first run are verified against the eager float32 reference;
3. a *separate* session with profiling on runs the warmup again and ``profile_runs`` more runs;
   its profile gives placement (which provider ran each node) and per-operator time. Profiling
   adds overhead to every run, which is why it never shares a session with the latency loop.

A provider this machine's onnxruntime lacks (or cannot start) skips the variant, with the reason.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
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
    placement_metrics,
    require_modules,
    runtime_metrics,
)
from mlbench.backends.cached_export import build_cached
from mlbench.backends.onnxruntime.target import (
    COREML_COMPUTE_UNITS,
    GRAPH_OPTIMIZATION,
    PROVIDERS,
    OnnxruntimeTarget,
    provider_device,
)
from mlbench.machine import package_version
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel


RUNTIME_KEEPS = ("ONNX Runtime's process-wide environment, thread pools and kernel registry (an earlier session in "
                 "this process may have made them)")
"""What a cold session still finds warm: nothing clears it short of a new process."""


@dataclass
class OnnxArtifact:
    path: Path
    graph: dict[str, Any]  # export.graph_summary of the saved file


def artifact_key_inputs(model: LoadedModel, precision: str, opset: int | None) -> dict:
    """Everything that shapes the .onnx file. Providers and graph_optimization are chosen when a session
    is created, so they are absent."""
    return {
        "backend": "onnxruntime",
        "format": "onnx",
        "model_digest": model.digest,
        "inputs": [i.export_signature() for i in model.spec.inputs],
        "options": {"precision": precision, "opset": opset},
        "versions": {"torch": package_version("torch"), "onnx": package_version("onnx"), "onnxruntime": package_version("onnxruntime"),
                     "mlbench": __version__},
    }


def static_metrics(artifact: OnnxArtifact, size_bytes: int) -> dict[str, Metric]:
    """Figures read from the saved graph, named as the Core ML backend names its own."""
    graph = artifact.graph
    return {
        "size.package": Metric.measured(size_bytes, "bytes"),
        "ops.compute": Metric.measured(graph["compute_nodes"], "count"),
        "size.weights": Metric.measured(graph["weight_bytes"], "bytes"),
        "params": Metric.measured(graph["params"], "count"),
        "macs": Metric.absent("count", "not analysed for ONNX graphs"),
    }


class OnnxruntimeBackend(Backend):
    name = "onnxruntime"
    cached_export = True
    generative = True
    target: OnnxruntimeTarget

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        require_modules(self.name, "onnxruntime", (("onnx", "onnx"), ("onnxruntime", "onnxruntime")))
        from mlbench.backends.onnxruntime.export import OnnxExportResult, export_onnx, graph_summary

        precision = variant.axis("precision")
        if self.target.file is not None:  # an existing .onnx file: measured as it is
            path = self.resolve(self.target.file)
            graph = graph_summary(path)
            return Exported(payload=OnnxArtifact(path, graph), info=existing_artifact_info(path, "existing .onnx file"),
                            details={"onnx_graph": graph, "export": {"existing": str(path)}})
        if model.spec.generate is not None:
            return self._export_decoder(model, variant)
        output_names = [name for name, _ in model.reference]

        def export(folder: Path) -> OnnxExportResult:
            return export_onnx(model.torch_module, model.example_inputs, model.input_names, output_names,
                               precision=precision, opset=self.target.opset, dest=folder,
                               inputs=list(model.spec.inputs))

        def own_facts(result: OnnxExportResult) -> dict[str, Any]:
            return {"opset": result.opset, "float16_conversion": result.float16_conversion}

        cached = build_cached(self.cache, artifact_key_inputs(model, precision, self.target.opset), export,
                              label=variant.artifact_id, own_facts=own_facts)
        graph = graph_summary(cached.path)
        details: dict[str, Any] = {
            "onnx_graph": graph,
            "export": cached.facts("opset", "fallback_reason", "float16_conversion", "warnings"),
        }
        return Exported(payload=OnnxArtifact(cached.path, graph), info=cached.info, details=details)

    def _export_decoder(self, model: LoadedModel, variant: Variant) -> Exported:
        """A generative model's decoder graph, the cache as inputs and outputs (`generate_export`)."""
        from mlbench.backends.onnxruntime.export import graph_summary
        from mlbench.backends.onnxruntime.generate_export import DECODER_FORMAT, DecoderExport, export_decoder
        from mlbench.generate.eager import causal_lm

        precision = variant.axis("precision")
        lm = causal_lm(model.torch_module, model.spec.name)
        key = artifact_key_inputs(model, precision, self.target.opset)
        key["generate"] = {"format": DECODER_FORMAT, "transformers": package_version("transformers")}

        def own_facts(result: DecoderExport) -> dict[str, Any]:
            return {"opset": result.opset, "float16_conversion": result.float16_conversion, "layers": result.layers}

        cached = build_cached(self.cache, key, lambda folder: export_decoder(
            lm, precision=precision, opset=self.target.opset, dest=folder), label=variant.artifact_id,
            own_facts=own_facts)
        graph = graph_summary(cached.path)
        details = {"onnx_graph": graph, "export": cached.facts("opset", "float16_conversion", "layers", "warnings")}
        return Exported(payload=OnnxArtifact(cached.path, graph), info=cached.info, details=details)

    # -- measuring --------------------------------------------------------------------------

    def _session_options(self, ort: Any, *, profile_prefix: str | None = None) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                   GRAPH_OPTIMIZATION[self.target.graph_optimization])
        options.intra_op_num_threads = self.target.intra_op_threads or 0  # 0: onnxruntime's default
        options.log_severity_level = 3  # errors only: provider warnings would flood the console
        if profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        return options

    def _timed(self, ort: Any, session: Any, feed: dict, path: Path, provider: str,
               first_ms: float) -> tuple[Any, Any, Any]:
        """The timed calls around the thread-pool stall check (`mlbench.thread_check`), against a second session
        with one intra-op thread (onnxruntime fixes a session's pool when it is created); (latency, check, the call
        that was timed, on the session it chose).
        CPU provider only: others run off the CPU's pool."""
        from mlbench.cpus import available_cpus
        from mlbench.thread_check import timed_with_check
        from mlbench.timing import time_calls

        settings = self.config.latency
        configured = self.target.intra_op_threads or available_cpus()  # 0: onnxruntime's own default, one per core
        sessions: dict[int, Any] = {configured: session}
        current = [session]

        def set_threads(count: int) -> None:
            if count not in sessions:
                options = self._session_options(ort)
                options.intra_op_num_threads = count
                sessions[count] = self._session(ort, path, provider, options)
            current[0] = sessions[count]

        def time_with(count: int | None) -> Any:
            return time_calls(lambda: current[0].run(None, feed), warmup=settings.warmup, repeats=settings.repeats,
                              min_time_s=settings.min_time_s, max_repeats=settings.max_repeats,
                              threads=1 if count == 1 else self.target.intra_op_threads)

        latency, check = timed_with_check(lambda: current[0].run(None, feed),
                                          configured=configured if provider == "cpu" else None,
                                          first_ms=first_ms, set_threads=set_threads, time_with=time_with)
        chosen = current[0]
        return latency, check, lambda: chosen.run(None, feed)

    def _providers(self, provider: str) -> list[Any]:
        """The requested provider, then the CPU provider for the nodes it cannot take."""
        name = PROVIDERS[provider]
        if provider == "coreml":
            options = {"ModelFormat": "MLProgram"}
            if self.target.coreml_compute_units:
                options["MLComputeUnits"] = COREML_COMPUTE_UNITS[self.target.coreml_compute_units]
            first: Any = (name, options)
        else:
            first = name
        return [first] if name == "CPUExecutionProvider" else [first, "CPUExecutionProvider"]

    def _session(self, ort: Any, path: Path, provider: str, options: Any) -> Any:
        from mlbench.backends.capture import quiet_native_stderr

        with quiet_native_stderr():  # a model that fails to load: ORT's coloured `[E:onnxruntime ... EndProfiling]`
            # lines stay off the terminal; the Python error, which the record keeps, says what went wrong
            session = ort.InferenceSession(str(path), options, providers=self._providers(provider))
        if PROVIDERS[provider] not in session.get_providers():
            raise VariantSkipped(f"onnxruntime could not start {PROVIDERS[provider]} on this machine "
                                 f"(the session got {', '.join(session.get_providers())})")
        return session

    def _require_provider(self, ort: Any, provider: str) -> None:
        ort_name = PROVIDERS[provider]
        available = ort.get_available_providers()
        if ort_name not in available:
            raise VariantSkipped(f"onnxruntime {ort.__version__} on this machine has no {ort_name} "
                                 f"(available: {', '.join(available)})")

    def memory_round(self, model: LoadedModel, exported: Exported, variant: Variant) -> dict[str, Metric] | None:
        """A session loaded inside the meter's span (as `measure` loads it), then its first call, as `measure`
        reads it; a generative model's memory is measured once."""
        import onnxruntime as ort

        from mlbench.memory import MemoryRound

        if model.spec.generate is not None:
            return None
        artifact: OnnxArtifact = exported.payload
        provider = variant.axis("providers")
        self._require_provider(ort, provider)

        def load() -> Callable[[], object]:
            session = self._session(ort, artifact.path, provider, self._session_options(ort))
            feed = _feed(session, model, 0, model.alternative(variant.shape))
            return lambda: session.run(None, feed)

        return MemoryRound(1).one(load)

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        import onnxruntime as ort

        provider = variant.axis("providers")
        self._require_provider(ort, provider)
        artifact: OnnxArtifact = exported.payload
        session = self._session(ort, artifact.path, provider, self._session_options(ort))
        feed = _feed(session, model, 0, model.alternative(variant.shape))
        if provider != "cpu":  # other providers run off the CPU's pool: nothing for the stall check to switch
            run = session.run
            return CallTimer(lambda: run(None, feed))
        from mlbench.cpus import available_cpus

        configured = self.target.intra_op_threads or available_cpus()
        sessions: dict[int, Any] = {configured: session}
        current = [session]

        def set_threads(count: int) -> None:  # a second session: onnxruntime fixes a session's pool at creation
            if count not in sessions:
                options = self._session_options(ort)
                options.intra_op_num_threads = count
                sessions[count] = self._session(ort, artifact.path, provider, options)
            current[0] = sessions[count]

        return CallTimer(lambda: current[0].run(None, feed), threads=configured, set_threads=set_threads)

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        import onnxruntime as ort

        from mlbench.backends.onnxruntime.profile import build_placement, load_events, op_time_tables, parse_profile
        from mlbench.cold_start import evict_files, load_metrics
        from mlbench.memory import MemoryMeter
        from mlbench.sources.float64 import float64_snr_db
        from mlbench.sustained import sustained_figures
        from mlbench.timing import time_once
        from mlbench.verify import compare_samples

        artifact: OnnxArtifact = exported.payload
        precision, provider = variant.axis("precision"), variant.axis("providers")
        ort_name = PROVIDERS[provider]
        self._require_provider(ort, provider)
        metrics = static_metrics(artifact, exported.info.size_bytes if exported.info else 0)
        if model.spec.generate is not None:
            return self._measure_generation(ort, model, exported, variant, metrics)

        caches = evict_files([artifact.path], RUNTIME_KEEPS)  # the first session is the cold load
        meter = MemoryMeter.start()
        load_ms, session = time_once(lambda: self._session(ort, artifact.path, provider, self._session_options(ort)))
        alternative = model.alternative(variant.shape)
        feed = _feed(session, model, 0, alternative)
        meter.loaded()
        first_ms, first_outputs = time_once(lambda: session.run(None, feed))
        settings = self.config.latency
        metrics.update(meter.metrics())  # before the thread check's second session, whose load is not this one's
        latency, check, timed = self._timed(ort, session, feed, artifact.path, provider, first_ms)
        sustained: dict[str, Any] = {}
        sustained_figures(timed, settings, metrics, sustained)
        timed = None  # the one-thread session, if the check made one, goes before the verification
        pairs = [(model.sample(0, alternative)[1], list(first_outputs))]
        for index in range(1, self.config.verify.samples):  # further seeded input sets, after the timing
            pairs.append((model.sample(index, alternative)[1],
                          list(session.run(None, _feed(session, model, index, alternative)))))
        session = None  # release the timed session before the profiled one starts
        warm_ms, _ = time_once(lambda: self._session(ort, artifact.path, provider, self._session_options(ort)))
        metrics.update(load_metrics(load_ms, warm_ms))

        own = ((lambda: float64_snr_db(model, self.config.verify.samples, alternative))
               if precision == "float32" else None)  # the floor is capped at the reference's own precision
        verify = (compare_samples(pairs, tolerance=self.config.verify.tolerance_for(precision),
                                  min_snr_db=self.config.verify.min_snr_db_for(precision),
                                  reference_name=REFERENCE, reference_precision_db=own) if model.has_source else None)

        warmup_runs = max(1, settings.warmup)  # the first run of a session always pays for allocation
        folder = Path(tempfile.mkdtemp(prefix="mlbench-ort-profile-"))
        try:
            options = self._session_options(ort, profile_prefix=str(folder / "profile"))
            profiled = self._session(ort, artifact.path, provider, options)
            for _ in range(warmup_runs + self.target.profile_runs):
                profiled.run(None, feed)
            profile = parse_profile(load_events(profiled.end_profiling()), skip_runs=warmup_runs)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if latency.threads is None and profile.threads is not None:
            latency = latency.model_copy(update={"threads": profile.threads})

        placement = build_placement(profile, constants=artifact.graph["initializers"] + artifact.graph["constant_nodes"],
                                    preferred_provider=ort_name, precision=precision)
        metrics.update(runtime_metrics(latency, first_ms=first_ms, load_ms=load_ms, verify=verify))
        if verify is None:
            for name, unit in (("verify.max_abs", "abs"), ("verify.max_rel", "rel")):
                metrics[name] = Metric.absent(unit, NO_SOURCE)
        metrics.update(placement_metrics(placement))
        details = {
            "memory": meter.facts(), "load_caches": caches, **sustained,
            **({"thread_check": check.details()} if check is not None else {}),
            "op_time": op_time_tables(profile),
            "session": {"provider": ort_name, "device": provider_device(ort_name),
                        "graph_optimization": self.target.graph_optimization,
                        "intra_op_threads": latency.threads,
                        "threads_source": "configured" if self.target.intra_op_threads else "onnxruntime profile",
                        "onnxruntime": ort.__version__},
        }
        from mlbench.backends.localize_hook import localize_if_close
        from mlbench.backends.onnxruntime.localize import localize_variant

        details.update(localize_if_close(self, model, variant, verify, localize_variant,
                                         existing=self.target.file is not None, info=exported.info))
        return Measurement(metrics=metrics, latency=latency, verify=verify, placement=placement, details=details)

    def _measure_generation(self, ort: Any, model: LoadedModel, exported: Exported, variant: Variant,
                            metrics: dict[str, Metric]) -> Measurement:
        from mlbench.backends.onnxruntime.generate import measure_generation
        from mlbench.timing import time_once

        if self.target.file is not None:
            raise VariantSkipped("a generative model's ONNX decoder is exported by mlbench (the cache as inputs and "
                                 "outputs); an existing .onnx file is not measured as one")
        provider = variant.axis("providers")
        load_ms, session = time_once(lambda: self._session(ort, exported.payload.path, provider,
                                                           self._session_options(ort)))
        result = measure_generation(session, model, variant, self.config, threads=self.target.intra_op_threads)
        result.metrics = {**metrics, "load_time": Metric.measured(load_ms, "ms"), **result.metrics}
        result.details["session"] = {"provider": PROVIDERS[provider], "onnxruntime": ort.__version__,
                                     "graph_optimization": self.target.graph_optimization}
        return result


def _feed(session: Any, model: LoadedModel, sample: int = 0, alternative: int = 0) -> dict[str, Any]:
    """The model's seeded inputs (input set `sample` at shape alternative `alternative`) by the session's
    input names (float16 graphs keep float32 inputs)."""
    names = [i.name for i in session.get_inputs()]
    inputs = model.sample(sample, alternative)[0]
    if len(names) != len(inputs):
        raise ValueError(f"the ONNX graph takes {len(names)} inputs ({', '.join(names)}); "
                         f"the model has {len(inputs)}")
    return {name: tensor.detach().cpu().numpy() for name, tensor in zip(names, inputs)}
