"""A generative model's ONNX export: one decoder graph with the key/value cache as inputs and outputs.

`input_ids [1, seq]` and `past.<layer>.key|value [1, heads, past, head_dim]` in; `logits [1, vocab]` (the last
position's) and `present.<layer>.key|value [1, heads, past + seq, head_dim]` out. Both lengths are dynamic
axes, so the one file serves prefill (an empty past, the whole prompt) and every decode step (one token, the
previous step's presents as its past), at every prompt length up to the context. Positions follow from the
past's length inside the graph.

The graph comes from the TorchScript exporter (`torch.onnx.export(dynamo=False)`): torch.export cannot
follow transformers' cache (its data-dependent length checks); the trace records the lengths as shape
operations. Tests pin that decoding with the cache gives the logits of a full forward pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mlbench.backends.capture import captured, distinct_lines
from mlbench.backends.onnxruntime.export import (
    EXPORT_PATH_TORCHSCRIPT,
    FLOAT16_CONVERSION,
    MODEL_NAME,
    _check_outputs,
    _first_line,
    graph_opset,
)

DECODER_FORMAT = "decoder with past key/values as inputs and outputs, v1"
"""Part of the artifact key: what the graph's inputs and outputs are (a change of them makes a new key)."""
LOGITS = "logits"


def past_names(layers: int) -> list[str]:
    return [f"past.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def present_names(layers: int) -> list[str]:
    return [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


class PastKeyValuesDecoder(torch.nn.Module):
    """`lm` called with its cache given as tensors, returning the last position's logits and the cache after."""

    def __init__(self, lm: Any, layers: int) -> None:
        from mlbench.generate.eager import cache_argument

        super().__init__()
        self.lm, self.layers, self.keyword = lm, layers, cache_argument(lm)

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.lm.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        positions = torch.arange(input_ids.shape[1]) + past[0].shape[2]
        out = self.lm(input_ids=input_ids, use_cache=True, cache_position=positions, position_ids=positions[None],
                      **{self.keyword: cache})
        layers: list[Any] = list(cache.layers)
        presents = [t for layer in layers for t in (layer.keys, layer.values)]
        return (out.logits[:, -1], *presents)


def cache_shapes(lm: Any) -> list[tuple[int, int]]:
    """(heads, head_dim) of each layer's key then value, read from one step of the model with a fresh cache."""
    from transformers.cache_utils import DynamicCache

    from mlbench.generate.eager import cache_argument

    cache = DynamicCache(config=lm.config)
    with torch.inference_mode():
        lm(input_ids=torch.zeros((1, 1), dtype=torch.int64), use_cache=True, **{cache_argument(lm): cache})
    layers: list[Any] = list(cache.layers)
    return [(int(t.shape[1]), int(t.shape[3])) for layer in layers for t in (layer.keys, layer.values)]


@dataclass
class DecoderExport:
    artifact: Path
    export_path: str
    fallback_reason: str | None
    opset: int | None
    seconds: float
    layers: int
    float16_conversion: str | None = None
    warnings: list[str] = field(default_factory=list)


def export_decoder(lm: Any, *, precision: str, opset: int | None, dest: Path) -> DecoderExport:
    """Write `dest/model.onnx`: the decoder graph (module docstring), float32 or converted to float16 with float32
    inputs and outputs as the backend's other exports are."""
    import onnx

    if precision not in ("float32", "float16"):
        raise ValueError(f"unsupported precision {precision!r}")
    shapes = cache_shapes(lm)
    layers = len(shapes) // 2
    wrapper = PastKeyValuesDecoder(lm, layers).eval()
    ids = torch.zeros((1, 3), dtype=torch.int64)
    past = [torch.zeros((1, heads, 2, dim)) for heads, dim in shapes]  # a past of 2: the trace keeps it general
    inputs, outputs = ["input_ids", *past_names(layers)], [LOGITS, *present_names(layers)]
    axes = {"input_ids": {1: "sequence"}, **{n: {2: "past"} for n in inputs[1:]},
            **{n: {2: "total"} for n in outputs[1:]}}
    path = dest / MODEL_NAME
    messages: list[str] = []
    t0 = time.perf_counter()
    try:
        with captured(messages, ["torch.onnx", "torch.export"], stdout=True), torch.no_grad():
            torch.onnx.export(wrapper, (ids, *past), str(path), input_names=inputs, output_names=outputs,
                              dynamic_axes=axes, opset_version=opset or 18, dynamo=False)
            model = _check_outputs(path, len(outputs))
    except Exception as exc:  # the exporter raises many types: each becomes the variant's one line
        path.unlink(missing_ok=True)
        raise RuntimeError(f"the decoder's ONNX export failed: {_first_line(exc)}") from exc
    conversion = None
    if precision == "float16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        with captured(messages, [], stdout=True):
            model = convert_float_to_float16(model, keep_io_types=True)
        onnx.save(model, str(path))
        conversion = FLOAT16_CONVERSION
    return DecoderExport(artifact=path, export_path=EXPORT_PATH_TORCHSCRIPT, fallback_reason=None,
                         opset=graph_opset(model), seconds=time.perf_counter() - t0, layers=layers,
                         float16_conversion=conversion, warnings=distinct_lines(messages, _first_line))
