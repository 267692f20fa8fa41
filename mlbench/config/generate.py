"""The `generate:` block of a model entry: its presence makes the model generative (pydantic only, no torch).

```yaml
models:
  - name: tiny-llama
    source: transformers:LlamaForCausalLM
    kwargs: {config: {hidden_size: 64, num_hidden_layers: 2, vocab_size: 100, ...}}
    generate: {prompt: [32, 128], new_tokens: 32, context: 256}
    inputs:
      - {name: input_ids, shape: [1, 32], dtype: int64, range: [0, 100]}
```

`prompt` is a measurement axis: one export (built for `context` cache positions) serves every prompt
length, and each variant of the model measures one (`.../p32`). `new_tokens` is how many decode steps
are timed and verified; `context` the key/value cache length the export is built for.

The checks that need more than this block (the source is a causal language model, the config keeps its
cache, the prompt comes in as `input_ids`) are `generate_problems`, called with the model checks.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from mlbench.config.base import StrictModel, first_repeat

PROMPT_AXIS = "prompt"
"""The measurement axis a generative model adds to each of its variants: one value per prompt length,
written `p<length>` (`p32`), so the variant id says it (`tiny-llama/torch/cpu/float32/p32`)."""

PROMPT_INPUT = "input_ids"
"""The input a generative model's prompt comes in as (token ids, drawn from the input's range)."""

CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
"""transformers classes named so are decoder-only language models with a key/value cache."""

CONTEXT_KEYS = ("max_position_embeddings", "n_positions")
"""Config keys that bound the positions a transformers model knows (Llama-style, GPT-2-style)."""


class GenerateSpec(StrictModel):
    """Greedy generation measured as prefill over a prompt, then one decode step per new token."""

    prompt: list[Annotated[int, Field(ge=1)]] = Field(
        min_length=1,
        description="Prompt lengths in tokens, each measured by its own variant (`p<length>`); one export "
        "serves them all.")
    new_tokens: int = Field(ge=1, description="Decode steps timed and verified after the prompt.")
    context: int = Field(ge=1, description="Key/value cache length the export is built for: the longest "
                         "prompt plus new_tokens must fit in it.")

    @field_validator("prompt")
    @classmethod
    def _distinct(cls, prompt: list[int]) -> list[int]:
        if (length := first_repeat([str(n) for n in prompt])) is not None:
            raise ValueError(f"prompt length {length} is listed twice; each length is measured once")
        return prompt

    @model_validator(mode="after")
    def _fits_context(self) -> GenerateSpec:
        longest = max(self.prompt)
        if longest + self.new_tokens > self.context:
            raise ValueError(f"prompt {longest} + new_tokens {self.new_tokens} = {longest + self.new_tokens} "
                             f"exceeds context {self.context}: raise context or shorten the prompt or new_tokens")
        return self

    def labels(self) -> list[str]:
        """The prompt axis's values, in the order written: `p32`, `p128`."""
        return [prompt_label(length) for length in self.prompt]


def prompt_label(length: int) -> str:
    return f"p{length}"


def prompt_length(label: str) -> int:
    """The prompt length a `p<length>` axis value names."""
    if not (label.startswith("p") and label[1:].isdigit()):
        raise ValueError(f"{label!r} is not a prompt axis value (p<length>)")
    return int(label[1:])


def is_generative(spec: Any) -> bool:
    """Whether a model entry (a ModelSpec, or a LoadedModel's spec) has a `generate:` block."""
    return getattr(spec, "generate", None) is not None


Problem = tuple[tuple[str | int, ...], str]


def generate_problems(m: int, spec: Any) -> list[Problem]:
    """What can be told of a generative model without importing torch, as (place, one line) pairs:
    a transformers source that is no causal language model, a config without its cache, a context past the
    positions the config knows, a prompt that does not come in as `input_ids`. A module or file source is
    checked when it is built (`mlbench.generate.reference`). `spec` is a ModelSpec (which imports this module)."""
    generate = spec.generate
    if generate is None:
        return []
    where: tuple[str | int, ...] = ("models", m)
    problems: list[Problem] = []
    if spec.source_kind == "transformers":
        name = str(spec.source).partition(":")[2].rpartition(".")[2]
        if not name.endswith(CAUSAL_LM_SUFFIXES):
            problems.append(((*where, "source"), f"{spec.source} is not a causal language model: generate needs a "
                             f"decoder with a key/value cache (a ...{' or ...'.join(CAUSAL_LM_SUFFIXES)} class)"))
    config = spec.kwargs.get("config")
    if isinstance(config, dict):
        if config.get("use_cache") is False:
            problems.append(((*where, "kwargs"), "the config sets use_cache: false, so the model keeps no "
                             "key/value cache: generate needs one (drop use_cache or the generate block)"))
        for key in CONTEXT_KEYS:
            known = config.get(key)
            if isinstance(known, int) and generate.context > known:
                problems.append(((*where, "generate", "context"), f"context {generate.context} exceeds the config's "
                                 f"{key} {known}: the model knows no positions past it"))
    names = [item.name for item in spec.inputs]
    if names != [PROMPT_INPUT]:
        problems.append(((*where, "inputs"), f"a generative model takes its prompt as one input, {PROMPT_INPUT} "
                         f"(token ids), not {', '.join(names)}"))
    elif spec.inputs[0].dtype not in ("int64", "int32") or spec.inputs[0].is_flexible:
        problems.append(((*where, "inputs", 0), f"{PROMPT_INPUT} of a generative model is integer token ids of one "
                         "shape; the prompt lengths come from generate.prompt"))
    return problems
