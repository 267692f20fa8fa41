"""Tensor kernels: shape changes, slicing, joining, padding, filling, scans, space/depth moves."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mlbench.backends.coreml.emulate.registry import KernelError, as_bool, as_float, as_int, as_ints, as_str, kernel


@kernel("identity")
def identity(x, **_):
    return x


@kernel("reshape")
def reshape(x, shape, **_):
    shape = as_ints(shape)
    # iOS17: a 0 copies the input dim aligned from the right (len(shape)-i == rank-j); out of range, 1.
    # iOS15 allows 0 only when len(shape) == rank, where the two rules agree.
    offset = x.dim() - len(shape)
    shape = [(x.shape[i + offset] if 0 <= i + offset < x.dim() else 1) if s == 0 else s
             for i, s in enumerate(shape)]
    return x.reshape(shape)


def _bools(values) -> list[bool]:
    """A bool list given as a tensor or (when a const attribute) a Python list."""
    if isinstance(values, torch.Tensor):
        return [bool(v) for v in values.reshape(-1).tolist()]
    return [as_bool(v) for v in values]


@kernel("reshape_like", variadic=("ref_tensors",))
def reshape_like(x, ref_tensors, begins, ends, end_masks, **_):
    shape: list[int] = []
    for ref, b, e, m in zip(ref_tensors, as_ints(begins), as_ints(ends), _bools(end_masks)):
        shape += list(ref.shape[b:] if m else ref.shape[b:e])
    return x.reshape(shape)


@kernel("transpose")
def transpose(x, perm, **_):
    return x.permute(as_ints(perm))


@kernel("squeeze")
def squeeze(x, axes=None, **_):
    if axes is None:
        return x.squeeze()
    dims = sorted((a % x.dim() for a in as_ints(axes)), reverse=True)
    for d in dims:
        x = x.squeeze(d)
    return x


@kernel("expand_dims")
def expand_dims(x, axes, **_):
    rank = x.dim() + len(as_ints(axes))
    for a in sorted(a % rank for a in as_ints(axes)):
        x = x.unsqueeze(a)
    return x


@kernel("flatten2d")
def flatten2d(x, axis=1, **_):
    axis = as_int(axis)
    axis = axis + x.dim() if axis < 0 else axis  # axis == rank is valid: [prod(shape), 1]
    return x.reshape(math.prod(x.shape[:axis]), -1)


@kernel("concat", variadic=("values",))
def concat(values, axis, interleave=False, **_):
    axis = as_int(axis)
    # coremltools builds shapes by concatenating scalars (e.g. a gathered dimension) into a vector
    values = [v.reshape(1) if isinstance(v, torch.Tensor) and v.dim() == 0 else v for v in values]
    if as_bool(interleave):
        stacked = torch.stack(values, dim=(axis % values[0].dim()) + 1)
        shape = list(values[0].shape)
        shape[axis] = -1
        return stacked.reshape(shape)
    return torch.cat(values, dim=axis)


@kernel("stack", variadic=("values",))
def stack(values, axis=0, **_):
    return torch.stack(values, dim=as_int(axis))


@kernel("split")
def split(x, num_splits=None, split_sizes=None, axis=0, **_):
    axis = as_int(axis)
    if split_sizes is not None:
        return tuple(torch.split(x, as_ints(split_sizes), dim=axis))
    return tuple(torch.chunk(x, as_int(num_splits), dim=axis))


def _slice_axes(x, begin, end, stride, begin_mask, end_mask, squeeze_mask):
    rank = x.dim()
    begin, end = as_ints(begin), as_ints(end)
    stride = as_ints(stride) if stride is not None else [1] * rank
    masks = [[as_bool(v) for v in m.reshape(-1)] if m is not None else [False] * rank
             for m in (begin_mask, end_mask, squeeze_mask)]
    axes = []
    for i in range(rank):
        if masks[2][i]:  # squeezed: the one element at begin (MIL ignores end and the masks there)
            b = begin[i] % x.shape[i] if x.shape[i] else 0
            axes.append((slice(b, b + 1, 1), True))
        else:
            axes.append((slice(None if masks[0][i] else begin[i], None if masks[1][i] else end[i], stride[i]), False))
    return axes


def _take(x, axis: int, sl: slice):
    start, stop, step = sl.indices(x.shape[axis])
    if step > 0:
        return x[(slice(None),) * axis + (slice(start, max(start, stop), step),)]
    return x.index_select(axis, torch.arange(start, stop, step, dtype=torch.int64))


@kernel("slice_by_index")
def slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    axes = _slice_axes(x, begin, end, stride, begin_mask, end_mask, squeeze_mask)
    for axis, (sl, _squeeze) in enumerate(axes):
        if sl != slice(None, None, 1):
            x = _take(x, axis, sl)
    for axis in reversed(range(len(axes))):
        if axes[axis][1]:
            x = x.squeeze(axis)
    return x


@kernel("slice_update")
def slice_update(x, update, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    index = torch.arange(x.numel()).reshape(x.shape)
    target = slice_by_index(index, begin, end, stride, begin_mask, end_mask, squeeze_mask)
    out = x.clone().reshape(-1)
    out[target.reshape(-1)] = update.reshape(-1).to(out.dtype)
    return out.reshape(x.shape)


@kernel("slice_by_size")
def slice_by_size(x, begin, size, **_):
    for axis, (b, s) in enumerate(zip(as_ints(begin), as_ints(size))):
        b = b % x.shape[axis] if x.shape[axis] else 0
        x = x.narrow(axis, b, x.shape[axis] - b if s == -1 else s)
    return x


@kernel("crop")
def crop(x, crop_height, crop_width, **_):
    (top, bottom), (left, right) = as_ints(crop_height), as_ints(crop_width)
    h, w = x.shape[-2], x.shape[-1]
    return x[..., top:h - bottom, left:w - right]


@kernel("tile")
def tile(x, reps, **_):
    return x.repeat(as_ints(reps))


@kernel("pad")
def pad(x, pad, mode="constant", constant_val=0.0, **_):
    values = as_ints(pad)
    pairs = [(values[2 * i], values[2 * i + 1]) for i in range(len(values) // 2)]
    flat: list[int] = []
    for b, e in reversed(pairs):
        flat += [b, e]
    mode = as_str(mode)
    if mode == "constant":
        return F.pad(x, flat, value=as_float(constant_val))
    if mode not in ("reflect", "replicate"):
        raise KernelError(f"pad mode {mode!r} is not implemented")
    # torch pads the last 1-3 dims of a batched tensor: drop leading pairs of zeros.
    while len(flat) > 2 and flat[-2:] == [0, 0]:
        flat = flat[:-2]
    n = len(flat) // 2
    lead = x.shape[: x.dim() - n]
    padded = F.pad(x.reshape((1, -1) + tuple(x.shape[x.dim() - n:])), flat, mode=mode)
    return padded.reshape(tuple(lead) + tuple(padded.shape[2:]))


@kernel("select")
def select(cond, a, b, **_):
    return torch.where(cond.to(torch.bool), a, b)


@kernel("shape")
def shape(x, **_):
    return torch.tensor(list(x.shape), dtype=torch.int32)


@kernel("fill")
def fill(shape, value=0.0, **_):
    value = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    return torch.full(as_ints(shape), value.item(), dtype=value.dtype)


@kernel("fill_like")
def fill_like(ref_tensor, value=0.0, **_):
    value = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    return torch.full(tuple(ref_tensor.shape), value.item(), dtype=value.dtype)


@kernel("range_1d")
def range_1d(end, start, step, **_):
    dtype = end.dtype if isinstance(end, torch.Tensor) else torch.float32
    return torch.arange(start.item(), end.item(), step.item(), dtype=dtype)


@kernel("cumsum")
def cumsum(x, axis=0, exclusive=False, reverse=False, **_):
    axis = as_int(axis)
    if as_bool(reverse):
        x = x.flip(axis)
    out = torch.cumsum(x, dim=axis).to(x.dtype)
    if as_bool(exclusive):
        out = out - x
    return out.flip(axis) if as_bool(reverse) else out


@kernel("band_part")
def band_part(x, lower=-1, upper=-1, **_):
    lower, upper = as_int(lower), as_int(upper)
    rows = torch.arange(x.shape[-2]).reshape(-1, 1)
    cols = torch.arange(x.shape[-1]).reshape(1, -1)
    keep = torch.ones(x.shape[-2:], dtype=torch.bool)
    if lower >= 0:
        keep &= (rows - cols) <= lower
    if upper >= 0:
        keep &= (cols - rows) <= upper
    return torch.where(keep, x, torch.zeros_like(x))


@kernel("reverse")
def reverse(x, axes=None, **_):
    return x.flip(as_ints(axes) if axes is not None else list(range(x.dim())))


@kernel("pixel_shuffle")
def pixel_shuffle(x, upscale_factor, **_):
    return F.pixel_shuffle(x, as_int(upscale_factor))


@kernel("pixel_unshuffle")
def pixel_unshuffle(x, downscale_factor, **_):
    return F.pixel_unshuffle(x, as_int(downscale_factor))


@kernel("depth_to_space")
def depth_to_space(x, block_size, **_):
    """TensorFlow's DCR order: channel blocks outermost."""
    bs = as_int(block_size)
    n, c, h, w = x.shape
    y = x.reshape(n, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (bs * bs), h * bs, w * bs)


@kernel("space_to_depth")
def space_to_depth(x, block_size, **_):
    bs = as_int(block_size)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // bs, bs, w // bs, bs).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * bs * bs, h // bs, w // bs)
