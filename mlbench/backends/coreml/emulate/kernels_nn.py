"""Linear algebra, normalisation, attention and reduction kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mlbench.backends.coreml.emulate.registry import as_bool, as_float, as_int, as_ints, as_str, kernel

# ------------------------------------------------------------------ linear algebra


def _alike(*values):
    """The operands in one dtype: iOS17's linear and matmul take x and the weight (or y) in different types (an
    int32 weight with float x, float y with int32 x) and compute in the wider; the output is stored as declared."""
    tensors = [v for v in values if v is not None]
    common = tensors[0].dtype
    for t in tensors[1:]:
        common = torch.promote_types(common, t.dtype)
    return [v if v is None or v.dtype == common else v.to(common) for v in values]


@kernel("linear")
def linear(x, weight, bias=None, **_):
    x, weight, bias = _alike(x, weight, bias)
    return F.linear(x, weight, bias)


@kernel("matmul")
def matmul(x, y, transpose_x=False, transpose_y=False, **_):
    x, y = _alike(x, y)
    if as_bool(transpose_x):
        x = x.transpose(-1, -2)
    if as_bool(transpose_y):
        y = y.transpose(-1, -2)
    return torch.matmul(x, y)


@kernel("einsum", variadic=("values",))
def einsum(values, equation, **_):
    return torch.einsum(as_str(equation), *values)


# ------------------------------------------------------------------ normalisation


@kernel("batch_norm")
def batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_):
    return F.batch_norm(x, mean, variance, gamma, beta, False, 0.0, as_float(epsilon))


@kernel("instance_norm")
def instance_norm(x, gamma=None, beta=None, epsilon=1e-5, **_):
    return F.instance_norm(x, weight=gamma, bias=beta, eps=as_float(epsilon))


@kernel("layer_norm")
def layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_):
    rank = x.dim()
    axes = sorted(a % rank for a in as_ints(axes)) if axes is not None else list(range(rank))
    eps = as_float(epsilon)
    if axes == list(range(rank - len(axes), rank)):
        shape = list(x.shape[rank - len(axes):])
        return F.layer_norm(x, shape, gamma, beta, eps)
    mean = x.mean(dim=axes, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
    out = (x - mean) / torch.sqrt(var + eps)
    # gamma and beta have the normalised axes' shape: place them on those axes.
    shape = [x.shape[i] if i in axes else 1 for i in range(rank)]
    if gamma is not None:
        out = out * gamma.reshape(shape)
    if beta is not None:
        out = out + beta.reshape(shape)
    return out


@kernel("l2_norm")
def l2_norm(x, epsilon=1e-6, **_):
    dims = list(range(max(x.dim() - 3, 0), x.dim()))
    return x / torch.sqrt((x * x).sum(dim=dims, keepdim=True) + as_float(epsilon))


@kernel("local_response_norm")
def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, **_):
    """Across axis -3 (Core ML's channel axis, whatever the rank): a rank-3 input [C, H, W] normalizes
    across its first axis, not across axis 1 as torch's does (coremltools' op test on [1, 3, 2]: every
    element is normalized by itself alone)."""
    wide = x.unsqueeze(0) if x.dim() == 3 else x.movedim(x.dim() - 3, 1)
    out = F.local_response_norm(wide, as_int(size), as_float(alpha), as_float(beta), as_float(k))
    return out.squeeze(0) if x.dim() == 3 else out.movedim(1, x.dim() - 3)


@kernel("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, **_):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)


# ------------------------------------------------------------------ reductions


def _axes(x, axes):
    return list(range(x.dim())) if axes is None else [a % max(x.dim(), 1) for a in as_ints(axes)]


def _reduce(fn):
    def run(x, axes=None, keep_dims=False, **_):
        dims = _axes(x, axes)
        keep = as_bool(keep_dims)
        if x.dim() == 0 or not dims:
            return fn(x, None, keep) if x.dim() == 0 else x
        return fn(x, dims, keep)

    return run


def _amax(x, dims, keep):
    return x if dims is None else torch.amax(x, dim=dims, keepdim=keep)


def _amin(x, dims, keep):
    return x if dims is None else torch.amin(x, dim=dims, keepdim=keep)


def _prod(x, dims, keep):
    if dims is None:
        return x
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, dim=d, keepdim=keep)
    return x


_REDUCTIONS = {
    "reduce_sum": lambda x, d, k: torch.sum(x, dim=d, keepdim=k) if d is not None else x,
    "reduce_mean": lambda x, d, k: torch.mean(x, dim=d, keepdim=k) if d is not None else x,
    "reduce_max": _amax,
    "reduce_min": _amin,
    "reduce_prod": _prod,
    "reduce_l1_norm": lambda x, d, k: torch.sum(torch.abs(x), dim=d, keepdim=k),
    "reduce_l2_norm": lambda x, d, k: torch.sqrt(torch.sum(x * x, dim=d, keepdim=k)),
    "reduce_sum_square": lambda x, d, k: torch.sum(x * x, dim=d, keepdim=k),
    "reduce_log_sum": lambda x, d, k: torch.log(torch.sum(x, dim=d, keepdim=k)),
    "reduce_log_sum_exp": lambda x, d, k: torch.logsumexp(x, dim=d, keepdim=k),
}
for _name, _fn in _REDUCTIONS.items():
    kernel(_name)(_reduce(_fn))


def _arg_reduce(x, axis, keep_dims, largest: bool):
    axis = as_int(axis) if axis is not None else -1
    fn = torch.argmax if largest else torch.argmin
    return fn(x, dim=axis, keepdim=as_bool(keep_dims)).to(torch.int32)


@kernel("reduce_argmax")
def reduce_argmax(x, axis=-1, keep_dims=False, **_):
    return _arg_reduce(x, axis, keep_dims, True)


@kernel("reduce_argmin")
def reduce_argmin(x, axis=-1, keep_dims=False, **_):
    return _arg_reduce(x, axis, keep_dims, False)


