"""Matrix families: conv, conv_transpose, linear, matmul, einsum, scaled_dot_product_attention.

FLOPs = 2 x MACs (a multiply and an add per MAC), with the MACs counted exactly as the analysis'
``macs`` field counts them; bias adds are not counted (they are negligible next to the MACs).
"""

from __future__ import annotations

import math

from mlbench.backends.apple.cost.base import OpCost, OpDescription, register, times, with_flops
from mlbench.backends.apple.cost.normalization import SOFTMAX_FLOPS


def _numel(dims) -> int | None:
    if dims is None or any(d is None for d in dims):
        return None
    return math.prod(dims)


def macs(desc: OpDescription) -> int | None:
    """MACs of conv/conv_transpose/linear/matmul/einsum, None when a needed shape is unknown."""
    t = desc.op_type
    out_n = desc.out_numel
    if t in ("conv", "conv_quantized"):
        w = desc.shape("weight")  # [C_out, C_in / groups, *kernel]
        if out_n is None or w is None or len(w) < 2 or _numel(w[1:]) is None:
            return None
        return out_n * _numel(w[1:])  # type: ignore[operator]
    if t == "conv_transpose":
        x, w = desc.shape("x"), desc.shape("weight")  # w: [C_in, C_out / groups, *kernel]
        if w is None or len(w) < 2 or _numel(x) is None or _numel(w[1:]) is None:
            return None
        return _numel(x) * _numel(w[1:])  # type: ignore[operator]
    if t == "linear":
        w = desc.shape("weight")  # [D_out, D_in]
        if out_n is None or not w or w[-1] is None:
            return None
        return out_n * w[-1]
    if t == "matmul":
        x = desc.shape("x")
        if out_n is None or not x:
            return None
        k = x[-2] if (desc.attr("transpose_x", False) and len(x) >= 2) else x[-1]
        return None if k is None else out_n * k
    if t == "einsum":
        equation = desc.attr("equation")
        if isinstance(equation, list):
            equation = equation[0] if equation else None
        if not equation:
            return None
        equation = str(equation).replace(" ", "")
        if "..." in equation or "->" not in equation:
            return None
        terms = equation.split("->")[0].split(",")
        values = desc.inputs.get("values") or ()
        if len(terms) != len(values):
            return None
        sizes: dict[str, int] = {}
        for letters, tensor in zip(terms, values):
            if tensor.shape is None or len(tensor.shape) != len(letters):
                return None
            for letter, dim in zip(letters, tensor.shape):
                if dim is None:
                    return None
                sizes[letter] = max(sizes.get(letter, 1), dim)
        return math.prod(sizes.values())
    return None


@register("conv", "conv_quantized", "conv_transpose", "linear", "matmul", "einsum")
def matrix(desc: OpDescription) -> OpCost:
    """2 x MACs."""
    return with_flops(desc, times(macs(desc), 2))


@register("scaled_dot_product_attention")
def attention(desc: OpDescription) -> OpCost:
    """softmax(Q K^T / sqrt(E) + mask) V, per batch (the leading dims of the output):

    QK^T 2·L·S·E + scale L·S + mask add L·S (when a mask is given) + softmax 5·L·S + AV 2·L·S·Ev,
    for query [..., L, E], key [..., S, E], value [..., S, Ev]. The L x S scores stay on chip.
    """
    q, k, v, out = desc.shape("query"), desc.shape("key"), desc.shape("value"), desc.out
    flops = None
    if q and k and v and out is not None and out.shape and len(q) >= 2 and len(k) >= 2 and len(v) >= 2:
        batch = _numel(out.shape[:-2])
        L, E, S, Ev = q[-2], q[-1], k[-2], v[-1]
        if batch is not None and None not in (L, E, S, Ev):
            scores = L * S  # type: ignore[operator]
            mask = scores if desc.input("attn_mask") is not None else 0
            flops = batch * (2 * scores * E + scores + mask + SOFTMAX_FLOPS * scores + 2 * scores * Ev)  # type: ignore[operator]
    return with_flops(desc, flops)
