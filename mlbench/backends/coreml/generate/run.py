"""Running a stateful Core ML generation: emulated on any OS (the interpreter, its state cells), measured on
macOS (``MLState``). Both drive the same `StatefulGenerator`: prefill over the prompt, then one decode step per
token, each call given ``input_ids`` and the causal mask whose width says how many positions are cached
(`mlbench.generate.kv_module`), the cache itself never leaving the state.

macOS, written against coremltools 9's ``CompiledMLModel(path, compute_units, function_name=...)``,
``make_state()`` and ``predict(data, state=...)``: each function of the multifunction package is loaded by
name from the one compiled model, and one state, made by the decode function, is passed to both, so prefill
fills the cache decode reads (the functions declare the same states). Verification decodes eager's tokens
(teacher forcing, `mlbench.generate.metrics.verify_generation`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench.backends.base import Measurement
from mlbench.generate.metrics import GreedyTrace, generative_metrics, verification_metrics, verify_generation
from mlbench.generate.reference import REFERENCE_NAME, eager_generation, prompt_tokens

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel

__all__ = ["StatefulGenerator", "emulated_generation", "measure_generation"]

Call = Callable[[dict[str, np.ndarray], Any], dict[str, Any]]


class StatefulGenerator:
    """Prefill and decode calls of a stateful program, the cache in a state object made per generation."""

    def __init__(self, prefill: Call, decode: Call, make_state: Callable[[], Any]) -> None:
        self.prefill_call, self.decode_call, self.make_state = prefill, decode, make_state
        self.state: Any = None
        self.length = 0

    def _run(self, call: Call, tokens: Sequence[int]) -> np.ndarray:
        from mlbench.generate.kv_module import step_inputs

        ids, mask = step_inputs(tokens, self.length)
        out = call({"input_ids": ids, "causal_mask": mask}, self.state)
        self.length += len(tokens)
        return np.asarray(out["logits"], dtype=np.float32)[0, -1]

    def prefill(self, prompt: Sequence[int]) -> np.ndarray:
        """The prompt's last logits, from a fresh (zeroed) state."""
        self.state, self.length = self.make_state(), 0
        return self._run(self.prefill_call, list(prompt))

    def decode(self, token: int) -> np.ndarray:
        return self._run(self.decode_call, [int(token)])

    def generate(self, prompt: Sequence[int], new_tokens: int, feed: Sequence[int] | None = None) -> GreedyTrace:
        rows = [self.prefill(prompt)]
        chosen = [int(rows[0].argmax())]
        for step in range(new_tokens):
            rows.append(self.decode(chosen[-1] if feed is None else int(feed[step])))
            chosen.append(int(rows[-1].argmax()))
        return GreedyTrace(prompt=[int(t) for t in prompt], tokens=chosen, logits=np.stack(rows).astype(np.float32))


STATE_PRECISION_NOTE = ("the cache is Core ML state, float16 in every program (coremltools 9 converts no other "
                        "state type), so a float32 program's generation is judged by the float16 tolerance")


def judged_as(config: PipelineConfig, precision: str, recipe: str | None) -> tuple[float, float]:
    """(tolerance, SNR floor) a generation is verified with: a float32 program's keys and values are stored in
    float16 state (`STATE_PRECISION_NOTE`), so it is judged as float16; otherwise as its precision."""
    judged = "float16" if precision == "float32" else precision
    return config.verify.tolerance_for(judged, recipe), config.verify.min_snr_db_for(judged, recipe)


def emulated_generator(folder: Path, precision: str = "declared") -> StatefulGenerator:
    """The export's functions run by mlbench's interpreter, sharing one emulated state."""
    from mlbench.backends.coreml.emulate import Emulator, load_program
    from mlbench.backends.coreml.generate.export import function_packages

    emulators = {name: Emulator(load_program(package, function), precision)
                 for name, (package, function) in function_packages(folder).items()}
    return StatefulGenerator(lambda feed, state: emulators["prefill"].run(feed, state),
                             lambda feed, state: emulators["decode"].run(feed, state),
                             emulators["decode"].make_state)


