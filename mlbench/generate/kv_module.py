"""A transformers causal LM wrapped so its key/value cache lives in the module's own buffers.

The shape stateful exporters want (coremltools' "Stateful Models" guide: a registered buffer that the forward
updates in place becomes a `ct.StateType`; Core AI's `state_names=` the same): the cache is two buffers
`key_cache` / `value_cache` of shape [layers, 1, kv_heads, context, head_dim], and

    logits = module(input_ids [1, n], causal_mask [1, 1, n, end])

writes the n new keys/values at positions end-n .. end-1 and returns the logits of those n tokens. The
current length is carried by the mask's shape (end - n tokens were already cached), so one traced graph serves
prefill (n = prompt length, flexible) and decode (n = 1) with no data-dependent control flow — the form of
Apple's documented Mistral-7B export. `causal_mask(n, start)` builds that mask; `greedy(step, prompt, k)` runs
a generation loop over any step function with that signature, so eager torch, the Core ML emulator and an
`MLState` on a Mac share one loop. Only torch and transformers are imported here (backend-neutral).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# The additive mask value for "may not attend": large and finite, so float16 programs do not turn it into
# inf - inf = nan when it meets another large negative.
MASKED = -1e4

Step = Callable[[np.ndarray, np.ndarray], np.ndarray]
FUSED_SDPA = "mlbench_fused_sdpa"
ATTENTIONS = {"eager": "eager", "sdpa": FUSED_SDPA}  # KVCacheLM's `attention` -> transformers' implementation name


def fused_sdpa_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, scaling: float | None = None,
                         **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention as one `scaled_dot_product_attention` call that coremltools converts to its fused iOS18 op.

    transformers' own "sdpa" passes `scale=` explicitly, and coremltools 9 fuses only when no scale is given
    (`can_use_fused_sdpa = iOS18 and scale is None` in its torch frontend), so the default scale 1/sqrt(head
    size) is left implicit (a model with another scale has its query rescaled first); key/value heads are
    repeated for grouped-query attention, and the mask is cast to the query's dtype."""
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = int(getattr(module, "num_key_value_groups", 1))
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    head = query.shape[-1]
    if scaling is not None and abs(scaling * head ** 0.5 - 1.0) > 1e-6:
        query = query * (scaling * head ** 0.5)
    mask = None if attention_mask is None else attention_mask[:, :, :, : key.shape[-2]].to(query.dtype)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return out.transpose(1, 2).contiguous(), None


def _register_fused_sdpa() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(FUSED_SDPA, fused_sdpa_attention)


@dataclass(frozen=True)
class CacheShape:
    """The cache geometry a causal LM's config implies."""

    layers: int
    kv_heads: int
    head_dim: int
    context: int

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return (self.layers, 1, self.kv_heads, self.context, self.head_dim)

    def bytes(self, bytes_per_element: int) -> int:
        """Bytes of the key and the value cache together at full context."""
        return 2 * int(np.prod(self.shape)) * bytes_per_element


class NotACausalLM(ValueError):
    """The model has no key/value cache this wrapper can hold (one line, for the user)."""


def cache_shape(config: Any, context: int) -> CacheShape:
    """Layers, key/value heads and head size from a transformers config (Llama- and GPT-2-style names)."""
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not (layers and heads and hidden):
        raise NotACausalLM(f"{type(config).__name__} names no layers/heads/hidden size, so it has no key/value cache")
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    return CacheShape(int(layers), int(kv_heads), int(head_dim), int(context))


