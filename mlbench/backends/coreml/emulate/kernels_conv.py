"""Sliding-window kernels: convolution, transposed convolution, pooling, resampling."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mlbench.backends.coreml.emulate.registry import KernelError, as_bool, as_float, as_int, as_ints, as_str, kernel

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def _pads(pad_type, pad, in_sizes, kernel_sizes, strides, dilations) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial dim, following MIL's pad_type rules."""
    pad_type = as_str(pad_type) if pad_type is not None else "valid"
    n = len(in_sizes)
    if pad_type == "valid":
        return [(0, 0)] * n
    if pad_type == "custom":
        values = as_ints(pad) if pad is not None else [0] * (2 * n)
        return [(values[2 * i], values[2 * i + 1]) for i in range(n)]
    if pad_type in ("same", "same_lower"):
        out = []
        for size, k, s, d in zip(in_sizes, kernel_sizes, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            out.append((small, large) if pad_type == "same" else (large, small))
        return out
    raise KernelError(f"pad_type {pad_type!r} is not implemented")


def _torch_pad(pads: list[tuple[int, int]]) -> list[int]:
    """F.pad order: last dim first."""
    flat: list[int] = []
    for begin, end in reversed(pads):
        flat += [begin, end]
    return flat


@kernel("conv")
def conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, **_):
    n = x.dim() - 2
    strides = as_ints(strides) if strides is not None else [1] * n
    dilations = as_ints(dilations) if dilations is not None else [1] * n
    pads = _pads(pad_type, pad, x.shape[2:], weight.shape[2:], strides, dilations)
    if all(b == e for b, e in pads):
        padding = [b for b, _ in pads]
    else:
        x, padding = F.pad(x, _torch_pad(pads)), [0] * n
    return _CONV[n](x, weight, bias, strides, padding, dilations, as_int(groups))


@kernel("conv_transpose")
def conv_transpose(x, weight, bias=None, pad=None, output_shape=None, pad_type="valid", strides=None,
                   dilations=None, groups=1, **_):
    n = x.dim() - 2
    strides = as_ints(strides) if strides is not None else [1] * n
    dilations = as_ints(dilations) if dilations is not None else [1] * n
    full = _CONV_T[n](x, weight, bias, strides, 0, 0, as_int(groups), dilations)
    pad_type = as_str(pad_type) if pad_type is not None else "valid"
    sizes = list(full.shape[2:])
    if pad_type == "custom":
        values = as_ints(pad) if pad is not None else [0] * (2 * n)
        begins = [values[2 * i] for i in range(n)]
        lengths = [sizes[i] - values[2 * i] - values[2 * i + 1] for i in range(n)]
    elif pad_type in ("same", "same_lower"):
        lengths = [x.shape[2 + i] * strides[i] for i in range(n)]
        totals = [sizes[i] - lengths[i] for i in range(n)]
        begins = [t // 2 if pad_type == "same" else t - t // 2 for t in totals]
    else:
        begins, lengths = [0] * n, sizes
    if output_shape is not None:
        lengths = as_ints(output_shape)[-n:]
    for i in range(n):
        extra = begins[i] + lengths[i] - full.shape[2 + i]
        if extra > 0:  # output padding past the full result: zeros plus the bias
            shape = list(full.shape)
            shape[2 + i] = extra
            fill = torch.zeros(shape, dtype=full.dtype)
            if bias is not None:
                fill += bias.reshape([1, -1] + [1] * n)
            full = torch.cat([full, fill], dim=2 + i)
        full = full.narrow(2 + i, begins[i], lengths[i])
    return full


def _pool_setup(x, kernel_sizes, strides, pad_type, pad):
    n = x.dim() - 2
    kernel_sizes = as_ints(kernel_sizes)
    strides = as_ints(strides) if strides is not None else [1] * n
    pads = _pads(pad_type, pad, x.shape[2:], kernel_sizes, strides, [1] * n)
    return n, kernel_sizes, strides, _torch_pad(pads)


def _sum_pool(x, n, kernel_sizes, strides, ceil_mode):
    if n == 1:
        return F.avg_pool2d(x.unsqueeze(-2), [1] + kernel_sizes, [1] + strides, 0, ceil_mode,
                            divisor_override=1).squeeze(-2)
    pool = F.avg_pool2d if n == 2 else F.avg_pool3d
    return pool(x, kernel_sizes, strides, 0, ceil_mode, divisor_override=1)


@kernel("avg_pool")
def avg_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, exclude_padding_from_average=False,
             ceil_mode=False, **_):
    n, kernel_sizes, strides, flat = _pool_setup(x, kernel_sizes, strides, pad_type, pad)
    ceil_mode = as_bool(ceil_mode)
    exclude = as_bool(exclude_padding_from_average)
    if not any(flat) and not ceil_mode:
        if n == 1:
            return F.avg_pool1d(x, kernel_sizes, strides)
        return (F.avg_pool2d if n == 2 else F.avg_pool3d)(x, kernel_sizes, strides)
    total = _sum_pool(F.pad(x, flat), n, kernel_sizes, strides, ceil_mode)
    ones = torch.ones([1, 1] + list(x.shape[2:]), dtype=x.dtype)
    count = _sum_pool(F.pad(ones, flat, value=0.0 if exclude else 1.0), n, kernel_sizes, strides, ceil_mode)
    return total / count


