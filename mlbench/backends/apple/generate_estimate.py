"""Estimated prefill and decode latency of a stateful Core ML generation, per chip, with the estimator's own
terms (`latency.estimate_latency`: a roofline per op on its placed device, dispatch, switches, fixed cost).

A generative function's shapes are flexible (n query tokens against `end` cached positions), so its analysis
leaves the FLOPs and bytes of the shape-dependent ops unknown. `pin_shapes` fills them in for one call, every
unknown dimension taken as `end` (decode's query length is fixed at 1; prefill from an empty cache has
n = end = the prompt):

- ``linear``: 2 × weight elements × n FLOPs; bytes: the weights as stored (int4 blocks read at their size)
  plus the activations in and out;
- ``matmul`` (attention): 2 × output elements × the reduction length (the head size for Q·Kᵀ, whose last
  dimension is the unknown one, `end` for the weights·V); bytes: both operands and the output, so the cache
  read grows with the position;
- ``scaled_dot_product_attention`` (the fused op, iOS18): per head 2·n·end·E for Q·Kᵀ and as much for the
  weights·V, plus the scale, mask and softmax (7·n·end, as the cost model counts them); bytes: query and output
  (n × E per head), key and value (`end` × E per head, the cache read) and the mask (n × end) — the scores stay on
  chip, which is what fusing saves against the matmul, softmax, matmul chain;
- any other op with unknown dimensions: one FLOP per output element, its output read and written once; an
  op with no dimension known at all is taken as large as its largest input.

Prefill (n = prompt, end = prompt) is then mostly compute; a decode step (n = 1, end = position) is mostly
the weights and the cache read once per token over the chip's bandwidth — the roofline's two terms, with the
chip profile's peaks and bandwidth and the calibration's efficiency and bandwidth factors; no new constants.
`latency.estimated.decode.<chip>` is the mean over the `new_tokens` steps after the prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.chips import builtin_chips, calibration
from mlbench.backends.apple.cost.base import DTYPE_BITS
from mlbench.backends.apple.latency import NOT_CALIBRATED, estimate_latency, latency_band
from mlbench.records import Metric

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis
    from mlbench.backends.apple.chips import ChipProfile
    from mlbench.records import Placement

__all__ = ["generation_estimates", "pin_shapes"]

PREFILL_PREFIX = "latency.estimated.prefill."
DECODE_PREFIX = "latency.estimated.decode."
ATTENTION_POINTWISE_FLOPS = 7  # per score: scale 1, mask 1, softmax 5 (cost/linalg.py's attention)


def _filled(shape: list[int | None] | None, end: int) -> list[int] | None:
    """Every unknown dimension is `end`: in decode the query length is fixed (1) and only the cached length
    varies; in prefill from an empty cache both are the prompt's length."""
    return None if shape is None else [d if d is not None else end for d in shape]


def _count(shape: list[int]) -> int:
    total = 1
    for d in shape:
        total *= d
    return total