class _SliceCache:
    """The duck-typed transformers cache a forward writes through: slices of the wrapper's buffers."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, start: Any, end: Any) -> None:
        self.keys, self.values, self.start, self.end = keys, values, start, end

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx, :, :, self.start:self.end, :] = key_states.to(self.keys.dtype)
        self.values[layer_idx, :, :, self.start:self.end, :] = value_states.to(self.values.dtype)
        k = self.keys[layer_idx, :, :, : self.end, :].to(key_states.dtype)
        v = self.values[layer_idx, :, :, : self.end, :].to(value_states.dtype)
        return k, v

    def get_seq_length(self, layer_idx: int = 0) -> Any:
        return self.start


class KVCacheLM(torch.nn.Module):
    """`forward(input_ids [1, n], causal_mask [1, 1, n, end]) -> logits [1, n, vocab]`, cache in buffers."""

    key_cache: torch.Tensor
    value_cache: torch.Tensor

    def __init__(self, model: torch.nn.Module, context: int, cache_dtype: torch.dtype = torch.float32,
                 attention: str = "eager") -> None:
        super().__init__()
        config = getattr(model, "config", None)
        head = getattr(model, "get_output_embeddings", None)
        if config is None or head is None or head() is None:
            raise NotACausalLM(f"{type(model).__name__} is not a causal language model (no LM head), "
                               "so it has no key/value cache to generate with")
        self.geometry = cache_shape(config, context)
        _register_fused_sdpa()
        # eager attention by default: plain matmul/softmax ops every exporter converts (sdpa's mask handling
        # varies); "sdpa": one torch scaled_dot_product_attention call (`fused_sdpa_attention`)
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, not {attention!r}")
        config._attn_implementation = ATTENTIONS[attention]
        self.model = model.eval()
        self.register_buffer("key_cache", torch.zeros(self.geometry.shape, dtype=cache_dtype))
        self.register_buffer("value_cache", torch.zeros(self.geometry.shape, dtype=cache_dtype))

    @property
    def context(self) -> int:
        return self.geometry.context

    def forward(self, input_ids: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
        n = input_ids.shape[-1]
        end = causal_mask.shape[-1]
        start = end - n
        position_ids = torch.arange(n, dtype=torch.int64).unsqueeze(0) + start
        cache = _SliceCache(self.key_cache, self.value_cache, start, end)
        out = self.model(input_ids=input_ids, attention_mask=causal_mask.to(torch.float32),
                         position_ids=position_ids, cache=cache, use_cache=True)
        logits: torch.Tensor = out.logits if hasattr(out, "logits") else out[0]
        return logits

    def reset(self) -> None:
        self.key_cache.zero_()
        self.value_cache.zero_()


def causal_mask(n: int, start: int) -> np.ndarray:
    """The [1, 1, n, start + n] additive mask: token i (at position start + i) sees positions <= start + i."""
    end = start + n
    rows = np.arange(n)[:, None] + start
    cols = np.arange(end)[None, :]
    mask = np.where(cols <= rows, 0.0, MASKED).astype(np.float32)
    return mask.reshape(1, 1, n, end)


def step_inputs(tokens: Sequence[int], start: int) -> tuple[np.ndarray, np.ndarray]:
    """input_ids [1, n] (int32, as Core ML takes them) and the causal mask for tokens written at `start`."""
    ids = np.asarray(tokens, dtype=np.int32).reshape(1, -1)
    return ids, causal_mask(ids.shape[1], start)


def eager_step(module: KVCacheLM) -> Step:
    """A step function over the torch wrapper (its buffers are the cache; call `module.reset()` to clear)."""
    def step(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = module(torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask))
        return out.detach().float().numpy()
    return step


@dataclass
class Generation:
    """What a greedy run produced: the new tokens and the last-position logits of each step."""

    tokens: list[int]
    logits: list[np.ndarray]


def greedy(prefill: Step, decode: Step, prompt: Sequence[int], new_tokens: int) -> Generation:
    """Greedy generation: one prefill over the prompt, then `new_tokens - 1` single-token decode steps.

    Step i's logits are those that chose token i (prefill's last row chose the first).
    """
    ids, mask = step_inputs(prompt, 0)
    logits = np.asarray(prefill(ids, mask))[0, -1]
    out = Generation([int(np.argmax(logits))], [logits])
    position = len(prompt)
    for _ in range(new_tokens - 1):
        ids, mask = step_inputs([out.tokens[-1]], position)
        logits = np.asarray(decode(ids, mask))[0, -1]
        out.tokens.append(int(np.argmax(logits)))
        out.logits.append(logits)
        position += 1
    return out


def tiny_causal_lm(style: str, seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """A tiny random Llama- or GPT-2-style causal LM from a config (offline; tests and examples)."""
    import transformers

    torch.manual_seed(seed)
    if style == "llama":
        settings: dict[str, Any] = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                                        "max_position_embeddings": 64}
        settings.update(overrides)
        model: torch.nn.Module = transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings))
    elif style == "gpt2":
        settings = {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64, "bos_token_id": 0,
                        "eos_token_id": 0}
        settings.update(overrides)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**settings))
    else:
        raise ValueError(f"unknown style {style!r} (llama or gpt2)")
    return model.eval()