def emulated_generation(folder: Path, model: LoadedModel, variant: Variant,
                        config: PipelineConfig) -> tuple[Verification | None, str | None]:
    """The emulated verification of a generation (source emulated), or why there is none."""
    from mlbench.backends.coreml.emulate import EmulationError, UnsupportedOps

    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    if not model.has_source:
        return None, "no PyTorch source to make eager's generation from"
    precision, recipe = variant.axis("precision"), variant.axis("optimize")
    try:
        generator = emulated_generator(folder)
        reference = eager_generation(model, variant.prompt)
        actual = generator.generate(reference.prompt, generate.new_tokens, feed=reference.fed_tokens())
    except (UnsupportedOps, EmulationError) as exc:
        return None, f"the Core ML interpreter could not run the generation: {exc}"
    tolerance, floor = judged_as(config, precision, recipe)
    return verify_generation(reference, actual, tolerance=tolerance, min_snr_db=floor,
                             reference_name=REFERENCE_NAME, source="emulated"), None


def measure_generation(folder: Path, model: LoadedModel, variant: Variant, config: PipelineConfig,
                       kv_cache_bytes: int) -> Measurement:
    """Prefill and decode timed through ``MLState`` on macOS, and the generation verified (module docstring)."""
    import coremltools as ct

    from mlbench.backends.coreml.generate.export import function_packages
    from mlbench.backends.coreml.runtime import compiled_model
    from mlbench.generate.timing import decode_rounds, time_decode_graded
    from mlbench.timing import time_calls

    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    compute_units = getattr(ct.ComputeUnit, variant.axis("compute_units").upper())
    models: dict[str, Any] = {}
    load_ms = compile_ms = 0.0
    compiled: dict[Path, Path] = {}
    for name, (package, function) in function_packages(folder).items():
        if package not in compiled:  # a multifunction package is compiled once for both functions
            compiled[package], ms, _reused = compiled_model(ct, package)
            compile_ms += ms
        load_ms += _load(ct, models, name, compiled[package], function, compute_units)
    generator = StatefulGenerator(lambda feed, state: models["prefill"].predict(feed, state=state),
                                  lambda feed, state: models["decode"].predict(feed, state=state),
                                  models["decode"].make_state)
    prompt = [int(t) for t in prompt_tokens(model.spec, model.seed, variant.prompt).reshape(-1)]
    settings = config.latency
    prefill = time_calls(lambda: generator.prefill(prompt), warmup=settings.warmup, repeats=settings.repeats,
                         min_time_s=settings.min_time_s, max_repeats=settings.max_repeats)
    rounds = decode_rounds(settings.repeats, generate.new_tokens)
    decode, decode_stability = time_decode_graded(
        lambda: generator.prefill(prompt), lambda logits: generator.decode(int(logits.argmax())), generate.new_tokens,
        rounds=rounds, warmup=min(settings.warmup, 1))
    from mlbench.records import Metric

    metrics = {**generative_metrics(prefill_ms=prefill.samples, decode_ms=decode, prefill_stability=prefill.stability,
                                    decode_stability=decode_stability, kv_cache_bytes=kv_cache_bytes),
               "load_time": Metric.measured(load_ms, "ms"), "compile_time": Metric.measured(compile_ms, "ms")}
    details: dict[str, Any] = {"generate": {"prompt": variant.prompt, "new_tokens": generate.new_tokens,
                                            "context": generate.context, "decode_rounds": rounds,
                                            "cache": "Core ML state (MLState) made by decode, passed to both functions"}}
    verify = None
    if model.has_source:
        precision, recipe = variant.axis("precision"), variant.axis("optimize")
        reference = eager_generation(model, variant.prompt)
        actual = generator.generate(reference.prompt, generate.new_tokens, feed=reference.fed_tokens())
        tolerance, floor = judged_as(config, precision, recipe)
        verify = verify_generation(reference, actual, tolerance=tolerance, min_snr_db=floor,
                                   reference_name=REFERENCE_NAME)
        metrics.update(verification_metrics(verify))
    return Measurement(metrics=metrics, verify=verify, details=details)


def _load(ct: Any, models: dict[str, Any], name: str, compiled: Path, function: str, compute_units: Any) -> float:
    """Load one function of a compiled model into `models[name]`; the load's ms."""
    from mlbench.timing import time_once

    kwargs = {"function_name": function} if function != "main" else {}
    elapsed, models[name] = time_once(lambda: ct.models.CompiledMLModel(str(compiled), compute_units=compute_units,
                                                                        **kwargs))
    return float(elapsed)
