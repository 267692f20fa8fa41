"""Softmax, normalisation and reduction families.

Conventions, per element of the input x (each basic operation is one FLOP):

* softmax: 5 (max, subtract, exp, sum, divide).
* layer_norm, instance_norm: 5 (mean: add; centre: subtract; variance: square, add; scale by the
  reciprocal standard deviation: multiply) + 1 with gamma + 1 with beta. The per-group
  reciprocal square root is not counted.
* batch_norm (inference): 2: a multiply and an add, with mean, variance, gamma and beta folded
  into one scale and one shift per channel.
* l2_norm: 3 (square, add, multiply by the reciprocal norm).
* local_response_norm: size + 5 (square; a window of `size` adds; scale, add k, power, divide).
* reduce_*: 1 per input element (sum, max, min, prod, argmax...), 2 for reduce_sum_square,
  reduce_l1_norm and reduce_l2_norm (square or abs, add), 3 for reduce_log_sum_exp (max, exp,
  add); + 1 per output element where a final step follows (reduce_mean's divide, a log or a
  square root).
* cumsum: 1 per element.
"""

from __future__ import annotations

from mlbench.backends.apple.cost.base import OpCost, OpDescription, register, times, with_flops

SOFTMAX_FLOPS = 5
_REDUCE_PER_INPUT = {"reduce_sum_square": 2, "reduce_l1_norm": 2, "reduce_l2_norm": 2, "reduce_log_sum_exp": 3}
_REDUCE_FINAL = frozenset({"reduce_mean", "reduce_l2_norm", "reduce_log_sum", "reduce_log_sum_exp"})
_REDUCTIONS = (
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_argmax", "reduce_argmin",
    "reduce_sum_square", "reduce_l1_norm", "reduce_l2_norm", "reduce_log_sum", "reduce_log_sum_exp",
)


def _x_numel(desc: OpDescription) -> int | None:
    x = desc.input("x")
    return None if x is None else x.numel


@register("softmax")
def softmax(desc: OpDescription) -> OpCost:
    """5 per element."""
    return with_flops(desc, times(_x_numel(desc), SOFTMAX_FLOPS))


@register("layer_norm", "instance_norm")
def layer_norm(desc: OpDescription) -> OpCost:
    """5 per element, + 1 with gamma, + 1 with beta."""
    per = 5 + (desc.input("gamma") is not None) + (desc.input("beta") is not None)
    return with_flops(desc, times(_x_numel(desc), per))


@register("batch_norm")
def batch_norm(desc: OpDescription) -> OpCost:
    """2 per element (folded scale and shift)."""
    return with_flops(desc, times(_x_numel(desc), 2))


@register("l2_norm")
def l2_norm(desc: OpDescription) -> OpCost:
    """3 per element."""
    return with_flops(desc, times(_x_numel(desc), 3))


@register("local_response_norm")
def local_response_norm(desc: OpDescription) -> OpCost:
    """size + 5 per element."""
    size = desc.attr("size")
    if isinstance(size, list):
        size = size[0] if size else None
    return with_flops(desc, None if not isinstance(size, int) else times(_x_numel(desc), size + 5))


@register(*_REDUCTIONS)
def reduction(desc: OpDescription) -> OpCost:
    """1 (2, 3) per input element, + 1 per output element for a final step."""
    n_in = _x_numel(desc)
    flops = times(n_in, _REDUCE_PER_INPUT.get(desc.op_type, 1))
    if flops is not None and desc.op_type in _REDUCE_FINAL:
        n_out = desc.out_numel
        flops = None if n_out is None else flops + n_out
    return with_flops(desc, flops)


@register("cumsum")
def cumsum(desc: OpDescription) -> OpCost:
    """1 per element."""
    return with_flops(desc, _x_numel(desc))
