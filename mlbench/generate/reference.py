"""The reference a generative variant is verified against: eager float32's greedy generation over the same
seeded prompt, made once per (prompt length, new tokens) and kept on the loaded model for every backend.

Every backend draws its prompt with `prompt_tokens` (numpy only), so all of them decode the same tokens, and
compares its steps' logits with `eager_generation`'s (`mlbench.generate.metrics.verify_generation`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench.config.generate import PROMPT_INPUT

if TYPE_CHECKING:
    from mlbench.generate.metrics import GreedyTrace
    from mlbench.sources.loading import LoadedModel

REFERENCE_NAME = "torch/cpu/float32 greedy generation"
DEFAULT_TOKEN_RANGE = (0, 10)  # the inputs' own default range


def prompt_tokens(spec: object, seed: int, length: int) -> np.ndarray:
    """Seeded prompt token ids, [1, length] int64, drawn from the prompt input's range: the same for every
    backend and every run (seed and length pick them)."""
    inputs = getattr(spec, "inputs", [])
    item = next((i for i in inputs if i.name == PROMPT_INPUT), None)
    low, high = item.range if item is not None and item.range is not None else DEFAULT_TOKEN_RANGE
    rng = np.random.default_rng([seed, length])
    return rng.integers(low, high, size=(1, length), dtype=np.int64)


def eager_generation(model: LoadedModel, prompt: int) -> GreedyTrace:
    """Eager float32 CPU's greedy generation of `generate.new_tokens` tokens after the seeded prompt of
    `prompt` tokens (made once per model and prompt length)."""
    generate = model.spec.generate
    if generate is None:
        raise ValueError(f"model '{model.spec.name}' has no generate block")
    key = (prompt, generate.new_tokens)
    if key not in model.generations:
        import torch

        from mlbench.generate.eager import CachedGenerator, causal_lm

        module = causal_lm(model.torch_module, model.spec.name)
        ids = torch.from_numpy(prompt_tokens(model.spec, model.seed, prompt))
        with torch.inference_mode(), eager_attention(module):
            model.generations[key] = CachedGenerator(module, generate.context).generate(ids, generate.new_tokens)
    return model.generations[key]


@contextmanager
def eager_attention(module: Any) -> Iterator[None]:
    """The reference computed with transformers' eager attention (plain matmul and softmax), the config restored
    after: an export wraps the same module in `KVCacheLM`, which sets eager attention on its config, so without
    this the reference's last bits would depend on whether this process exported first, and a derived figure
    keyed by the reference's digest would be computed again by every fresh process."""
    config = getattr(module, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        yield
        return
    before = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        yield
    finally:
        config._attn_implementation = before
