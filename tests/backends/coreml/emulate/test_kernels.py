"""One check per op kernel, against numpy formulas (from the MIL op definitions) or hand-computed values.

Kernels are called directly with the keyword arguments a program would give them. The last test
asserts that every registered kernel is checked here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlbench.backends.coreml.emulate.kernels import supported_op_types
from mlbench.backends.coreml.emulate.registry import KERNELS

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
Y = RNG.standard_normal((1, 3, 1, 5)).astype(np.float32)
POS = np.abs(X) + 0.1
UNIT = np.tanh(X) * 0.9
CHECKED: set[str] = {"const", "cond", "while_loop"}  # const, control flow: test_emulate_program


def T(a):
    return torch.from_numpy(np.asarray(a))


def run(op, **kwargs):
    CHECKED.add(op)
    kwargs = {k: T(v) if isinstance(v, np.ndarray)
              else [T(e) if isinstance(e, np.ndarray) else e for e in v] if isinstance(v, list) else v
              for k, v in kwargs.items()}
    out = KERNELS[op].fn(**kwargs)
    if isinstance(out, tuple):
        return tuple(o.numpy() if isinstance(o, torch.Tensor) else o for o in out)
    return out.numpy() if isinstance(out, torch.Tensor) else out


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=tol, atol=tol)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


UNARY = {
    "abs": (X, np.abs), "acos": (UNIT, np.arccos), "asin": (UNIT, np.arcsin), "atan": (X, np.arctan),
    "atanh": (UNIT, np.arctanh), "ceil": (X * 3, np.ceil), "cos": (X, np.cos), "cosh": (X, np.cosh),
    "erf": (X, np.vectorize(math.erf)), "exp": (X, np.exp), "exp2": (X, np.exp2), "floor": (X * 3, np.floor),
    "round": (np.array([0.5, 1.5, -2.5, 2.4], np.float32), lambda v: np.array([0.0, 2.0, -2.0, 2.0])),
    "sign": (X, np.sign), "sin": (X, np.sin), "sinh": (X, np.sinh), "sqrt": (POS, np.sqrt),
    "square": (X, np.square), "tan": (UNIT, np.tan), "tanh": (X, np.tanh), "relu": (X, lambda v: np.maximum(v, 0)),
    "sigmoid": (X, sigmoid), "silu": (X, lambda v: v * sigmoid(v)), "softsign": (X, lambda v: v / (1 + np.abs(v))),
    "relu6": (X * 5, lambda v: np.clip(v, 0, 6)), "softplus": (X, lambda v: np.log1p(np.exp(v))),
    "logical_not": (X > 0, np.logical_not), "identity": (X, lambda v: v),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    x, ref = UNARY[op]
    close(run(op, x=x), ref(x))


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "floor_div": np.floor_divide, "mod": np.mod,
    "pow": lambda a, b: np.power(np.abs(a), b), "equal": np.equal, "not_equal": np.not_equal,
    "less": np.less, "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcasts(op):
    x = np.abs(X) if op == "pow" else X
    y = Y + (2.0 if op in ("floor_div", "mod", "real_div") else 0.0)
    close(run(op, x=x, y=y), BINARY[op](x, y))


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(op):
    a, b = X > 0, Y > 0
    close(run(op, x=a, y=b), getattr(np, op)(a, b))


def test_integer_division_and_mod_follow_numpy():
    a, b = np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)
    close(run("floor_div", x=a, y=b), np.floor_divide(a, b))
    close(run("mod", x=a, y=b), np.mod(a, b))
    close(run("real_div", x=a, y=b), a / b)


def test_parametrised_unary_and_activations():
    close(run("clip", x=X, alpha=np.float32(-0.5), beta=np.float32(0.5)), np.clip(X, -0.5, 0.5))
    close(run("inverse", x=POS, epsilon=np.float32(1e-4)), 1 / (POS + 1e-4))
    close(run("log", x=POS, epsilon=np.float32(1e-3)), np.log(POS + 1e-3))
    close(run("rsqrt", x=POS, epsilon=np.float32(1e-3)), 1 / np.sqrt(POS + 1e-3))
    close(run("threshold", x=X, alpha=np.float32(0.2)), np.maximum(X, 0.2))
    close(run("leaky_relu", x=X, alpha=np.float32(0.1)), np.where(X > 0, X, 0.1 * X))
    close(run("elu", x=X, alpha=np.float32(0.7)), np.where(X > 0, X, 0.7 * (np.exp(X) - 1)))
    alpha = np.array([0.1, 0.2, 0.3], np.float32)
    close(run("prelu", x=X, alpha=alpha), np.where(X > 0, X, X * alpha.reshape(1, 3, 1, 1)))
    close(run("sigmoid_hard", x=X, alpha=np.float32(0.2), beta=np.float32(0.5)), np.clip(0.2 * X + 0.5, 0, 1))
    beta = np.array([1.0, 2.0, 0.5], np.float32)
    close(run("softplus_parametric", x=X, alpha=alpha, beta=beta),
          alpha.reshape(1, 3, 1, 1) * np.log1p(np.exp(X * beta.reshape(1, 3, 1, 1))))
    close(run("scaled_tanh", x=X, alpha=np.float32(2.0), beta=np.float32(0.5)), 2 * np.tanh(0.5 * X))
    close(run("linear_activation", x=X, alpha=np.float32(2.0), beta=np.float32(-1.0)), 2 * X - 1)
    close(run("thresholded_relu", x=X, alpha=np.float32(0.3)), np.where(X >= 0.3, X, 0))
    close(run("clamped_relu", x=X * 5, alpha=np.float32(0.1), beta=np.float32(6.0)),
          np.minimum(np.where(X * 5 >= 0, X * 5, 0.5 * X), 6))
    e = np.exp(X - X.max(axis=1, keepdims=True))
    close(run("softmax", x=X, axis=np.int32(1)), e / e.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("mode,ref", [
    ("EXACT", lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))),
    ("TANH_APPROXIMATION", lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))),
    ("SIGMOID_APPROXIMATION", lambda v: v * sigmoid(1.702 * v)),
])
def test_gelu(mode, ref):
    close(run("gelu", x=X, mode=mode), ref(X))


def test_cast():
    v = np.array([1.7, -1.7, 0.0, 70000.0], np.float32)
    assert run("cast", x=v, dtype="int32").tolist() == [1, -1, 0, 70000]  # truncation toward zero
    assert run("cast", x=v, dtype="bool").tolist() == [True, True, False, True]
    assert run("cast", x=v, dtype="fp16").tolist()[-1] == 70000.0 or np.isinf(run("cast", x=v, dtype="fp16")[-1])


# ------------------------------------------------------------------ convolution, pooling, resampling


def np_conv2d(x, w, b, stride, pads, dilation=(1, 1), groups=1):
    """Naive convolution; pads = ((top, bottom), (left, right))."""
    x = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    eh, ew = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    oh, ow = (h - eh) // stride[0] + 1, (wd - ew) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    per = o // groups
    for oc in range(o):
        g = oc // per
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * stride[0]:i * stride[0] + eh:dilation[0],
                          j * stride[1]:j * stride[1] + ew:dilation[1]]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out + (b.reshape(1, -1, 1, 1) if b is not None else 0)


IMG = RNG.standard_normal((1, 4, 7, 6)).astype(np.float32)
W = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
B = RNG.standard_normal(6).astype(np.float32)


@pytest.mark.parametrize("pad_type,pad,expected_pads", [
    ("valid", None, ((0, 0), (0, 0))),
    ("custom", np.array([1, 0, 2, 1], np.int32), ((1, 0), (2, 1))),
    ("same", None, ((1, 1), (0, 1))),  # stride 2: height 7 -> total 2; width 6 -> total 1 (extra at the end)
    ("same_lower", None, ((1, 1), (1, 0))),
])
def test_conv_padding(pad_type, pad, expected_pads):
    out = run("conv", x=IMG, weight=W, bias=B, strides=np.array([2, 2], np.int32), pad_type=pad_type, pad=pad,
              dilations=np.array([1, 1], np.int32), groups=np.int32(2))
    close(out, np_conv2d(IMG, W, B, (2, 2), expected_pads, groups=2), 1e-4)


def test_conv_dilated_and_1d():
    out = run("conv", x=IMG, weight=W[:, :, :, :], bias=None, strides=np.array([1, 1], np.int32),
              pad_type="custom", pad=np.array([2, 2, 2, 2], np.int32), dilations=np.array([2, 2], np.int32),
              groups=np.int32(2))
    close(out, np_conv2d(IMG, W, None, (1, 1), ((2, 2), (2, 2)), (2, 2), 2), 1e-4)
    x1, w1 = IMG[:, :, 0, :], W[:2, :, 0, :].repeat(2, axis=1)
    out1 = run("conv", x=x1, weight=w1, strides=np.array([1], np.int32), pad_type="valid")
    close(out1, np_conv2d(x1[:, :, None], w1[:, :, None], None, (1, 1), ((0, 0), (0, 0)))[:, :, 0], 1e-4)


def test_conv_transpose_is_the_adjoint_of_conv():
    """<conv(x), y> == <x, conv_transpose(y)> for the same weight, stride and padding."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)  # conv: 3 -> 4 channels
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    kwargs = {"strides": np.array([2, 2], np.int32), "pad_type": "custom", "pad": np.array([1, 1, 1, 1], np.int32)}
    y = run("conv", x=x, weight=w, **kwargs)
    z = RNG.standard_normal(y.shape).astype(np.float32)
    xt = run("conv_transpose", x=z, weight=w, output_shape=np.array([1, 3, 8, 8], np.int32), **kwargs)
    assert xt.shape == x.shape
    close((y * z).sum(), (x * xt).sum(), 1e-3)


