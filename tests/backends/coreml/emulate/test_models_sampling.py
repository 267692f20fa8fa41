"""Real coremltools conversions of small torch modules that reach the sampling kernels (issue 38), run by
the interpreter against eager float32 within the float32 bound (max_rel 1e-5): a fractional
``interpolate(mode="nearest")``, ``grid_sample`` (-> ``resample``), ``affine_grid`` + ``grid_sample``
(-> ``affine``) and torchvision's ``roi_align`` through a composite op (-> ``crop_resize``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlbench.backends.coreml.emulate import emulate_package, load_program
from tests.emulate_helpers import eager, export, max_rel

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # one real conversion each: ~10-20 s under load


def _check(tmp_path, model: nn.Module, inputs: list[torch.Tensor], op: str) -> None:
    names = [f"in{i}" for i in range(len(inputs))]
    package = export(model.eval(), inputs, names, tmp_path)
    assert op in load_program(package).op_types()
    outputs = emulate_package(package, {n: x.numpy() for n, x in zip(names, inputs)})
    assert max_rel(eager(model, inputs), list(outputs.values())) <= 1e-5


class Nearest(nn.Module):
    def __init__(self, scales: tuple[float, float]):
        super().__init__()
        self.scales = scales

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scales, mode="nearest")


class GridSample(nn.Module):
    def __init__(self, mode: str, padding: str, align: bool):
        super().__init__()
        self.mode, self.padding, self.align = mode, padding, align

    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode=self.mode, padding_mode=self.padding, align_corners=self.align)


class AffineWarp(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("theta", torch.tensor([[[0.9, -0.3, 0.1], [0.2, 1.1, -0.2]]]))

    def forward(self, x):
        grid = F.affine_grid(self.theta, [1, 3, 6, 5], align_corners=True)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)


def test_fractional_nearest_interpolate(tmp_path):
    _check(tmp_path, Nearest((1.5, 2.5)), [torch.randn(1, 2, 6, 4)], "upsample_nearest_neighbor")


def test_fractional_nearest_where_core_ml_and_torch_read_different_pixels(tmp_path):
    """5 columns at scale 1.7 make 8: torch reads floor(i / 1.7) (column 2 for output 5), Core ML
    floor(i * 5 / 8) (column 3), as its own op test of upsample_nearest_neighbor says. The two agree
    whenever the input size times the scale is whole; here the export really differs from eager, and
    the emulated verification reports it rather than hiding it."""
    x = torch.arange(5.0).reshape(1, 1, 1, 5)
    package = export(Nearest((1.0, 1.7)).eval(), [x], ["in0"], tmp_path)
    got = emulate_package(package, {"in0": x.numpy()})
    assert next(iter(got.values())).flatten().tolist() == [0, 0, 1, 1, 2, 3, 3, 4]
    assert eager(Nearest((1.0, 1.7)), [x])[0].flatten().tolist() == [0, 0, 1, 1, 2, 2, 3, 4]


@pytest.mark.parametrize("mode, padding, align", [("bilinear", "zeros", False), ("nearest", "border", True),
                                                  ("bilinear", "reflection", False)])
def test_grid_sample(tmp_path, mode, padding, align):
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(1, 3, 6, 7, generator=g), torch.rand(1, 5, 4, 2, generator=g) * 2.4 - 1.2]
    _check(tmp_path, GridSample(mode, padding, align), inputs, "resample")


def test_affine_grid_then_grid_sample(tmp_path):
    _check(tmp_path, AffineWarp(), [torch.randn(1, 3, 8, 8)], "affine")


def test_roi_align_through_a_crop_resize_composite(tmp_path):
    """torchvision's roi_align has no coremltools converter; the documented way is a composite op. With
    aligned=True and sampling_ratio s, bin samples fall on an even grid of out * s points per axis, half a
    step in from the box's edges: crop_resize with ALIGN_CORNERS on that inner box, then an s x s avg_pool."""
    torchvision = pytest.importorskip("torchvision")
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch.ops import _get_inputs
    from coremltools.converters.mil.frontend.torch.torch_op_registry import register_torch_op

    out_size, ratio, scale = 3, 2, 0.5

    @register_torch_op(torch_alias=["torchvision::roi_align"], override=True)
    def roi_align(context, node):
        x, rois = _get_inputs(context, node)[:2]
        boxes = rois.val  # [K, 5]: image index, x1, y1, x2, y2 (constant here)
        n = out_size * ratio
        x1, y1, x2, y2 = (boxes[:, i] * scale - 0.5 for i in range(1, 5))
        half_w, half_h = (x2 - x1) / (2 * n), (y2 - y1) / (2 * n)
        inner = torch.tensor([[b, a, d, c] for a, b, c, d in zip(x1 + half_w, y1 + half_h, x2 - half_w, y2 - half_h)])
        crops = mb.crop_resize(x=x, roi=inner.numpy().reshape(-1, 1, 4, 1, 1).astype("float32"), target_height=n,
                               target_width=n, normalized_coordinates=False, box_coordinate_mode="CORNERS_HEIGHT_FIRST",
                               sampling_mode="ALIGN_CORNERS")
        crops = mb.squeeze(x=crops, axes=[1])  # one image: [K, C, n, n]
        context.add(mb.avg_pool(x=crops, kernel_sizes=[ratio, ratio], strides=[ratio, ratio], pad_type="valid",
                                name=node.name))

    class RoiAlign(nn.Module):
        def forward(self, x):
            boxes = torch.tensor([[0.0, 2.0, 3.0, 11.0, 9.0], [0.0, 5.0, 1.0, 13.0, 14.0]])
            return torchvision.ops.roi_align(x, boxes, output_size=out_size, spatial_scale=scale,
                                             sampling_ratio=ratio, aligned=True)

    _check(tmp_path, RoiAlign(), [torch.randn(1, 4, 8, 8)], "crop_resize")
