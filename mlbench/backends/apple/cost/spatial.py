"""Pooling and resizing families.

* avg_pool, max_pool: kernel elements per output element (adds and a divide, or compares);
  l2_pool: 2 x kernel elements (square, add; the square root is not counted).
* bilinear resizing (upsample_bilinear, resize_bilinear, crop_resize, resample, affine, resize
  with LINEAR interpolation): 7 per output element (4 multiplies and 3 adds of the weighted
  taps; the sampling coordinates are not counted).
* nearest-neighbour resizing (upsample_nearest_neighbor, resize_nearest_neighbor, resize with
  NEAREST_NEIGHBOR): 0, a copy.
"""

from __future__ import annotations

import math

from mlbench.backends.apple.cost.base import OpCost, OpDescription, register, times, with_flops

BILINEAR_FLOPS = 7


@register("avg_pool", "max_pool", "l2_pool")
def pool(desc: OpDescription) -> OpCost:
    kernel = desc.attr("kernel_sizes")
    if not isinstance(kernel, list) or not kernel or not all(isinstance(k, int) for k in kernel):
        return with_flops(desc, None)
    per = math.prod(kernel) * (2 if desc.op_type == "l2_pool" else 1)
    return with_flops(desc, times(desc.out_numel, per))


@register("upsample_bilinear", "resize_bilinear", "crop_resize", "resample", "affine")
def bilinear(desc: OpDescription) -> OpCost:
    mode = str(desc.attr("sampling_mode", "")).upper()
    if desc.op_type in ("resample", "affine") and mode == "NEAREST":
        return with_flops(desc, 0)
    return with_flops(desc, times(desc.out_numel, BILINEAR_FLOPS))


@register("upsample_nearest_neighbor", "resize_nearest_neighbor")
def nearest(desc: OpDescription) -> OpCost:
    return with_flops(desc, 0)


@register("resize")
def resize(desc: OpDescription) -> OpCost:
    mode = desc.attr("interpolation_mode", "LINEAR")
    if isinstance(mode, list):
        mode = mode[0] if mode else "LINEAR"
    if str(mode).upper().startswith("NEAREST"):
        return with_flops(desc, 0)
    return with_flops(desc, times(desc.out_numel, BILINEAR_FLOPS))
