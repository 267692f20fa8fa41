"""Kernels for ops the torch frontend emits that the interpreter lacked (issue 38): each against values
computed by hand from coremltools' op definition, and coremltools' own op-test expectations."""

from __future__ import annotations

import numpy as np
import torch

from mlbench.backends.coreml.emulate.registry import KERNELS

IMAGE = torch.tensor([11.0, 22.0, 33.0, 44.0]).reshape(1, 1, 2, 2)
POINTS = torch.tensor([-1.0, -2.0, -3.7, -1.0, 0.0, 0.0, 3.5, 1.2]).reshape(1, 2, 2, 2)  # (x, y) pairs


def _resample(**options):
    return KERNELS["resample"].fn(x=IMAGE, coordinates=POINTS, **options).flatten().tolist()


def test_resample_pads_each_corner_by_its_padding_mode():
    # constant: (x, y) = (-1, -2) in [-1, 1] with aligned corners is pixel (0, -0.5): half row 0, half padding
    got = _resample(sampling_mode="bilinear", padding_mode="constant", padding_value=6.17,
                    coordinates_mode="normalized_minus_one_to_one", align_corners=True)
    np.testing.assert_allclose(got, [(11 + 6.17) / 2, 6.17, (11 + 22 + 33 + 44) / 4, 6.17], rtol=1e-6)
    # border + nearest, unnormalized: clamped to the image, then rounded half up: (3.5, 1.2) -> (1, 1)
    got = _resample(sampling_mode="nearest", padding_mode="border", padding_value=-1.0,
                    coordinates_mode="unnormalized", align_corners=False)
    assert got == [11.0, 11.0, 11.0, 44.0]
    # reflection about the edge pixels (period 2 on 2 pixels): x = -3.7 -> 0.3, y = -1 -> 1: 33 + 0.3 * 11
    got = _resample(sampling_mode="bilinear", padding_mode="reflection", padding_value=-1.0,
                    coordinates_mode="normalized_zero_to_one", align_corners=True)
    np.testing.assert_allclose(got, [22.0, 33 + 0.3 * 11, 11.0, 0.2 * 16.5 + 0.8 * 38.5], rtol=1e-6)
    # symmetric repeats the edge (period 4): pixel x = 2 * 3.5 - 0.5 = 6.5 rounds to 7 -> column 0
    got = _resample(sampling_mode="nearest", padding_mode="symmetric", padding_value=-1.0,
                    coordinates_mode="normalized_zero_to_one", align_corners=False)
    assert got == [22.0, 33.0, 11.0, 33.0]


def test_resample_matches_torch_grid_sample_as_the_frontend_maps_it():
    g = torch.Generator().manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 7, generator=g), torch.rand(2, 4, 6, 2, generator=g) * 2.6 - 1.3
    for mode, padding, align in [("bilinear", "zeros", False), ("bilinear", "border", True),
                                 ("nearest", "zeros", True), ("bilinear", "reflection", True),
                                 ("bilinear", "reflection", False)]:
        expected = torch.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
        core_ml = {"zeros": "constant", "border": "border"}.get(padding, "reflection" if align else "symmetric")
        got = KERNELS["resample"].fn(x=x, coordinates=grid, sampling_mode=mode, padding_mode=core_ml,
                                     padding_value=0.0, coordinates_mode="normalized_minus_one_to_one",
                                     align_corners=align)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-5, err_msg=f"{mode} {padding} {align}")


def test_affine_samples_the_transformed_output_grid():
    matrix = torch.tensor([[-1.0, -2.0, -3.7, -1.0, 3.5, 1.2]])
    got = KERNELS["affine"].fn(x=IMAGE, transform_matrix=matrix, output_height=3, output_width=3,
                               sampling_mode="bilinear", padding_mode="constant", padding_value=0.0,
                               coordinates_mode="normalized_minus_one_to_one", align_corners=True)
    # output (0, 0) is grid (-1, -1): x' = 1 + 2 - 3.7 = -0.7, y' = 1 - 3.5 + 1.2 = -1.3 -> pixel (0.15, -0.15)
    corner = 0.85 * (0.85 * 11 + 0.15 * 22)  # row -1 is padding (0)
    np.testing.assert_allclose(got[0, 0, 0, 0].item(), corner, rtol=1e-6)
    np.testing.assert_allclose(got.flatten().tolist(), [10.752501, 2.5025, 0, 1.9799997, 0, 0, 0, 0, 0], atol=1e-5)


def test_crop_resize_samples_each_box_and_pads_points_outside_the_image():
    x = torch.arange(1.0, 17.0).reshape(1, 1, 4, 4)  # x[r, c] = 4 r + c + 1
    boxes = torch.tensor([[0.1, 0.3, 1.3, 1.0], [0.0, 0.4, 0.6, 0.7]])  # normalized: times 3 for pixels
    got = KERNELS["crop_resize"].fn(x=x, boxes=boxes, box_indices=torch.tensor([0, 0]), target_height=2,
                                    target_width=2, normalized_coordinates=True, sampling_mode="ALIGN_CORNERS",
                                    pad_value=10.0)
    # box 0: rows 0.3 and 3.9 (outside: 10), columns 0.9 and 3.0; box 1: rows 0 and 1.8, columns 1.2 and 2.1
    expected = [[4 * 0.3 + 0.9 + 1, 4 * 0.3 + 3.0 + 1, 10, 10], [1 + 1.2, 1 + 2.1, 4 * 1.8 + 1.2 + 1, 4 * 1.8 + 2.1 + 1]]
    assert got.shape == (2, 1, 2, 2)
    np.testing.assert_allclose(got.reshape(2, 4).numpy(), expected, rtol=1e-6)
    # iOS 15 roi [N, 1, 4, 1, 1]: one crop per image; a single ALIGN_CORNERS sample is the box's centre
    centre = KERNELS["crop_resize"].fn(x=x, roi=torch.tensor([1.0, 1, 2, 2]).reshape(1, 1, 4, 1, 1),
                                       target_height=1, target_width=1, sampling_mode="ALIGN_CORNERS")
    assert centre.shape == (1, 1, 1, 1, 1) and centre.item() == (6 + 7 + 10 + 11) / 4


