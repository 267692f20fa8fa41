"""One calling convention for every exporter: forward(*tensors) -> tuple of tensors.

Hugging Face models take their inputs by name (`input_ids`, `attention_mask`, `position_ids`,
`token_type_ids` may come in any order and most are optional) and return ModelOutput objects
(ordered dicts, with None entries left out), which `torch.jit.trace` refuses. `BoundModule` passes
the pipeline's inputs by name when the model binds them so, and flattens any nested output into a
tuple, keeping each tensor's name (`output.last_hidden_state`) for the reports.
"""

from __future__ import annotations

from typing import Any

import torch

from mlbench.sources.errors import ModelLoadError


def flatten_outputs(output: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    """Named tensors from a tensor, tuple, list, dict or namedtuple, in a stable order (None left out)."""
    if isinstance(output, torch.Tensor):
        return [(prefix, output)]
    if isinstance(output, dict):
        return [item for key in output if output[key] is not None
                for item in flatten_outputs(output[key], f"{prefix}.{key}")]
    if isinstance(output, (list, tuple)):
        return [item for i, value in enumerate(output) if value is not None
                for item in flatten_outputs(value, f"{prefix}.{i}")]
    raise ModelLoadError(f"model output of type {type(output).__name__} is not a tensor, tuple, list or dict"
                         + ("; for a decoder, set use_cache: false in its config" if "Cache" in type(output).__name__
                            else ""))


def needs_binding(output: Any, keyword: bool) -> bool:
    """True unless the model already takes its inputs in order and returns a tensor or flat tuple of tensors."""
    if keyword:
        return True
    if isinstance(output, torch.Tensor):
        return False
    return not (type(output) in (tuple, list) and all(isinstance(t, torch.Tensor) for t in output))


class BoundModule(torch.nn.Module):
    """`module` called with the inputs by name (keyword) or in order, its outputs as a flat tuple."""

    def __init__(self, module: torch.nn.Module, input_names: list[str] | None,
                 options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.module = module
        self.input_names = input_names  # None: positional
        self.options = dict(options or {})  # constant keyword arguments (a generative model's use_cache=False)
        self.output_names: list[str] = []

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.input_names is None:
            output = self.module(*inputs, **self.options)
        else:
            output = self.module(**dict(zip(self.input_names, inputs)), **self.options)
        named = flatten_outputs(output)
        self.output_names = [name for name, _ in named]
        return tuple(tensor for _, tensor in named)
