"""Eager PyTorch's generative variants: greedy generation with transformers' static cache, timed as prefill
over the prompt (timed like any latency: warmup, repeats, min_time_s) and then step by step, one decode step
per new token, and verified against eager float32 CPU's own generation (teacher forcing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mlbench.backends.base import Measurement
from mlbench.generate.metrics import generative_metrics, verification_metrics, verify_generation
from mlbench.generate.reference import REFERENCE_NAME, eager_generation, prompt_tokens
from mlbench.generate.timing import decode_rounds, time_decode_graded
from mlbench.plugins.spec import REFERENCE
from mlbench.timing import time_calls

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel


def measure_generation(model: LoadedModel, payload: Any, variant: Variant, config: PipelineConfig, *,
                       sync: Callable[[], Any], threads: int | None) -> Measurement:
    """Prefill and decode timings, the cache's bytes and (but for the reference itself) the verification."""
    import torch

    from mlbench.generate.eager import CachedGenerator, causal_lm

    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    device, precision = variant.axis("device"), variant.axis("precision")
    module = causal_lm(payload, model.spec.name)
    generator = CachedGenerator(module, generate.context, device=device, dtype=getattr(torch, precision))
    prompt = torch.from_numpy(prompt_tokens(model.spec, model.seed, variant.prompt)).to(device)
    settings = config.latency

    def prefill() -> Any:
        logits = generator.prefill(prompt)
        sync()
        return logits

    def step(logits: Any) -> Any:
        logits = generator.decode(torch.argmax(logits).reshape(1, 1))
        sync()
        return logits

    prefill_latency = time_calls(prefill, warmup=settings.warmup, repeats=settings.repeats,
                                 min_time_s=settings.min_time_s, max_repeats=settings.max_repeats, threads=threads)
    rounds = decode_rounds(settings.repeats, generate.new_tokens)
    decode, decode_stability = time_decode_graded(prefill, step, generate.new_tokens, rounds=rounds,
                                                  warmup=min(settings.warmup, 1))
    metrics = generative_metrics(prefill_ms=prefill_latency.samples, decode_ms=decode,
                                 prefill_stability=prefill_latency.stability, decode_stability=decode_stability,
                                 kv_cache_bytes=generator.kv_bytes())
    details: dict[str, Any] = {"generate": {"prompt": variant.prompt, "new_tokens": generate.new_tokens,
                                            "context": generate.context, "cache": type(generator.cache).__name__,
                                            "decode_rounds": rounds}}
    if device == "cpu" and precision == "float32":
        details["verify"] = f"this variant is the reference ({REFERENCE})"
        return Measurement(metrics=metrics, details=details)
    reference = eager_generation(model, variant.prompt)
    actual = generator.generate(prompt, generate.new_tokens, feed=reference.fed_tokens())
    verify = verify_generation(reference, actual, tolerance=config.verify.tolerance_for(precision),
                               min_snr_db=config.verify.min_snr_db_for(precision), reference_name=REFERENCE_NAME)
    return Measurement(metrics={**metrics, **verification_metrics(verify)}, verify=verify, details=details)