def test_resize_takes_trailing_sizes_and_rounds_nearest_half_up():
    got = KERNELS["resize"].fn(x=torch.tensor([-6.174, 9.371]).reshape(1, 1, 1, 2, 1), shape=[1, 1, 3, 2],
                               resized_dims=2, interpolation_mode="NEAREST_NEIGHBOR", sampling_mode="DEFAULT")
    # DEFAULT grid i * 2 / 3 = 0, 0.67, 1.33 -> rows 0, 1, 1; one column read twice
    assert got.flatten().tolist() == [np.float32(v) for v in (-6.174, -6.174, 9.371, 9.371, 9.371, 9.371)]
    linear = KERNELS["resize"].fn(x=torch.tensor([0.0, 1.0]).reshape(1, 1, 2), shape=[1, 1, 5], resized_dims=2)
    np.testing.assert_allclose(linear.flatten().tolist(), [0, 0.4, 0.8, 1, 1], atol=1e-7)


def test_space_to_batch_and_back():
    x = torch.arange(1.0, 17.0).reshape(2, 1, 2, 4)
    out = KERNELS["space_to_batch"].fn(x=x, block_shape=[2, 2], paddings=torch.tensor([[0, 0], [2, 0]]))
    # batch (i * 2 + j) * 2 + b holds rows i::2, columns j::2 of image b, after two zero columns on the left
    assert out.reshape(8, 3).tolist() == [[0, 1, 3], [0, 9, 11], [0, 2, 4], [0, 10, 12], [0, 5, 7], [0, 13, 15],
                                          [0, 6, 8], [0, 14, 16]]
    back = KERNELS["batch_to_space"].fn(x=out, block_shape=[2, 2], crops=torch.tensor([[0, 0], [2, 0]]))
    assert torch.equal(back, x)


def test_sliding_windows_and_reverse_sequence():
    windows = KERNELS["sliding_windows"].fn(x=torch.arange(10.0).reshape(2, 5), axis=1, size=3, stride=2)
    assert windows.tolist() == [[[0, 1, 2], [2, 3, 4]], [[5, 6, 7], [7, 8, 9]]]
    reversed_ = KERNELS["reverse_sequence"].fn(x=torch.arange(12.0).reshape(3, 4), lengths=torch.tensor([2, 4, 0]),
                                               seq_axis=1, batch_axis=0)
    assert reversed_.tolist() == [[1, 0, 2, 3], [7, 6, 5, 4], [8, 9, 10, 11]]


def test_random_ops_are_seeded_and_repeatable():
    uniform = KERNELS["random_uniform"].fn
    first, again = uniform(shape=[4], low=2.0, high=3.0), uniform(shape=[4], low=2.0, high=3.0)
    assert torch.equal(first, again) and ((first >= 2) & (first < 3)).all()
    assert not torch.equal(uniform(shape=[4], seed=7), uniform(shape=[4], seed=8))
    assert KERNELS["random_bernoulli"].fn(shape=[2, 3], prob=1.0).sum() == 6
    assert torch.equal(KERNELS["random_normal"].fn(shape=[3], mean=1.5, stddev=0.0), torch.full((3,), 1.5))
    drawn = KERNELS["random_categorical"].fn(x=torch.tensor([[0.0, 1.0, 0.0]]), mode="probs", size=5)
    assert drawn.tolist() == [[1.0] * 5]


def test_non_maximum_suppression_keeps_the_best_boxes_that_overlap_little():
    # (x centre, y centre, w, h): box 1 overlaps box 0 with IoU 81/119 = 0.68; box 2 is apart; box 3 scores low
    boxes = torch.tensor([[[5.0, 5.0, 10.0, 10.0], [6.0, 6.0, 10.0, 10.0], [30.0, 30.0, 4.0, 4.0],
                           [50.0, 50.0, 2.0, 2.0]]])
    scores = torch.tensor([[[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.05, 0.01]]])
    nms = KERNELS["non_maximum_suppression"].fn
    out_boxes, out_scores, indices, valid = nms(boxes=boxes, scores=scores, iou_threshold=0.5, score_threshold=0.1,
                                                max_boxes=4)
    assert indices.tolist() == [[0, 2, -1, -1]] and valid.tolist() == [2]  # 1 suppressed, 3 under the threshold
    assert out_boxes[0, 1].tolist() == [30.0, 30.0, 4.0, 4.0] and out_boxes[0, 2:].abs().sum() == 0
    assert out_scores[0, 0].tolist() == [np.float32(0.9), np.float32(0.1)]
    # an IoU threshold over 0.68 keeps box 1; per class, box 2 (class 1) is judged apart
    _b, _s, indices, valid = nms(boxes=boxes, scores=scores, iou_threshold=0.7, max_boxes=2)
    assert indices.tolist() == [[0, 1]] and valid.tolist() == [2]
    _b, _s, indices, _v = nms(boxes=boxes, scores=scores, iou_threshold=0.5, max_boxes=4, per_class_suppression=True)
    assert indices.tolist() == [[0, 2, 3, -1]]
    # nothing over the score threshold: the best box alone
    _b, _s, indices, valid = nms(boxes=boxes, scores=scores, iou_threshold=0.5, score_threshold=0.95, max_boxes=2)
    assert indices.tolist() == [[0, -1]] and valid.tolist() == [1]
