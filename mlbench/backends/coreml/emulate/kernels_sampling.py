"""Sampling kernels: ``resample`` (torch's ``grid_sample``), ``affine`` (``affine_grid`` + ``grid_sample``),
``crop_resize`` (RoI crops), and iOS 17's ``resize`` (any trailing dims, linear or nearest).

Coordinates follow coremltools' op definitions (``mil/ops/defs/iOS15/image_resizing.py``): a point is
turned into pixel units, then ``padding_mode`` says what an index outside the image reads. Padding is
applied to integer indices (each bilinear corner, or the nearest pixel), which is what the op tests'
expected values show: ``reflection`` mirrors about the edge pixels (``|1 2 3| -> 2 3 2 1 2 3 2 1``),
``symmetric`` repeats them (``3 2 1 1 2 3 3 2 1``), ``border`` clamps, ``constant`` reads the value.
"""

from __future__ import annotations

import torch

from mlbench.backends.coreml.emulate.kernels_conv import _grid
from mlbench.backends.coreml.emulate.registry import KernelError, as_bool, as_float, as_int, as_ints, as_str, kernel

__all__ = ["pixel_coordinates", "sample_2d"]


def pixel_coordinates(coords: torch.Tensor, size: int, mode: str, align_corners: bool) -> torch.Tensor:
    """Coordinates along one axis of ``size`` pixels, in pixel units (0 is the first pixel's centre)."""
    coords = coords.to(torch.float64)
    if mode == "unnormalized":
        return coords
    if mode == "normalized_minus_one_to_one":
        return (coords + 1) / 2 * (size - 1) if align_corners else ((coords + 1) * size - 1) / 2
    if mode == "normalized_zero_to_one":
        return coords * (size - 1) if align_corners else coords * size - 0.5
    raise KernelError(f"coordinates_mode {mode!r} is not implemented")


