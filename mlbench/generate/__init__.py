"""Generative models: prefill over a prompt, then decode one token at a time against a key/value cache.

Backend-neutral pieces every backend uses the same way:

- the `generate:` block of a model entry (`GenerateSpec`), the `prompt` measurement axis (`p<length>`) and
  the checks that need no torch are config (`mlbench.config.generate`), re-exported here.
- `metrics`: `generative_metrics` (prefill, decode per token, tokens/s, KV cache bytes, token agreement,
  logits error; each with its source) and `verify_generation` (a backend's greedy steps against eager's).
- `reference`: eager float32's greedy generation for a prompt (`GreedyTrace`), the one every backend is
  verified against, and the seeded prompt tokens.

How a backend knows a variant is generative: `model.spec.generate` is set (`is_generative(model.spec)`), and
`variant.prompt` is the prompt length it measures. A backend whose class leaves `generative = False` never
sees such a variant: the runner skips it with one line (`mlbench.backends.base.generation_unsupported`).

Nothing here imports torch at import time.
"""

from mlbench.config.generate import PROMPT_AXIS, GenerateSpec, is_generative, prompt_label, prompt_length

__all__ = ["PROMPT_AXIS", "GenerateSpec", "is_generative", "prompt_label", "prompt_length"]
