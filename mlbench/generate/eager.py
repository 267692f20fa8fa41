"""Greedy generation in eager PyTorch with transformers' static cache (`StaticCache`: the cache class made for
export, its tensors allocated once for `context` positions and written in place).

`CachedGenerator` is what the eager backend times (prefill, then one decode step per token) and what makes the
reference every other backend is verified against (`mlbench.generate.reference`). torch and transformers are
imported here, never on the validate path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mlbench.errors import ReportableError
from mlbench.generate.metrics import GreedyTrace


class NoKVCache(ReportableError):
    """The model keeps no key/value cache mlbench can drive: its generative variants fail with this one line."""


def causal_lm(module: torch.nn.Module, name: str) -> Any:
    """The transformers causal language model inside a loaded model (unwrapping mlbench's binding); one line
    when it is none (a module or file source that keeps no key/value cache mlbench can drive)."""
    inner: Any = getattr(module, "module", module)  # BoundModule holds the model it binds
    config = getattr(inner, "config", None)
    if config is None or not hasattr(inner, "get_output_embeddings") or inner.get_output_embeddings() is None:
        raise NoKVCache(f"model '{name}' has no key/value cache mlbench can drive: generate needs a transformers "
                             "causal language model (a ...ForCausalLM or ...LMHeadModel class)")
    if getattr(config, "use_cache", True) is False:
        raise NoKVCache(f"model '{name}' keeps no key/value cache (its config sets use_cache false)")
    return inner


def cache_argument(lm: Any) -> str:
    """The keyword the model's forward takes its cache by: `cache` (transformers 5.24 on), else `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


class CachedGenerator:
    """Prefill and decode steps of a causal LM against a `StaticCache` of `context` positions."""

    def __init__(self, module: Any, context: int, *, device: str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        from transformers.cache_utils import StaticCache

        self.module, self.context, self.device = module, context, device
        self.cache = StaticCache(config=module.config, max_cache_len=context)
        self.length = 0
        self.dtype = dtype
        self.keyword = cache_argument(module)

    def reset(self) -> None:
        """Empty the cache (in place: its tensors stay allocated) for a new prompt."""
        self.cache.reset()
        self.length = 0

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(self.length, self.length + ids.shape[1], device=self.device)
        if self.length + ids.shape[1] > self.context:
            raise ValueError(f"{self.length + ids.shape[1]} tokens exceed the cache's {self.context} positions")
        out = self.module(input_ids=ids, use_cache=True, cache_position=positions, **{self.keyword: self.cache})
        self.length += ids.shape[1]
        return out.logits[0, -1]

    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        """The logits at the prompt's last position, the cache reset and then holding the prompt."""
        self.reset()
        return self._forward(prompt)

    def decode(self, token: torch.Tensor) -> torch.Tensor:
        """One decode step: `token` ([1, 1]) at the next position; the logits of what follows it."""
        return self._forward(token)

    def kv_bytes(self) -> int:
        """Bytes of the cache's key and value tensors (allocated for `context` positions)."""
        total = 0
        for layer in getattr(self.cache, "layers", []):
            for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(tensor, torch.Tensor):
                    total += tensor.numel() * tensor.element_size()
        return total

    def generate(self, prompt: torch.Tensor, new_tokens: int, feed: Sequence[int] | None = None) -> GreedyTrace:
        """Greedy generation: prefill, then `new_tokens` decode steps. `feed`: the tokens to decode instead of
        its own choices (eager's, when verifying), so every step's logits answer the same question."""
        rows = [self.prefill(prompt).float()]
        chosen = [int(rows[0].argmax())]
        for step in range(new_tokens):
            token = chosen[-1] if feed is None else int(feed[step])
            rows.append(self.decode(torch.tensor([[token]], device=self.device)).float())
            chosen.append(int(rows[-1].argmax()))
        logits = torch.stack(rows).cpu().numpy().astype(np.float32)
        return GreedyTrace(prompt=[int(t) for t in prompt.reshape(-1).tolist()], tokens=chosen, logits=logits)


def full_forward_logits(module: Any, tokens: Sequence[int]) -> np.ndarray:
    """The logits at every position of one forward pass over `tokens`, without a cache: what decoding with a
    cache must equal (the tests' check of each backend's cache)."""
    ids = torch.tensor([list(tokens)], dtype=torch.int64)
    with torch.inference_mode():
        out: Any = module(input_ids=ids, use_cache=False)
    return out.logits[0].float().cpu().numpy()