def _index(index: torch.Tensor, size: int, padding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(index within [0, size), inside-the-image mask) for integer indices under a padding mode."""
    inside = (index >= 0) & (index < size)
    if padding == "constant":
        return index.clamp(0, size - 1), inside
    if padding == "border":
        return index.clamp(0, size - 1), torch.ones_like(inside)
    if padding == "reflection":
        if size == 1:
            return torch.zeros_like(index), torch.ones_like(inside)
        period = 2 * (size - 1)
        folded = torch.remainder(index, period)
        return torch.where(folded >= size, period - folded, folded), torch.ones_like(inside)
    if padding == "symmetric":
        period = 2 * size
        folded = torch.remainder(index, period)
        return torch.where(folded >= size, period - 1 - folded, folded), torch.ones_like(inside)
    raise KernelError(f"padding_mode {padding!r} is not implemented")


def _gather(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """x [B, C, H, W] read at rows/cols [B, H2, W2] -> [B, C, H2, W2]."""
    b, c, h, w = x.shape
    flat = (rows * w + cols).reshape(b, 1, -1).expand(b, c, -1)
    return torch.gather(x.reshape(b, c, h * w), 2, flat).reshape(b, c, *rows.shape[1:])


def sample_2d(x: torch.Tensor, px: torch.Tensor, py: torch.Tensor, sampling: str, padding: str,
              padding_value: float) -> torch.Tensor:
    """x [B, C, H, W] at pixel coordinates px, py [B, H2, W2] (float64) -> [B, C, H2, W2]."""
    h, w = x.shape[-2], x.shape[-1]
    compute = x.to(torch.float64)
    if sampling == "nearest":
        r, rin = _index(torch.floor(py + 0.5).to(torch.int64), h, padding)
        c, cin = _index(torch.floor(px + 0.5).to(torch.int64), w, padding)
        out = _gather(compute, r, c)
        return torch.where((rin & cin).unsqueeze(1), out, torch.full_like(out, padding_value)).to(x.dtype)
    if sampling != "bilinear":
        raise KernelError(f"sampling_mode {sampling!r} is not implemented")
    y0, x0 = torch.floor(py), torch.floor(px)
    wy, wx = (py - y0).unsqueeze(1), (px - x0).unsqueeze(1)
    out = torch.zeros(x.shape[0], x.shape[1], *px.shape[1:], dtype=torch.float64)
    for dy, fy in ((0, 1 - wy), (1, wy)):
        r, rin = _index(y0.to(torch.int64) + dy, h, padding)
        for dx, fx in ((0, 1 - wx), (1, wx)):
            c, cin = _index(x0.to(torch.int64) + dx, w, padding)
            corner = torch.where((rin & cin).unsqueeze(1), _gather(compute, r, c), padding_value)
            out = out + fy * fx * corner
    return out.to(x.dtype)


@kernel("resample")
def resample(x, coordinates, sampling_mode="bilinear", padding_mode="constant", padding_value=0.0,
             coordinates_mode="normalized_minus_one_to_one", align_corners=False, **_):
    mode, align = as_str(coordinates_mode), as_bool(align_corners)
    px = pixel_coordinates(coordinates[..., 0], x.shape[-1], mode, align)
    py = pixel_coordinates(coordinates[..., 1], x.shape[-2], mode, align)
    return sample_2d(x, px, py, as_str(sampling_mode).lower(), as_str(padding_mode).lower(),
                     as_float(padding_value))


@kernel("affine")
def affine(x, transform_matrix, output_height, output_width, sampling_mode="bilinear", padding_mode="constant",
           padding_value=0.0, coordinates_mode="normalized_minus_one_to_one", align_corners=True, **_):
    """Output point (x, y) in the output grid's coordinates reads x' = a0 x + a1 y + a2, y' = b0 x + b1 y + b2
    (torch's ``affine_grid``: the grid spans [-1, 1] over the output, in the input's normalized units)."""
    mode, align = as_str(coordinates_mode), as_bool(align_corners)
    if mode != "normalized_minus_one_to_one":
        raise KernelError(f"affine coordinates_mode {mode!r} is not implemented")
    out_h, out_w = as_int(output_height), as_int(output_width)

    def axis(n: int) -> torch.Tensor:
        i = torch.arange(n, dtype=torch.float64)
        if n == 1:
            return torch.zeros(1, dtype=torch.float64)
        return i * 2 / (n - 1) - 1 if align else (2 * i + 1) / n - 1

    gy, gx = torch.meshgrid(axis(out_h), axis(out_w), indexing="ij")
    m = transform_matrix.to(torch.float64).reshape(-1, 6).expand(x.shape[0], 6)
    a0, a1, a2, b0, b1, b2 = (m[:, k].reshape(-1, 1, 1) for k in range(6))
    cx, cy = a0 * gx + a1 * gy + a2, b0 * gx + b1 * gy + b2
    px = pixel_coordinates(cx, x.shape[-1], mode, align)
    py = pixel_coordinates(cy, x.shape[-2], mode, align)
    return sample_2d(x, px, py, as_str(sampling_mode).lower(), as_str(padding_mode).lower(), as_float(padding_value))


# ------------------------------------------------------------------ crop_resize


def _box_axis(start: float, end: float, n: int, mode: str) -> torch.Tensor:
    """The ``n`` sample points between a box's two edges (pixel units) under a sampling mode: the
    resize_bilinear grid laid over the box, whose extent is ``end - start`` (``Xin - 1``)."""
    i = torch.arange(n, dtype=torch.float64)
    length = end - start
    if mode in ("ALIGN_CORNERS", "STRICT_ALIGN_CORNERS"):
        if n == 1:
            return torch.full((1,), start + length / 2 if mode == "ALIGN_CORNERS" else start, dtype=torch.float64)
        return start + i * (length / (n - 1))
    if mode == "DEFAULT":
        return start + i * ((length + 1) / n) if length >= 0 else start + i * ((length - 1) / n)
    if mode == "UNALIGN_CORNERS":
        spacing = (length + 1) / n if length >= 0 else (length - 1) / n
        return start + i * spacing + 0.5 * spacing - (0.5 if length >= 0 else -0.5)
    if mode == "OFFSET_CORNERS":
        delta = length / n
        return start + 0.5 * delta + i * delta
    raise KernelError(f"crop_resize sampling_mode {mode!r} is not implemented")


def _boxes_in_pixels(boxes: torch.Tensor, h: int, w: int, normalized: bool, scale: float,
                     coordinate_mode: str) -> torch.Tensor:
    """[N, 4] boxes as (h_start, w_start, h_end, w_end) in pixel units."""
    b = boxes.to(torch.float64)
    if coordinate_mode == "CORNERS_HEIGHT_FIRST":
        hs, ws, he, we = b.unbind(1)
    elif coordinate_mode == "CORNERS_WIDTH_FIRST":
        ws, hs, we, he = b.unbind(1)
    elif coordinate_mode in ("CENTER_SIZE_HEIGHT_FIRST", "CENTER_SIZE_WIDTH_FIRST"):
        if coordinate_mode == "CENTER_SIZE_HEIGHT_FIRST":
            hc, wc, bh, bw = b.unbind(1)
        else:
            wc, hc, bw, bh = b.unbind(1)
        hs, he, ws, we = hc - bh / 2, hc + bh / 2, wc - bw / 2, wc + bw / 2
    else:
        raise KernelError(f"box_coordinate_mode {coordinate_mode!r} is not implemented")
    out = torch.stack([hs, ws, he, we], dim=1) * scale
    if normalized:
        out = out * torch.tensor([h - 1, w - 1, h - 1, w - 1], dtype=torch.float64)
    return out


@kernel("crop_resize")
def crop_resize(x, roi=None, boxes=None, box_indices=None, target_height=1, target_width=1,
                normalized_coordinates=False, spatial_scale=1.0, box_coordinate_mode="CORNERS_HEIGHT_FIRST",
                sampling_mode="DEFAULT", pad_value=0.0, **_):
    """iOS 15/16: ``roi`` [N, 1, 4 or 5, 1, 1] -> [N, B, C, th, tw] (a 5th leading value picks the image,
    then B is 1); iOS 17: ``boxes`` [N, 4] and ``box_indices`` -> [N, C, th, tw]. A sample point outside
    [0, size - 1] reads ``pad_value`` (TensorFlow's ``extrapolation_value``)."""
    th, tw = as_int(target_height), as_int(target_width)
    b_in, _c, h, w = x.shape
    legacy = boxes is None
    if legacy:
        flat = roi.reshape(roi.shape[0], -1)
        if flat.shape[1] == 5:
            indices, boxes = flat[:, 0].to(torch.int64), flat[:, 1:]
            per_box = [[int(i)] for i in indices.tolist()]
        else:
            boxes = flat
            per_box = [list(range(b_in)) for _ in range(flat.shape[0])]
    else:
        indices = (torch.arange(boxes.shape[0]) if box_indices is None
                   else torch.as_tensor(as_ints(box_indices), dtype=torch.int64))
        per_box = [[int(i)] for i in indices.tolist()]
    pixels = _boxes_in_pixels(boxes, h, w, as_bool(normalized_coordinates), as_float(spatial_scale),
                              as_str(box_coordinate_mode))
    mode, pad = as_str(sampling_mode), as_float(pad_value)
    crops = []
    for (hs, ws, he, we), images in zip(pixels.tolist(), per_box):
        ys, xs = _box_axis(hs, he, th, mode), _box_axis(ws, we, tw, mode)
        py, px = torch.meshgrid(ys, xs, indexing="ij")
        inside = ((py >= 0) & (py <= h - 1) & (px >= 0) & (px <= w - 1)).unsqueeze(0)
        image = x[images]
        grid = (px.unsqueeze(0).expand(len(images), -1, -1), py.unsqueeze(0).expand(len(images), -1, -1))
        sampled = sample_2d(image, grid[0], grid[1], "bilinear", "border", 0.0)
        crops.append(torch.where(inside.unsqueeze(1), sampled, torch.full_like(sampled, pad)))
    out = torch.stack(crops)  # [N, images, C, th, tw]
    return out if legacy else out[:, 0]


# ------------------------------------------------------------------ resize (iOS 17)


def _linear_axis(x: torch.Tensor, axis: int, points: torch.Tensor) -> torch.Tensor:
    size = x.shape[axis]
    low = points.floor().to(torch.int64).clamp(0, size - 1)
    high = (low + 1).clamp(max=size - 1)
    shape = [1] * x.dim()
    shape[axis] = -1
    weight = (points - low.to(points.dtype)).clamp(0, 1).reshape(shape).to(x.dtype)
    a, b = x.index_select(axis, low), x.index_select(axis, high)
    return a + (b - a) * weight


@kernel("resize")
def resize(x, shape, resized_dims, interpolation_mode="LINEAR", sampling_mode="DEFAULT", **_):
    """The last ``resized_dims`` dims of ``x`` take their sizes from the last entries of ``shape`` (0 keeps
    the input's); each is resampled on the ``resize_bilinear`` grid of ``sampling_mode``, linearly or by the
    nearest grid point (rounded half up: ``DEFAULT`` 2 -> 3 reads 0, 1, 1, as coremltools' op test says)."""
    sizes, dims = as_ints(shape), as_int(resized_dims)
    interpolation, mode = as_str(interpolation_mode), as_str(sampling_mode)
    out = x if x.is_floating_point() else x.to(torch.float32)
    for k in range(dims):
        axis = x.dim() - dims + k
        n_in, n_out = x.shape[axis], sizes[len(sizes) - dims + k]
        n_out = n_out or n_in
        grid = _grid(n_in, n_out, mode).to(torch.float64)
        if interpolation == "NEAREST_NEIGHBOR":
            out = out.index_select(axis, torch.floor(grid + 0.5).to(torch.int64).clamp(0, n_in - 1))
        elif interpolation == "LINEAR":
            out = _linear_axis(out, axis, grid)
        else:
            raise KernelError(f"resize interpolation_mode {interpolation!r} is not implemented")
    return out if x.is_floating_point() else torch.round(out).to(x.dtype)
