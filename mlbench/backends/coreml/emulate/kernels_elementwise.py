"""Elementwise kernels: binary arithmetic and comparisons, unary math, activations, cast."""

from __future__ import annotations

import torch

from mlbench.backends.coreml.emulate.registry import KernelError, as_float, as_str, kernel

# ------------------------------------------------------------------ binary (broadcasting)


def _same(x, y):
    """MIL binary ops take operands of one dtype; integer literals may still be int64 here."""
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype != y.dtype:
        dtype = torch.promote_types(x.dtype, y.dtype)
        return x.to(dtype), y.to(dtype)
    return x, y


@kernel("add")
def add(x, y, **_):
    return torch.add(*_same(x, y))


@kernel("sub")
def sub(x, y, **_):
    return torch.sub(*_same(x, y))


@kernel("mul")
def mul(x, y, **_):
    return torch.mul(*_same(x, y))


@kernel("real_div")
def real_div(x, y, **_):
    x, y = _same(x, y)
    if not x.is_floating_point():  # the declared output dtype rounds it back if needed
        return torch.div(x.to(torch.float32), y.to(torch.float32))
    return torch.div(x, y)


@kernel("floor_div")
def floor_div(x, y, **_):
    return torch.div(*_same(x, y), rounding_mode="floor")


@kernel("mod")
def mod(x, y, **_):
    return torch.remainder(*_same(x, y))  # numpy's mod: the sign of the divisor


@kernel("pow")
def pow_(x, y, **_):
    return torch.pow(*_same(x, y))


@kernel("maximum")
def maximum(x, y, **_):
    return torch.maximum(*_same(x, y))


@kernel("minimum")
def minimum(x, y, **_):
    return torch.minimum(*_same(x, y))


for _name, _fn in {
    "equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le,
    "greater": torch.gt, "greater_equal": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
}.items():
    kernel(_name)(lambda x, y, _f=_fn, **_: _f(*_same(x, y)))


# ------------------------------------------------------------------ unary math

_UNARY = {
    "abs": torch.abs, "acos": torch.acos, "asin": torch.asin, "atan": torch.atan, "atanh": torch.atanh,
    "ceil": torch.ceil, "cos": torch.cos, "cosh": torch.cosh, "erf": torch.erf, "exp": torch.exp,
    "exp2": torch.exp2, "floor": torch.floor, "round": torch.round, "sign": torch.sign, "sin": torch.sin,
    "sinh": torch.sinh, "sqrt": torch.sqrt, "square": torch.square, "tan": torch.tan, "tanh": torch.tanh,
    "logical_not": torch.logical_not, "relu": torch.relu, "sigmoid": torch.sigmoid,
    "silu": torch.nn.functional.silu, "softsign": torch.nn.functional.softsign,
}
for _name, _unary in _UNARY.items():
    kernel(_name)(lambda x, _f=_unary, **_: _f(x))


@kernel("clip")
def clip(x, alpha, beta, **_):
    return torch.clamp(x, as_float(alpha), as_float(beta))


@kernel("inverse")
def inverse(x, epsilon=1e-4, **_):
    return torch.reciprocal(x + as_float(epsilon))


@kernel("log")
def log(x, epsilon=1e-45, **_):
    return torch.log(x + as_float(epsilon))


@kernel("rsqrt")
def rsqrt(x, epsilon=1e-12, **_):
    return torch.rsqrt(x + as_float(epsilon))


@kernel("threshold")
def threshold(x, alpha, **_):
    return torch.clamp(x, min=as_float(alpha))


_CAST_DTYPES = {
    "fp32": torch.float32, "fp16": torch.float16, "fp64": torch.float32, "int32": torch.int32,
    "int64": torch.int64, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}


_WIDE_UNSIGNED = {"uint16": (torch.int32, 1 << 16), "uint32": (torch.int64, 1 << 32)}
"""Unsigned types torch lacks kernels for, held in a wider signed type (as precision holds them), wrapped."""


@kernel("cast")
def cast(x, dtype, **_):
    """Floats to ints truncate toward zero (numpy's astype, as coremltools' own value_inference)."""
    name = as_str(dtype)
    if name in _WIDE_UNSIGNED:
        held, modulus = _WIDE_UNSIGNED[name]
        return torch.remainder(x.to(torch.int64), modulus).to(held)
    target = _CAST_DTYPES.get(name)
    if target is None:
        raise KernelError(f"cast to {as_str(dtype)!r} is not implemented")
    return x.to(target)  # float16 is re-widened by the executor; the rounding stays


# ------------------------------------------------------------------ activations


@kernel("relu6")
def relu6(x, **_):
    return torch.clamp(x, 0.0, 6.0)


@kernel("leaky_relu")
def leaky_relu(x, alpha=0.01, **_):
    return torch.nn.functional.leaky_relu(x, as_float(alpha))


@kernel("elu")
def elu(x, alpha=1.0, **_):
    return torch.nn.functional.elu(x, as_float(alpha))


@kernel("gelu")
def gelu(x, mode="EXACT", **_):
    mode = as_str(mode)
    if mode == "EXACT":
        return torch.nn.functional.gelu(x)
    if mode == "TANH_APPROXIMATION":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if mode == "SIGMOID_APPROXIMATION":
        return x * torch.sigmoid(1.702 * x)
    raise KernelError(f"gelu mode {mode!r} is not implemented")


def _channel(param, x):
    """A per-channel parameter (axis 1) shaped to broadcast against ``x``."""
    return param.reshape([1, -1] + [1] * (x.dim() - 2))


@kernel("prelu")
def prelu(x, alpha, **_):
    return torch.where(x > 0, x, x * _channel(alpha, x))


@kernel("sigmoid_hard")
def sigmoid_hard(x, alpha=0.2, beta=0.5, **_):
    return torch.clamp(as_float(alpha) * x + as_float(beta), 0.0, 1.0)


@kernel("softplus")
def softplus(x, **_):
    return torch.nn.functional.softplus(x)


@kernel("softplus_parametric")
def softplus_parametric(x, alpha, beta, **_):
    return _channel(alpha, x) * torch.log1p(torch.exp(x * _channel(beta, x)))


@kernel("scaled_tanh")
def scaled_tanh(x, alpha=1.0, beta=1.0, **_):
    return as_float(alpha) * torch.tanh(x * as_float(beta))


@kernel("linear_activation")
def linear_activation(x, alpha=1.0, beta=0.0, **_):
    return as_float(alpha) * x + as_float(beta)


@kernel("thresholded_relu")
def thresholded_relu(x, alpha=1.0, **_):
    return torch.where(x >= as_float(alpha), x, torch.zeros_like(x))


@kernel("clamped_relu")
def clamped_relu(x, alpha=0.0, beta=6.0, **_):
    return torch.clamp(torch.where(x >= 0, x, as_float(alpha) * x), max=as_float(beta))


@kernel("softmax")
def softmax(x, axis=-1, **_):
    return torch.softmax(x, dim=int(as_float(axis)))