def _pinned(layer: LayerInfo, n: int, end: int, head_dim: int, inputs_elements: int) -> LayerInfo:
    bytes_per = DTYPE_BITS.get(layer.output_dtype or "fp16", 16) // 8
    shape = _filled(layer.output_shape, end)
    if shape is None:
        return layer
    if layer.output_shape and len(layer.output_shape) > 1 and all(d is None for d in layer.output_shape):
        # no dimension known (e.g. the tile repeating grouped key/value heads): as large as its largest input
        shape = [max(inputs_elements, 1)]
    out = _count(shape)
    if layer.op_type == "linear" and layer.params:
        flops = 2 * layer.params * n
        data = (layer.weight_bytes or 0) + bytes_per * (out + n * (layer.params // max(shape[-1], 1)))
        return layer.model_copy(update={"flops": flops, "bytes": data, "output_shape": shape})
    if layer.op_type == "matmul":
        reduction = head_dim if (layer.output_shape or [None])[-1] is None else end
        rows, cols = shape[-2], shape[-1]
        batch = out // max(rows * cols, 1)
        data = bytes_per * (out + batch * (rows * reduction + reduction * cols))
        return layer.model_copy(update={"flops": 2 * out * reduction, "bytes": data, "output_shape": shape})
    if layer.op_type == "scaled_dot_product_attention":
        heads = _count(shape[:-2])
        query, scores = heads * n * head_dim, n * end
        flops = heads * scores * (4 * head_dim + ATTENTION_POINTWISE_FLOPS)
        data = bytes_per * (2 * query + 2 * heads * end * head_dim + scores)
        return layer.model_copy(update={"flops": flops, "bytes": data, "output_shape": shape})
    if layer.flops is None or layer.bytes is None or any(d is None for d in layer.output_shape or []):
        return layer.model_copy(update={"flops": out, "bytes": 2 * out * bytes_per, "output_shape": shape})
    return layer


def pin_shapes(analysis: ProgramAnalysis, n: int, end: int, head_dim: int) -> ProgramAnalysis:
    """The analysis of one call with `n` query tokens against `end` cache positions (module docstring)."""
    layers: list[LayerInfo] = []
    for layer in analysis.layers:
        elements = max((_count(_filled(layers[i].output_shape, end) or [0]) for i in layer.inputs
                        if 0 <= i < len(layers)), default=0)
        layers.append(_pinned(layer, n, end, head_dim, elements))
    return analysis.model_copy(update={"layers": layers})


def generation_estimates(functions: dict[str, tuple[ProgramAnalysis, Placement]], chip_ids: list[str], *,
                         prompt: int, new_tokens: int, head_dim: int,
                         own_profiles: dict[str, ChipProfile] | None = None) -> tuple[dict[str, Metric], dict[str, Any]]:
    """`latency.estimated.prefill.<chip>` and `latency.estimated.decode.<chip>` (ms per token) per chip, and
    their parts. `functions` holds the prefill and decode functions' analyses and placements."""
    profiles = {**builtin_chips(), **(own_profiles or {})}
    fit = calibration()
    metrics: dict[str, Metric] = {}
    parts: dict[str, Any] = {}
    prefill_analysis, prefill_placement = functions["prefill"]
    decode_analysis, decode_placement = functions["decode"]
    prefill_pinned = pin_shapes(prefill_analysis, prompt, prompt, head_dim)
    positions = [prompt + k for k in range(1, new_tokens + 1)]
    decode_pinned = [pin_shapes(decode_analysis, 1, end, head_dim) for end in positions]
    for chip_id in chip_ids:
        if fit is None:
            metrics[PREFILL_PREFIX + chip_id] = Metric.absent("ms", NOT_CALIBRATED)
            metrics[DECODE_PREFIX + chip_id] = Metric.absent("ms", NOT_CALIBRATED)
            continue
        chip = profiles[chip_id]
        prefill = estimate_latency(prefill_pinned, prefill_placement, chip, fit.parameters)
        steps = [estimate_latency(a, decode_placement, chip, fit.parameters) for a in decode_pinned]
        decode_ms = sum(s.total_ms for s in steps) / len(steps)
        band = latency_band(fit)
        metrics[PREFILL_PREFIX + chip_id] = Metric(value=round(prefill.total_ms, 4), unit="ms", source="estimated",
                                                   band=band)
        metrics[DECODE_PREFIX + chip_id] = Metric(value=round(decode_ms, 4), unit="ms", source="estimated", band=band)
        parts[chip_id] = {
            "chip": chip.name,
            "prefill": {"compute_ms": {d: round(v, 4) for d, v in prefill.compute_ms.items() if v},
                        "dispatch_ms": round(prefill.dispatch_ms, 4), "switch_ms": round(prefill.switch_ms, 4),
                        "fixed_ms": prefill.fixed_ms, "tokens": prompt},
            "decode": {"first_step_ms": round(steps[0].total_ms, 4), "last_step_ms": round(steps[-1].total_ms, 4),
                       "positions": [positions[0], positions[-1]],
                       "compute_ms_first_step": {d: round(v, 4) for d, v in steps[0].compute_ms.items() if v}},
        }
    return metrics, parts
