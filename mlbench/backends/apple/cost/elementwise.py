"""Elementwise families: unary and binary ops, comparisons, logical ops and activations.

Convention: 1 FLOP per output element (exp, log, sqrt, pow, comparisons included), except the
activations in ``ACTIVATION_FLOPS``, which count the basic operations of their usual formula,
each as one FLOP (a convention, not a measurement of any hardware).
"""

from __future__ import annotations

from mlbench.backends.apple.cost.base import OpCost, OpDescription, register, times, with_flops

#: FLOPs per output element of the activations that are more than one basic operation.
ACTIVATION_FLOPS: dict[str, int] = {
    "sigmoid": 4,  # 1 / (1 + exp(-x)): neg, exp, add, div
    "tanh": 5,  # (exp(2x) - 1) / (exp(2x) + 1): mul, exp, sub, add, div
    "silu": 5,  # x * sigmoid(x)
    "gelu": 8,  # every mode: between the erf form (~5) and the tanh approximation (~13)
    "softplus": 3,  # log(1 + exp(x))
    "softplus_parametric": 5,  # alpha * log(1 + exp(beta * x))
    "elu": 3,  # alpha * (exp(x) - 1) where x < 0
    "scaled_tanh": 7,  # alpha * tanh(beta * x)
    "sigmoid_hard": 3,  # clip(alpha * x + beta, 0, 1)
    "softsign": 3,  # x / (1 + |x|)
    "linear_activation": 2,  # alpha * x + beta
}
#: Activations named by the recurrent ops' string parameters (lower case).
RECURRENT_ACTIVATION_FLOPS: dict[str, int] = {
    "sigmoid": 4, "tanh": 5, "relu": 1, "linear": 0, "scaled_tanh": 7, "sigmoid_hard": 3,
}

UNARY = (
    "abs", "acos", "asin", "atan", "atanh", "ceil", "clip", "cos", "cosh", "erf", "exp", "exp2", "floor",
    "inverse", "log", "logical_not", "round", "rsqrt", "sign", "sin", "sinh", "sqrt", "square", "tan",
    "threshold", "relu", "relu6", "leaky_relu", "prelu", "clamped_relu", "thresholded_relu",
)
BINARY = (
    "add", "sub", "mul", "real_div", "floor_div", "mod", "pow", "maximum", "minimum",
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    "logical_and", "logical_or", "logical_xor",
)


@register(*UNARY, *BINARY)
def elementwise(desc: OpDescription) -> OpCost:
    """1 per output element."""
    return with_flops(desc, desc.out_numel)


@register(*ACTIVATION_FLOPS)
def activation(desc: OpDescription) -> OpCost:
    """ACTIVATION_FLOPS[op] per output element."""
    return with_flops(desc, times(desc.out_numel, ACTIVATION_FLOPS[desc.op_type]))


@register("quantize", "dequantize")
def requantize(desc: OpDescription) -> OpCost:
    """2 per output element: (x / scale + zero point), or (x - zero point) * scale."""
    return with_flops(desc, times(desc.out_numel, 2))
