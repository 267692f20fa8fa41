"""ONNX Runtime's generative variants: the decoder graph (`generate_export`) run step by step with I/O binding.

Each step binds the previous step's `present.*` outputs, as the OrtValues ONNX Runtime allocated, as the next
step's `past.*` inputs: the cache never leaves the runtime (no copy to numpy and back per step); only the
token ids go in and the last position's logits come out. The graph appends to the cache (Concat), so a step
allocates the grown cache anew; `memory.kv_cache` is its size at the context (bytes per position of the
presents × context).

Prefill is timed like any latency (each call an empty past and the whole prompt), decode step by step
(`mlbench.generate.timing`), and the generation over eager's tokens is verified against eager float32's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench.backends.base import Measurement
from mlbench.generate.metrics import GreedyTrace, generative_metrics, verification_metrics, verify_generation
from mlbench.generate.reference import REFERENCE_NAME, eager_generation, prompt_tokens
from mlbench.generate.timing import decode_rounds, time_decode_graded
from mlbench.timing import time_calls

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel


ELEMENT_BYTES = {"tensor(float)": 4, "tensor(float16)": 2, "tensor(bfloat16)": 2, "tensor(double)": 8}


class BoundDecoder:
    """A decoder session and its cache, stepped with I/O binding (module docstring)."""

    def __init__(self, session: Any) -> None:
        import onnxruntime as ort

        self.session = session
        inputs = session.get_inputs()
        self.past_names = [i.name for i in inputs if i.name.startswith("past.")]
        self.output_names = [o.name for o in session.get_outputs()]
        self.empty = [ort.OrtValue.ortvalue_from_numpy(np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32))
                      for i in inputs if i.name.startswith("past.")]
        self.binding = session.io_binding()
        self.past: list[Any] = self.empty
        self.length = 0

    def _run(self, ids: np.ndarray) -> np.ndarray:
        binding = self.binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        binding.bind_cpu_input("input_ids", ids)
        for name, value in zip(self.past_names, self.past):
            binding.bind_ortvalue_input(name, value)
        for name in self.output_names:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        self.past = list(outputs[1:])
        self.length += ids.shape[1]
        return outputs[0].numpy()[0]

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        """The prompt's last logits, from an empty cache."""
        self.past, self.length = self.empty, 0
        return self._run(prompt)

    def decode(self, token: int) -> np.ndarray:
        return self._run(np.array([[token]], dtype=np.int64))

    def bytes_per_position(self) -> int:
        """Bytes the cache holds per position (every layer's key and value), read from the presents."""
        if not self.length:
            raise ValueError("nothing decoded yet")
        return sum(int(np.prod(v.shape())) * ELEMENT_BYTES[v.data_type()] for v in self.past) // self.length

    def generate(self, prompt: np.ndarray, new_tokens: int, feed: Sequence[int] | None = None) -> GreedyTrace:
        """Greedy generation (`feed`: the tokens to decode instead of its own choices, as in verification)."""
        rows = [self.prefill(prompt)]
        chosen = [int(rows[0].argmax())]
        for step in range(new_tokens):
            rows.append(self.decode(chosen[-1] if feed is None else int(feed[step])))
            chosen.append(int(rows[-1].argmax()))
        return GreedyTrace(prompt=[int(t) for t in prompt.reshape(-1)], tokens=chosen,
                           logits=np.stack(rows).astype(np.float32))


def measure_generation(session: Any, model: LoadedModel, variant: Variant, config: PipelineConfig, *,
                       threads: int | None) -> Measurement:
    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    precision = variant.axis("precision")
    decoder = BoundDecoder(session)
    prompt = prompt_tokens(model.spec, model.seed, variant.prompt)
    settings = config.latency
    prefill_latency = time_calls(lambda: decoder.prefill(prompt), warmup=settings.warmup, repeats=settings.repeats,
                                 min_time_s=settings.min_time_s, max_repeats=settings.max_repeats, threads=threads)
    rounds = decode_rounds(settings.repeats, generate.new_tokens)
    decode, decode_stability = time_decode_graded(
        lambda: decoder.prefill(prompt), lambda logits: decoder.decode(int(logits.argmax())), generate.new_tokens,
        rounds=rounds, warmup=min(settings.warmup, 1))
    kv_bytes = decoder.bytes_per_position() * generate.context
    metrics = generative_metrics(prefill_ms=prefill_latency.samples, decode_ms=decode,
                                 prefill_stability=prefill_latency.stability, decode_stability=decode_stability,
                                 kv_cache_bytes=kv_bytes)
    details: dict[str, Any] = {"generate": {
        "prompt": variant.prompt, "new_tokens": generate.new_tokens, "context": generate.context,
        "cache": "past/present key and value tensors bound as OrtValues (I/O binding); grown by Concat each step",
        "kv_cache": "bytes per position of the presents × context", "decode_rounds": rounds}}
    if not model.has_source:
        return Measurement(metrics=metrics, details=details)
    reference = eager_generation(model, variant.prompt)
    actual = decoder.generate(prompt, generate.new_tokens, feed=reference.fed_tokens())
    verify = verify_generation(reference, actual, tolerance=config.verify.tolerance_for(precision),
                               min_snr_db=config.verify.min_snr_db_for(precision), reference_name=REFERENCE_NAME)
    return Measurement(metrics={**metrics, **verification_metrics(verify)}, verify=verify, details=details)