def test_avg_pool_with_padding_and_ceil_mode():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    common = {"kernel_sizes": np.array([2, 2], np.int32), "strides": np.array([2, 2], np.int32), "pad_type": "valid"}
    assert run("avg_pool", x=x, **common).tolist() == [[[[3.0, 5.0], [13.0, 15.0]]]]
    ceil = run("avg_pool", x=x, ceil_mode=True, exclude_padding_from_average=True, **common)
    close(ceil[0, 0, :, 2], [(4 + 9) / 2, (14 + 19) / 2, 24])  # partial windows average what they cover
    padded = {"kernel_sizes": np.array([3, 3], np.int32), "strides": np.array([1, 1], np.int32),
                  "pad_type": "custom", "pad": np.array([1, 1, 1, 1], np.int32)}
    assert run("avg_pool", x=x, exclude_padding_from_average=True, **padded)[0, 0, 0, 0] == (0 + 1 + 5 + 6) / 4
    assert run("avg_pool", x=x, exclude_padding_from_average=False, **padded)[0, 0, 0, 0] == (0 + 1 + 5 + 6) / 9


def test_max_and_l2_pool():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5) - 30  # negative: padding must not win
    out = run("max_pool", x=x, kernel_sizes=np.array([3, 3], np.int32), strides=np.array([2, 2], np.int32),
              pad_type="same")
    # "same": one row/column of padding each side; windows end at rows/columns 1, 3, 4.
    assert out[0, 0].tolist() == [[-24.0, -22.0, -21.0], [-14.0, -12.0, -11.0], [-9.0, -7.0, -6.0]]
    l2 = run("l2_pool", x=X[:, :, :4, :4], kernel_sizes=np.array([2, 2], np.int32),
             strides=np.array([2, 2], np.int32), pad_type="valid")
    close(l2[0, 0, 0, 0], np.sqrt((X[0, 0, :2, :2] ** 2).sum()))


