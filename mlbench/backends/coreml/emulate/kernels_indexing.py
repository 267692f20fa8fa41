"""Indexing kernels: gathers, scatters, sorting (topk, argsort), one_hot, non_zero.

Indices may be negative (MIL allows ``[-size, size)``): they wrap, as numpy's do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mlbench.backends.coreml.emulate.registry import KernelError, as_bool, as_int, as_str, kernel


def _index(indices, size: int) -> torch.Tensor:
    """int64 indices with negative values wrapped (MIL allows indices in [-size, size))."""
    indices = indices.to(torch.int64)
    return torch.where(indices < 0, indices + size, indices)


@kernel("gather")
def gather(x, indices, axis=0, batch_dims=0, **_):
    axis = as_int(axis) % x.dim()
    batch_dims = as_int(batch_dims) if batch_dims is not None else 0
    if batch_dims == 0:
        idx = _index(indices, x.shape[axis])
        out = x.index_select(axis, idx.reshape(-1))
        return out.reshape(tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]))
    return torch.stack([gather(x[i], indices[i], axis - 1, batch_dims - 1) for i in range(x.shape[0])])


@kernel("gather_along_axis")
def gather_along_axis(x, indices, axis=0, **_):
    axis = as_int(axis) % x.dim()
    return torch.gather(x, axis, _index(indices, x.shape[axis]))


@kernel("gather_nd")
def gather_nd(x, indices, batch_dims=0, **_):
    if batch_dims is not None and as_int(batch_dims) > 0:
        return torch.stack([gather_nd(x[i], indices[i], as_int(batch_dims) - 1) for i in range(x.shape[0])])
    k = indices.shape[-1]
    idx = [_index(indices[..., i], x.shape[i]) for i in range(k)]
    return x[tuple(idx)]


_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@kernel("scatter_along_axis")
def scatter_along_axis(data, indices, updates, axis=0, mode="update", validate_indices=False, **_):
    """An index outside [-size, size) is an error with ``validate_indices`` (Core ML refuses the prediction);
    without it the result is undefined, and here its update is dropped."""
    axis = as_int(axis) % data.dim()
    size = data.shape[axis]
    idx = _index(indices, size)
    outside = (idx < 0) | (idx >= size)
    if bool(outside.any()):
        if validate_indices is not None and as_bool(validate_indices):
            raise KernelError(f"indices out of bounds for an axis of size {size}")
        spare = list(data.shape)
        spare[axis] = 1
        wide = torch.cat([data, torch.zeros(spare, dtype=data.dtype)], dim=axis)  # out-of-range updates land here
        kept = scatter_along_axis(wide, torch.where(outside, size, idx), updates, axis, mode)
        return kept.narrow(axis, 0, size)
    mode = as_str(mode)
    if mode == "update":
        return data.scatter(axis, idx, updates)
    if mode == "sub":
        return data.scatter_reduce(axis, idx, -updates, "sum")
    if mode == "div":
        return data.scatter_reduce(axis, idx, 1 / updates, "prod")
    return data.scatter_reduce(axis, idx, updates, _SCATTER_REDUCE[mode])


@kernel("scatter")
def scatter(data, indices, updates, axis=0, mode="update", validate_indices=False, **_):
    axis = as_int(axis) % data.dim()
    idx = _index(indices, data.shape[axis]).reshape([1] * axis + [-1] + [1] * (data.dim() - axis - 1))
    return scatter_along_axis(data, idx.expand(updates.shape), updates, axis, mode, validate_indices)


@kernel("scatter_nd")
def scatter_nd(data, indices, updates, mode="update", **_):
    k = indices.shape[-1]
    idx = tuple(_index(indices[..., i], data.shape[i]) for i in range(k))
    out = data.clone()
    mode = as_str(mode)
    if mode == "update":
        out[idx] = updates
    elif mode == "add":
        out.index_put_(idx, updates, accumulate=True)
    else:
        raise KernelError(f"scatter_nd mode {mode!r} is not implemented")
    return out


@kernel("topk")
def topk(x, k=1, axis=-1, ascending=False, sort=True, return_indices=True, **_):
    values, indices = torch.topk(x, as_int(k), dim=as_int(axis), largest=not as_bool(ascending), sorted=True)
    if not as_bool(return_indices):  # iOS18: the op then declares one output
        return values
    return values, indices.to(torch.int32)


@kernel("argsort")
def argsort(x, axis=-1, ascending=False, **_):
    return torch.argsort(x, dim=as_int(axis), descending=not as_bool(ascending), stable=True).to(torch.int32)


@kernel("one_hot")
def one_hot(indices, one_hot_vector_size, axis=-1, on_value=1, off_value=0, **_):
    size = as_int(one_hot_vector_size)
    hot = F.one_hot(_index(indices, size), size).to(torch.bool)
    on = on_value if isinstance(on_value, torch.Tensor) else torch.tensor(on_value)
    off = off_value if isinstance(off_value, torch.Tensor) else torch.tensor(off_value)
    out = torch.where(hot, on, off)
    return out.movedim(-1, as_int(axis) % out.dim())


@kernel("non_zero")
def non_zero(x, **_):
    return torch.nonzero(x).to(torch.int32)
