"""Verification: every output, absolute and relative to max(scale, 1)."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench.verify import OutputMismatch, compare_outputs, compare_samples


def test_relative_error_uses_scale_floor_of_one():
    reference = [("big", np.array([100.0, -200.0])), ("small", np.array([0.001, 0.002]))]
    actual = [np.array([101.0, -200.0]), np.array([0.011, 0.002])]
    result = compare_outputs(reference, actual, tolerance=1e-2, reference_name="ref")
    big, small = result.outputs
    assert big.max_abs == pytest.approx(1.0) and big.max_rel == pytest.approx(1.0 / 200)
    assert small.max_abs == pytest.approx(0.01) and small.max_rel == pytest.approx(0.01)
    assert result.max_rel == pytest.approx(0.01) and result.max_abs == pytest.approx(1.0)
    assert result.passed


def test_over_tolerance_fails():
    result = compare_outputs([("y", np.zeros(3))], [np.array([0, 0.5, 0])], tolerance=0.1, reference_name="ref")
    assert not result.passed and result.max_rel == 0.5


def test_nan_is_an_infinite_error():
    result = compare_outputs([("y", np.ones(2))], [np.array([1.0, np.nan])], tolerance=1.0, reference_name="ref")
    assert result.max_abs == float("inf") and not result.passed


def test_mismatched_outputs():
    with pytest.raises(OutputMismatch, match="expected 1 outputs, got 2"):
        compare_outputs([("y", np.ones(2))], [np.ones(2), np.ones(2)], tolerance=1, reference_name="r")
    with pytest.raises(OutputMismatch, match=r"output 'y' has shape \[3\], expected \[2\]"):
        compare_outputs([("y", np.ones(2))], [np.ones(3)], tolerance=1, reference_name="r")


def test_all_zero_reference_is_called_uninformative():
    result = compare_outputs([("y", np.zeros(4))], [np.full(4, 1e-9)], tolerance=1e-4, reference_name="r")
    assert result.passed and result.note.startswith("the reference outputs are all ≈ 0 (largest |value| 0)")
    informative = compare_outputs([("y", np.ones(4))], [np.ones(4)], tolerance=1e-4, reference_name="r")
    assert informative.note is None


def test_several_samples_keep_the_worst_error_snr_and_top1_agreement():
    scores = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]])
    first = ([("scores", scores)], [scores + 0.01])  # both rows keep their arg-max
    flipped = np.array([[0.9, 1.0, 0.0], [0.0, 1.0, 2.0]])  # row 0's arg-max moves
    second = ([("scores", scores)], [flipped])
    result = compare_samples([first, second], tolerance=2.0, reference_name="ref", source="emulated", method="how")
    assert result.samples == 2 and result.source == "emulated" and result.method == "how"
    assert result.max_abs == pytest.approx(1.1) and result.max_rel == pytest.approx(1.1 / 2.0)
    signal = float(np.sum(scores**2))  # 10
    assert result.snr_db == pytest.approx(10 * np.log10(signal / 1.1**2))  # the worse sample's noise
    assert result.top1_agreement == pytest.approx((1.0 + 0.5) / 2)  # mean over samples of the share of rows


def test_identical_outputs_have_no_snr_and_vectors_no_top1():
    pair = ([("v", np.array([1.0, 2.0, 3.0]))], [np.array([1.0, 2.0, 3.0])])
    result = compare_samples([pair], tolerance=0.0, reference_name="ref")
    assert result.snr_db is None and result.top1_agreement is None and result.passed