def test_upsampling_and_resizing():
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    nearest = run("upsample_nearest_neighbor", x=x, scale_factor_height=np.float32(2), scale_factor_width=np.float32(2))
    close(nearest, x.repeat(2, axis=2).repeat(2, axis=3))
    v = np.array([[[[0.0, 1.0]]]], np.float32)  # the MIL docs' 1-D example, Xin = 2
    align = run("upsample_bilinear", x=v, scale_factor_height=np.float32(1), scale_factor_width=np.float32(2.5),
                align_corners=True)
    close(align[0, 0, 0], [0.0, 0.25, 0.5, 0.75, 1.0])
    half = run("upsample_bilinear", x=v, scale_factor_height=np.float32(1), scale_factor_width=np.float32(2.5),
               align_corners=False)
    close(half[0, 0, 0], [0.0, 0.1, 0.5, 0.9, 1.0])
    six = run("resize_bilinear", x=v, target_size_height=np.int32(1), target_size_width=np.int32(6),
              sampling_mode="UNALIGN_CORNERS")
    close(six[0, 0, 0], [0.0, 0.0, 1 / 3, 2 / 3, 1.0, 1.0])
    strict = run("resize_bilinear", x=v, target_size_height=np.int32(1), target_size_width=np.int32(6),
                 sampling_mode="STRICT_ALIGN_CORNERS")
    close(strict[0, 0, 0], [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    nn_resize = run("resize_nearest_neighbor", x=x, target_size_height=np.int32(4), target_size_width=np.int32(3))
    close(nn_resize, x.repeat(2, axis=2))


# ------------------------------------------------------------------ linear algebra, normalisation, attention


def test_linear_matmul_einsum():
    w, b = RNG.standard_normal((7, 5)).astype(np.float32), RNG.standard_normal(7).astype(np.float32)
    close(run("linear", x=X, weight=w, bias=b), X @ w.T + b)
    close(run("matmul", x=X, y=X, transpose_x=False, transpose_y=True), X @ np.swapaxes(X, -1, -2))
    close(run("matmul", x=X, y=X, transpose_x=True, transpose_y=False), np.swapaxes(X, -1, -2) @ X)
    close(run("einsum", values=[X, X], equation="abcd,abed->abce"), np.einsum("abcd,abed->abce", X, X))


def test_normalisations():
    mean, var = np.array([0.1, -0.2, 0.3], np.float32), np.array([0.5, 1.0, 2.0], np.float32)
    gamma, beta = np.array([1.5, 0.5, -1.0], np.float32), np.array([0.0, 0.1, 0.2], np.float32)
    c = lambda v: v.reshape(1, 3, 1, 1)  # noqa: E731
    close(run("batch_norm", x=X, mean=mean, variance=var, gamma=gamma, beta=beta, epsilon=np.float32(1e-5)),
          (X - c(mean)) / np.sqrt(c(var) + 1e-5) * c(gamma) + c(beta))
    m, v = X.mean(axis=(2, 3), keepdims=True), X.var(axis=(2, 3), keepdims=True)
    close(run("instance_norm", x=X, gamma=gamma, beta=beta, epsilon=np.float32(1e-5)),
          (X - m) / np.sqrt(v + 1e-5) * c(gamma) + c(beta))
    g5 = RNG.standard_normal(5).astype(np.float32)
    m, v = X.mean(axis=-1, keepdims=True), X.var(axis=-1, keepdims=True)
    close(run("layer_norm", x=X, axes=np.array([-1], np.int32), gamma=g5, beta=None, epsilon=np.float32(1e-5)),
          (X - m) / np.sqrt(v + 1e-5) * g5)
    m, v = X.mean(axis=1, keepdims=True), X.var(axis=1, keepdims=True)  # a non-trailing axis
    close(run("layer_norm", x=X, axes=np.array([1], np.int32), gamma=gamma, beta=beta, epsilon=np.float32(1e-5)),
          (X - m) / np.sqrt(v + 1e-5) * c(gamma) + c(beta))
    close(run("l2_norm", x=X, epsilon=np.float32(1e-6)),
          X / np.sqrt((X ** 2).sum(axis=(1, 2, 3), keepdims=True) + 1e-6))
    sq = np.pad(X ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    window = sq[:, 0:3] + sq[:, 1:4] + sq[:, 2:5]
    close(run("local_response_norm", x=X, size=np.int32(3), alpha=np.float32(1e-2), beta=np.float32(0.75),
              k=np.float32(1.0)), X / (1.0 + 1e-2 / 3 * window) ** 0.75)


def test_scaled_dot_product_attention():
    q, k, v = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    mask = np.tril(np.ones((4, 4), bool))
    for attn_mask, bias in ((None, 0.0), (mask, np.where(mask, 0.0, -np.inf))):
        s = scores + bias
        p = np.exp(s - s.max(-1, keepdims=True))
        close(run("scaled_dot_product_attention", query=q, key=k, value=v, attn_mask=attn_mask),
              p / p.sum(-1, keepdims=True) @ v)


REDUCTIONS = {
    "reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
    "reduce_prod": np.prod, "reduce_l1_norm": lambda v, **k: np.sum(np.abs(v), **k),
    "reduce_l2_norm": lambda v, **k: np.sqrt(np.sum(v * v, **k)),
    "reduce_sum_square": lambda v, **k: np.sum(v * v, **k),
    "reduce_log_sum": lambda v, **k: np.log(np.sum(v, **k)),
    "reduce_log_sum_exp": lambda v, **k: np.log(np.sum(np.exp(v), **k)),
}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
def test_reductions(op):
    x = POS if op == "reduce_log_sum" else X
    close(run(op, x=x, axes=np.array([1, -1], np.int32), keep_dims=True),
          REDUCTIONS[op](x, axis=(1, 3), keepdims=True), 1e-4)
    close(run(op, x=x, axes=None, keep_dims=False), REDUCTIONS[op](x), 1e-4)


def test_arg_reductions():
    assert (run("reduce_argmax", x=X, axis=np.int32(2), keep_dims=False) == X.argmax(axis=2)).all()
    assert (run("reduce_argmin", x=X, axis=np.int32(-1), keep_dims=True) == X.argmin(axis=-1)[..., None]).all()


# ------------------------------------------------------------------ tensor kernels

I32 = np.int32


def test_shape_changes():
    # iOS17 reshape: a 0 copies the input dim aligned from the right (coremltools ops/defs/iOS17)
    assert run("reshape", x=X, shape=np.array([2, 0, -1], I32)).shape == (2, 4, 15)
    close(run("transpose", x=X, perm=np.array([0, 3, 1, 2], I32)), X.transpose(0, 3, 1, 2))
    close(run("squeeze", x=X[:, :1], axes=np.array([1], I32)), X[:, 0])
    assert run("squeeze", x=np.zeros((1, 3, 1)), axes=None).shape == (3,)
    assert run("expand_dims", x=X, axes=np.array([0, -1], I32)).shape == (1, 2, 3, 4, 5, 1)
    close(run("flatten2d", x=X, axis=np.int32(2)), X.reshape(6, 20))
    close(run("reshape_like", x=X.reshape(-1), ref_tensors=[X[:, :, 0], X[0, 0]], begins=np.array([0, 0], I32),
              ends=np.array([2, 1], I32), end_masks=np.array([False, True])), X)
    assert run("shape", x=X).tolist() == [2, 3, 4, 5]


def test_joining_and_splitting():
    close(run("concat", values=[X, X * 2], axis=np.int32(1), interleave=False), np.concatenate([X, X * 2], 1))
    a, b = np.array([[1, 2]], np.float32), np.array([[3, 4]], np.float32)
    assert run("concat", values=[a, b], axis=np.int32(1), interleave=True).tolist() == [[1, 3, 2, 4]]
    close(run("stack", values=[X, X], axis=np.int32(-1)), np.stack([X, X], -1))
    parts = run("split", x=X, split_sizes=np.array([1, 3], I32), axis=np.int32(2))
    close(parts[0], X[:, :, :1]), close(parts[1], X[:, :, 1:])
    assert [p.shape[1] for p in run("split", x=X, num_splits=np.int32(3), axis=np.int32(1))] == [1, 1, 1]
    close(run("tile", x=Y, reps=np.array([1, 2, 3, 1], I32)), np.tile(Y, (1, 2, 3, 1)))


def test_slicing():
    close(run("slice_by_index", x=X, begin=np.array([0, 1, 0, 4], I32), end=np.array([2, 3, 4, 0], I32),
              stride=np.array([1, 1, 2, -1], I32), begin_mask=np.array([False, False, False, False]),
              end_mask=np.array([True, False, False, True]), squeeze_mask=np.array([False] * 4)),
          X[:, 1:3, 0:4:2, 4::-1])
    close(run("slice_by_index", x=X, begin=np.array([0, 2, 0, 0], I32), end=np.array([0, 3, 0, 0], I32),
              stride=None, begin_mask=np.array([True, False, True, True]), end_mask=np.array([True, False, True, True]),
              squeeze_mask=np.array([False, True, False, False])), X[:, 2])
    close(run("slice_by_size", x=X, begin=np.array([1, 0, 2, 1], I32), size=np.array([1, -1, 2, 3], I32)),
          X[1:2, :, 2:4, 1:4])
    upd = np.ones((2, 1, 4, 5), np.float32)
    expected = X.copy()
    expected[:, 1:2] = upd
    close(run("slice_update", x=X, update=upd, begin=np.array([0, 1, 0, 0], I32), end=np.array([2, 2, 4, 5], I32)),
          expected)
    close(run("crop", x=X, crop_height=np.array([1, 1], I32), crop_width=np.array([0, 2], I32)), X[..., 1:3, 0:3])


def test_padding_modes():
    pads = np.array([1, 2, 2, 1], I32)  # last two axes
    np_pads = ((0, 0), (0, 0), (1, 2), (2, 1))
    close(run("pad", x=X, pad=pads, mode="constant", constant_val=np.float32(0.5)),
          np.pad(X, np_pads, constant_values=0.5))
    close(run("pad", x=X, pad=pads, mode="reflect"), np.pad(X, np_pads, mode="reflect"))
    close(run("pad", x=X, pad=pads, mode="replicate"), np.pad(X, np_pads, mode="edge"))


def test_gathers_and_scatters():
    idx = np.array([[2, -1], [0, 1]], I32)  # negative indices wrap
    close(run("gather", x=X, indices=idx, axis=np.int32(2)), np.take(X, idx % 4, axis=2))
    close(run("gather", x=X[:, :, 0], indices=np.array([[2], [0]], I32), axis=np.int32(1), batch_dims=np.int32(1)),
          np.stack([X[0, [2], 0], X[1, [0], 0]]))
    along = RNG.integers(0, 3, (2, 3, 4, 5)).astype(I32)
    close(run("gather_along_axis", x=X, indices=along, axis=np.int32(1)), np.take_along_axis(X, along, 1))
    nd = np.array([[1, 2], [0, 0]], I32)
    close(run("gather_nd", x=X, indices=nd), X[[1, 0], [2, 0]])
    data = np.zeros((4, 3), np.float32)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = data.copy()
    expected[[3, 1]] = upd
    close(run("scatter", data=data, indices=np.array([3, 1], I32), updates=upd, axis=np.int32(0), mode="update"),
          expected)
    close(run("scatter", data=data + 1, indices=np.array([3, 1], I32), updates=upd, axis=np.int32(0), mode="add"),
          expected + 1)
    along_idx = np.array([[0, 1, 2], [3, 3, 0]], I32)
    expected = np.zeros((4, 3), np.float32)
    np.put_along_axis(expected, along_idx, upd, axis=0)
    close(run("scatter_along_axis", data=data, indices=along_idx, updates=upd, axis=np.int32(0), mode="update"),
          expected)
    expected = np.zeros((4, 3), np.float32)
    expected[1, 2], expected[0, 0] = 5.0, 7.0
    close(run("scatter_nd", data=data, indices=np.array([[1, 2], [0, 0]], I32),
              updates=np.array([5.0, 7.0], np.float32), mode="update"), expected)


def test_selection_filling_ranges():
    close(run("select", cond=X > 0, a=X, b=-X), np.abs(X))
    assert run("fill", shape=np.array([2, 3], I32), value=np.float32(1.5)).tolist() == [[1.5] * 3] * 2
    assert run("fill_like", ref_tensor=X, value=np.float32(2.0)).shape == X.shape
    close(run("range_1d", end=np.int32(10), start=np.int32(2), step=np.int32(3)), [2, 5, 8])
    close(run("range_1d", end=np.float32(1.0), start=np.float32(0.0), step=np.float32(0.25)), [0, 0.25, 0.5, 0.75])
    assert run("one_hot", indices=np.array([0, 2], I32), one_hot_vector_size=np.int32(3), axis=np.int32(-1),
               on_value=np.float32(1), off_value=np.float32(0)).tolist() == [[1, 0, 0], [0, 0, 1]]
    assert run("non_zero", x=np.array([[0, 1], [2, 0]], np.float32)).tolist() == [[0, 1], [1, 0]]
    close(run("reverse", x=X, axes=np.array([1, 3], I32)), X[:, ::-1, :, ::-1])


def test_sorting_and_scans():
    values, indices = run("topk", x=X, k=np.int32(2), axis=np.int32(-1), ascending=False)
    close(values, -np.sort(-X, axis=-1)[..., :2])
    assert (np.take_along_axis(X, indices.astype(np.int64), -1) == values).all()
    low, _ = run("topk", x=X, k=np.int32(1), axis=np.int32(1), ascending=True)
    close(low, X.min(axis=1, keepdims=True))
    assert (run("argsort", x=X, axis=np.int32(-1), ascending=True) == np.argsort(X, -1, kind="stable")).all()
    close(run("cumsum", x=X, axis=np.int32(1), exclusive=False, reverse=False), np.cumsum(X, 1))
    close(run("cumsum", x=X, axis=np.int32(1), exclusive=True, reverse=True),
          np.flip(np.cumsum(np.flip(X, 1), 1), 1) - X)
    m = np.ones((4, 4), np.float32)
    close(run("band_part", x=m, lower=np.int32(1), upper=np.int32(0)), np.tril(m) - np.tril(m, -2))


def test_space_and_depth():
    x = np.arange(32, dtype=np.float32).reshape(1, 8, 2, 2)
    shuffled = run("pixel_shuffle", x=x, upscale_factor=np.int32(2))
    assert shuffled[0, 0].tolist() == [[0, 4, 1, 5], [8, 12, 9, 13], [2, 6, 3, 7], [10, 14, 11, 15]]
    close(run("pixel_unshuffle", x=shuffled, downscale_factor=np.int32(2)), x)
    d2s = run("depth_to_space", x=x, block_size=np.int32(2))  # DCR: the block index is outermost
    assert d2s[0, 0].tolist() == [[0, 8, 1, 9], [16, 24, 17, 25], [2, 10, 3, 11], [18, 26, 19, 27]]
    close(run("space_to_depth", x=d2s, block_size=np.int32(2)), x)


# ------------------------------------------------------------------ recurrent


def _torch_to_mil_gates(w, order):
    """Reorder torch's stacked gates into MIL's (``order`` lists torch chunk indices)."""
    chunks = np.split(w, len(order))
    return np.concatenate([chunks[i] for i in order])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_matches_torch(bidirectional):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(3, 4, bidirectional=bidirectional)
    x = torch.randn(5, 2, 3)
    d = 2 if bidirectional else 1
    h0, c0 = torch.randn(d, 2, 4), torch.randn(d, 2, 4)
    with torch.no_grad():
        out, (h, c) = ref(x, (h0, c0))
    p = {k: v.detach().numpy() for k, v in ref.named_parameters()}
    ifgo_to_ifoz = [0, 1, 3, 2]

    def weights(suffix):
        return {"weight_ih": _torch_to_mil_gates(p[f"weight_ih_l0{suffix}"], ifgo_to_ifoz),
                    "weight_hh": _torch_to_mil_gates(p[f"weight_hh_l0{suffix}"], ifgo_to_ifoz),
                    "bias": _torch_to_mil_gates(p[f"bias_ih_l0{suffix}"] + p[f"bias_hh_l0{suffix}"], ifgo_to_ifoz)}

    kwargs = weights("")
    if bidirectional:
        back = weights("_reverse")
        kwargs.update(weight_ih_back=back["weight_ih"], weight_hh_back=back["weight_hh"], bias_back=back["bias"])
    seq, h_last, c_last = run("lstm", x=x.numpy(), initial_h=h0.permute(1, 0, 2).reshape(2, -1).numpy(),
                              initial_c=c0.permute(1, 0, 2).reshape(2, -1).numpy(), output_sequence=True,
                              direction="bidirectional" if bidirectional else "forward", **kwargs)
    close(seq, out.numpy())
    close(h_last, h.permute(1, 0, 2).reshape(2, -1).numpy())
    close(c_last, c.permute(1, 0, 2).reshape(2, -1).numpy())


def test_gru_follows_the_mil_formula_and_reset_after_matches_torch():
    torch.manual_seed(0)
    ref = torch.nn.GRU(3, 4)
    x, h0 = torch.randn(5, 2, 3), torch.randn(1, 2, 4)
    with torch.no_grad():
        out, h = ref(x, h0)
    p = {k: v.detach().numpy() for k, v in ref.named_parameters()}
    rzn_to_roz = [0, 2, 1]
    w_ih, w_hh = (_torch_to_mil_gates(p[k], rzn_to_roz) for k in ("weight_ih_l0", "weight_hh_l0"))
    b_ih, b_hh = (_torch_to_mil_gates(p[k], rzn_to_roz) for k in ("bias_ih_l0", "bias_hh_l0"))
    seq, h_last = run("gru", x=x.numpy(), initial_h=h0[0].numpy(), weight_ih=w_ih, weight_hh=w_hh, bias=b_hh,
                      input_bias=b_ih, reset_after=True, output_sequence=True)
    close(seq, out.numpy()), close(h_last, h[0].numpy())
    # iOS15 gru: o = tanh(W_io x + W_ho (r * h) + b_o), one bias, as coremltools' numpy reference in
    # its iOS14 op tests computes it; checked step by step in numpy.
    bias = b_ih + b_hh
    seq15, _ = run("gru", x=x.numpy(), initial_h=h0[0].numpy(), weight_ih=w_ih, weight_hh=w_hh, bias=bias,
                   output_sequence=True)
    hh = h0[0].numpy()
    for t in range(5):
        xr, xo, xz = np.split(x[t].numpy() @ w_ih.T, 3, axis=-1)
        hr, _ho, hz = np.split(hh @ w_hh.T, 3, axis=-1)
        br, bo, bz = np.split(bias, 3)
        r, z = sigmoid(xr + hr + br), sigmoid(xz + hz + bz)
        ho = (r * hh) @ np.split(w_hh, 3)[1].T
        hh = (1 - z) * np.tanh(xo + ho + bo) + z * hh
        close(seq15[t], hh)


def test_rnn_matches_torch():
    torch.manual_seed(0)
    ref = torch.nn.RNN(3, 4)
    x, h0 = torch.randn(5, 2, 3), torch.randn(1, 2, 4)
    with torch.no_grad():
        out, h = ref(x, h0)
    p = {k: v.detach().numpy() for k, v in ref.named_parameters()}
    seq, h_last = run("rnn", x=x.numpy(), initial_h=h0[0].numpy(), weight_ih=p["weight_ih_l0"],
                      weight_hh=p["weight_hh_l0"], bias=p["bias_ih_l0"] + p["bias_hh_l0"], output_sequence=True)
    close(seq, out.numpy()), close(h_last, h[0].numpy())


def test_list_kernels():
    ls = run("make_list", init_length=np.int32(2), elem_shape=np.array([3], I32), dtype="fp32")
    assert len(ls) == 2
    ls2 = run("list_write", ls=ls, index=np.int32(3), value=np.ones(3, np.float32) * 4)
    assert len(ls) == 2 and run("list_length", ls=ls2).item() == 4  # the input list is unchanged
    close(run("list_read", ls=ls2, index=np.int32(3)), [4, 4, 4])
    ls3 = run("list_scatter", ls=ls2, indices=np.array([0, 1], I32), value=np.arange(6, dtype=np.float32).reshape(2, 3))
    close(run("list_gather", ls=ls3, indices=np.array([1, 3], I32)), [[3, 4, 5], [4, 4, 4]])


# ------------------------------------------------------------------ compression (hand-computed)


def test_lut_to_dense_ios16_packed_indices():
    lut = np.array([0.0, 10.0, 20.0, 30.0], np.float32)  # 2 bits
    packed = np.array([0b01101100, 0b00000011], np.uint8)  # 0, 3, 2, 1 | 3
    out = run("constexpr_lut_to_dense", indices=packed, lut=lut, shape=np.array([5], np.uint32))
    assert out.tolist() == [0, 30, 20, 10, 30]


def test_lut_to_dense_ios18_blocks_and_vectors():
    indices = np.array([[0, 1], [1, 0], [1, 1], [0, 0]], np.uint8)  # [4, 2]
    lut = np.array([[10, 11], [20, 21]], np.float32).reshape(2, 1, 2, 1)  # two row blocks of 2 rows
    out = run("constexpr_lut_to_dense", indices=indices, lut=lut, vector_axis=None)
    assert out.tolist() == [[10, 11], [11, 10], [21, 21], [20, 20]]
    vlut = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 1, 2, 2)  # 2 palettes of 2-vectors
    vec = run("constexpr_lut_to_dense", indices=np.array([[0, 1]], np.uint8), lut=vlut, vector_axis=np.int32(0))
    assert vec.tolist() == [[1, 3], [2, 4]]  # vectors run along axis 0


def test_dequantization():
    q = np.array([[0, 10], [20, -30]], np.int8)
    out = run("constexpr_affine_dequantize", quantized_data=q, zero_point=np.array([0, 10], np.int8),
              scale=np.array([0.5, 2.0], np.float32), axis=np.int32(0))
    assert out.tolist() == [[0.0, 5.0], [20.0, -80.0]]
    blocks = run("constexpr_blockwise_shift_scale", data=np.array([[1, 2, 3, 4]], np.int8),
                 scale=np.array([[1.0, 10.0]], np.float32), offset=np.array([[1, 0]], np.int8))
    assert blocks.tolist() == [[0.0, 1.0, 30.0, 40.0]]
    assert run("constexpr_cast", source_val=np.array([1.5], np.float16), output_dtype="fp32").tolist() == [1.5]


def test_sparse_forms():
    mask16 = np.array([0b00001010], np.uint8)  # elements 1 and 3 of 5
    assert run("constexpr_sparse_to_dense", nonzero_data=np.array([7.0, 9.0], np.float32), mask=mask16,
               shape=np.array([5], np.uint32)).tolist() == [0, 7, 0, 9, 0]
    mask = np.array([[0, 1], [1, 0]], np.uint8)
    assert run("constexpr_sparse_to_dense", nonzero_data=np.array([7.0, 9.0], np.float32),
               mask=mask).tolist() == [[0, 7], [9, 0]]
    out_mask, data = run("constexpr_lut_to_sparse", indices_mask=mask, indices_nonzero_data=np.array([1, 0], np.uint8),
                         lut=np.array([5.0, 6.0], np.float32).reshape(1, 1, 2, 1), vector_axis=None)
    assert out_mask.tolist() == mask.tolist() and data.tolist() == [6.0, 5.0]
    out_mask, data = run("constexpr_sparse_blockwise_shift_scale", data_mask=mask,
                         nonzero_data=np.array([3, 4], np.int8), scale=np.array([[2.0], [0.5]], np.float32),
                         offset=None)
    assert data.tolist() == [6.0, 2.0]


def test_activation_quantize_and_dequantize():
    x = np.array([[-1.0, 0.26, 0.5], [2.0, -0.3, 10.0]], np.float32)
    q = run("quantize", input=x, scale=np.array([0.5, 0.1], np.float32), zero_point=np.array([0, 3], np.int8),
            axis=0, output_dtype="int8")
    assert q.dtype == np.int8 and q.tolist() == [[-2, 1, 1], [23, 0, 103]]  # round half to even, then clip
    u = run("quantize", input=x, scale=np.float32(0.1), output_dtype="uint8")
    assert u.tolist() == [[0, 3, 5], [20, 0, 100]]
    back = run("dequantize", input=q, scale=np.array([0.5, 0.1], np.float16), zero_point=np.array([0, 3], np.int8),
               axis=0)
    assert back.dtype == np.float16
    close(back, [[-1.0, 0.5, 0.5], [2.0, -0.3, 10.0]], tol=1e-3)


def test_state_ops_read_write_and_update_one_cell_across_calls():
    """A KV cache's life by hand: zeroed state, "write_state" of a slice-updated copy, "read_state" sees it,
    "coreml_update_state" writes and returns; writes round to the state's fp16; a wrong shape is refused."""
    from mlbench.backends.coreml.emulate.kernels_state import StateCell
    from mlbench.backends.coreml.emulate.registry import KernelError

    cell = StateCell("key_cache", "fp16", (2, 3), torch.zeros(2, 3))
    assert run("read_state", input=cell).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert run("write_state", input=cell, data=np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], np.float32)) == ()
    read = run("read_state", input=cell)
    assert read.tolist() == [[1, 2, 3], [0, 0, 0]]
    read[0, 0] = 99.0  # a read is a copy: changing it leaves the state alone
    assert cell.value[0, 0].item() == 1.0
    out = run("coreml_update_state", state=cell, value=np.array([[1.0, 2.0, 3.0], [1.0 / 3, 5.0, 6.0]], np.float32))
    assert out[1, 0].item() == float(np.float16(1.0 / 3)) and cell.value[1, 0].item() == float(np.float16(1.0 / 3))
    with pytest.raises(KernelError, match=r"state 'key_cache' has shape \[2, 3\]; a write of shape \[3\] does not fit"):
        run("write_state", input=cell, data=np.zeros(3, np.float32))
    CHECKED.update({"read_state", "write_state", "coreml_update_state"})