@kernel("max_pool")
def max_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=False, **_):
    n, kernel_sizes, strides, flat = _pool_setup(x, kernel_sizes, strides, pad_type, pad)
    if any(flat):
        x = F.pad(x, flat, value=float("-inf"))
    return _MAX_POOL[n](x, kernel_sizes, strides, 0, 1, as_bool(ceil_mode))


@kernel("l2_pool")
def l2_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, **_):
    n, kernel_sizes, strides, flat = _pool_setup(x, kernel_sizes, strides, pad_type, pad)
    return torch.sqrt(_sum_pool(F.pad(x * x, flat), n, kernel_sizes, strides, False))


# ------------------------------------------------------------------ resampling (last two axes)


def _sample_linear(x, axis: int, coords: torch.Tensor):
    size = x.shape[axis]
    coords = coords.clamp(0, size - 1)
    low = coords.floor().to(torch.int64)
    high = (low + 1).clamp(max=size - 1)
    w = (coords - low.to(coords.dtype)).reshape([-1] + [1] * (x.dim() - 1 - (axis % x.dim())))
    a, b = x.index_select(axis, low), x.index_select(axis, high)
    return a + (b - a) * w


def _grid(n_in: int, n_out: int, mode: str) -> torch.Tensor:
    i = torch.arange(n_out, dtype=torch.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "align"):
        if n_out == 1:
            return torch.zeros(1, dtype=torch.float32)
        grid = i * ((n_in - 1) / (n_out - 1))
    elif mode in ("UNALIGN_CORNERS", "half_pixel"):
        spacing = n_in / n_out
        grid = i * spacing + 0.5 * spacing - 0.5
    elif mode == "DEFAULT":
        grid = i * (n_in / n_out)
    elif mode == "OFFSET_CORNERS":
        delta = max(1, n_in - 1) / n_out
        spacing = ((n_out - 1) * delta) / (n_out - 1) if n_out > 1 else 0.0
        grid = 0.5 * delta + i * spacing
    else:
        raise KernelError(f"bilinear sampling mode {mode!r} is not implemented")
    return grid.clamp(0, n_in - 1).to(torch.float32)


def _bilinear(x, out_h: int, out_w: int, mode: str):
    h, w = x.shape[-2], x.shape[-1]
    y = _sample_linear(x, x.dim() - 2, _grid(h, out_h, mode))
    return _sample_linear(y, y.dim() - 1, _grid(w, out_w, mode))


def _nearest(x, out_h: int, out_w: int):
    """Output pixel ``i`` reads source ``floor(i * in / out)``, in exact integers.

    Core ML maps by the sizes, not by the scale factor: ``upsample_nearest_neighbor`` with scale
    1.12 on a 3-pixel row reads 0, 1, 2 (coremltools' iOS15 op test), where ``floor(i / 1.12)``
    reads 0, 0, 1. With an integral output size (torch's ``interpolate`` at 1.5 on 10 pixels)
    the two agree.
    """
    h, w = x.shape[-2], x.shape[-1]
    rows = (torch.arange(out_h, dtype=torch.int64) * h) // out_h
    cols = (torch.arange(out_w, dtype=torch.int64) * w) // out_w
    x = x.index_select(x.dim() - 2, rows.clamp(max=h - 1))
    return x.index_select(x.dim() - 1, cols.clamp(max=w - 1))


@kernel("upsample_nearest_neighbor")
def upsample_nearest_neighbor(x, scale_factor_height=1, scale_factor_width=1, **_):
    sh, sw = as_float(scale_factor_height), as_float(scale_factor_width)
    return _nearest(x, math.floor(x.shape[-2] * sh), math.floor(x.shape[-1] * sw))


@kernel("resize_nearest_neighbor")
def resize_nearest_neighbor(x, target_size_height, target_size_width, **_):
    return _nearest(x, as_int(target_size_height), as_int(target_size_width))


@kernel("upsample_bilinear")
def upsample_bilinear(x, scale_factor_height=1, scale_factor_width=1, align_corners=True,
                      half_pixel_centers=None, **_):
    align = as_bool(align_corners)
    half = (not align) if half_pixel_centers is None else as_bool(half_pixel_centers)
    mode = "align" if align else ("half_pixel" if half else "DEFAULT")
    out_h = math.floor(x.shape[-2] * as_float(scale_factor_height))
    out_w = math.floor(x.shape[-1] * as_float(scale_factor_width))
    return _bilinear(x, out_h, out_w, mode)


@kernel("resize_bilinear")
def resize_bilinear(x, target_size_height=1, target_size_width=1, sampling_mode="DEFAULT", **_):
    return _bilinear(x, as_int(target_size_height), as_int(target_size_width), as_str(sampling_mode))