def test_a_squeezed_slice_takes_the_element_at_begin_and_concat_takes_scalars():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    # squeeze_mask on axis 0: MIL ignores end there (coremltools writes end = begin for it)
    out = run("slice_update", x=x, update=np.full((3, 2), -1.0, np.float32), begin=np.array([1, 0, 1]),
              end=np.array([1, 3, 3]), squeeze_mask=np.array([True, False, False]))
    assert out[1, :, 1:3].tolist() == [[-1, -1]] * 3 and out[0].tolist() == x[0].tolist()
    assert run("concat", values=[np.array(1, np.int32), np.array([2, 3], np.int32)], axis=0).tolist() == [1, 2, 3]


def test_sampling_layout_and_random_kernels_run():
    """Named here so the registry check sees them; their values are checked by hand in test_new_kernels.py."""
    image = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    assert run("resample", x=image, coordinates=np.zeros((1, 2, 2, 2), np.float32), sampling_mode="bilinear",
               padding_mode="constant", padding_value=0.0, coordinates_mode="unnormalized",
               align_corners=False).tolist() == [[[[0.0, 0.0], [0.0, 0.0]]]]
    identity = np.array([[1, 0, 0, 0, 1, 0]], np.float32)
    assert np.allclose(run("affine", x=image, transform_matrix=identity, output_height=4, output_width=4,
                           align_corners=True), image)
    assert run("crop_resize", x=image, boxes=np.array([[0, 0, 3, 3]], np.float32), target_height=4,
               target_width=4, sampling_mode="ALIGN_CORNERS").shape == (1, 1, 4, 4)
    assert run("resize", x=image, shape=[8, 2], resized_dims=2).shape == (1, 1, 8, 2)
    moved = run("space_to_batch", x=image, block_shape=[2, 2], paddings=np.zeros((2, 2), np.int32))
    assert np.array_equal(run("batch_to_space", x=np.asarray(moved), block_shape=[2, 2],
                              crops=np.zeros((2, 2), np.int32)), image)
    assert run("sliding_windows", x=np.arange(4.0), axis=0, size=2).tolist() == [[0, 1], [1, 2], [2, 3]]
    assert run("reverse_sequence", x=np.arange(3.0).reshape(1, 3), lengths=np.array([3], np.int32), seq_axis=1,
               batch_axis=0).tolist() == [[2, 1, 0]]
    for op in ("random_uniform", "random_normal", "random_bernoulli"):
        assert run(op, shape=np.array([2, 2], np.int32)).shape == (2, 2)
    assert run("random_categorical", x=np.zeros((3, 4), np.float32), size=2).shape == (3, 2)
    boxes = np.array([[[1, 1, 2, 2], [5, 5, 2, 2]]], np.float32)
    kept = run("non_maximum_suppression", boxes=boxes, scores=np.array([[[0.2], [0.9]]], np.float32),
               iou_threshold=0.5, max_boxes=2)
    assert kept[2].tolist() == [[1, 0]]


def test_every_registered_kernel_is_checked_here():
    """Every op type the interpreter claims is named (quoted) in a check of this file."""
    from pathlib import Path

    source = Path(__file__).read_text(encoding="utf-8")
    assert {op for op in supported_op_types() - CHECKED if f'"{op}"' not in source} == set()
