"""Verification: every output, absolute and relative to max(scale, 1)."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench.verify import OutputMismatch, compare_outputs, compare_samples

OFF = -300.0
"""An SNR floor nothing falls below: the tests of max_rel alone."""


def test_relative_error_uses_scale_floor_of_one():
    reference = [("big", np.array([100.0, -200.0])), ("small", np.array([0.001, 0.002]))]
    actual = [np.array([101.0, -200.0]), np.array([0.011, 0.002])]
    result = compare_outputs(reference, actual, tolerance=1e-2, min_snr_db=OFF, reference_name="ref")
    big, small = result.outputs
    assert big.max_abs == pytest.approx(1.0) and big.max_rel == pytest.approx(1.0 / 200)
    assert small.max_abs == pytest.approx(0.01) and small.max_rel == pytest.approx(0.01)
    assert result.max_rel == pytest.approx(0.01) and result.max_abs == pytest.approx(1.0)
    assert result.passed


def test_over_tolerance_fails():
    result = compare_outputs([("y", np.zeros(3))], [np.array([0, 0.5, 0])], tolerance=0.1, min_snr_db=OFF, reference_name="ref")
    assert not result.passed and result.max_rel == 0.5


def test_nan_is_an_infinite_error():
    result = compare_outputs([("y", np.ones(2))], [np.array([1.0, np.nan])], tolerance=1.0, min_snr_db=OFF, reference_name="ref")
    assert result.max_abs == float("inf") and not result.passed


def test_mismatched_outputs():
    with pytest.raises(OutputMismatch, match="expected 1 outputs, got 2"):
        compare_outputs([("y", np.ones(2))], [np.ones(2), np.ones(2)], tolerance=1, min_snr_db=OFF, reference_name="r")
    with pytest.raises(OutputMismatch, match=r"output 'y' has shape \[3\], expected \[2\]"):
        compare_outputs([("y", np.ones(2))], [np.ones(3)], tolerance=1, min_snr_db=OFF, reference_name="r")


def test_an_all_zero_reference_is_called_uncheckable_and_judged_by_max_rel_alone():
    result = compare_outputs([("y", np.zeros(4))], [np.full(4, 1e-9)], tolerance=1e-4, min_snr_db=60.0,
                             reference_name="r")
    assert result.snr_db == float("-inf")  # reported: no signal, only noise; but not judged (there is nothing to judge)
    assert result.passed and result.failures == []
    assert result.note == ("the reference outputs are all 0: neither max_rel nor SNR can tell a wrong export from a "
                           "right one; random weights often do this (see pipelines/models/random_weights.py)")
    informative = compare_outputs([("y", np.ones(4))], [np.ones(4)], tolerance=1e-4, min_snr_db=60.0,
                                  reference_name="r")
    assert informative.note is None and informative.passed


def test_several_samples_keep_the_worst_error_snr_and_top1_agreement():
    scores = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]])
    first = ([("scores", scores)], [scores + 0.01])  # both rows keep their arg-max
    flipped = np.array([[0.9, 1.0, 0.0], [0.0, 1.0, 2.0]])  # row 0's arg-max moves
    second = ([("scores", scores)], [flipped])
    result = compare_samples([first, second], tolerance=2.0, min_snr_db=OFF, reference_name="ref", source="emulated", method="how")
    assert result.samples == 2 and result.source == "emulated" and result.method == "how"
    assert result.max_abs == pytest.approx(1.1) and result.max_rel == pytest.approx(1.1 / 2.0)
    signal = float(np.sum(scores**2))  # 10
    assert result.snr_db == pytest.approx(10 * np.log10(signal / 1.1**2))  # the worse sample's noise
    assert result.top1_agreement == pytest.approx((1.0 + 0.5) / 2)  # mean over samples of the share of rows


def test_identical_outputs_have_no_snr_and_vectors_no_top1():
    pair = ([("v", np.array([1.0, 2.0, 3.0]))], [np.array([1.0, 2.0, 3.0])])
    result = compare_samples([pair], tolerance=0.0, min_snr_db=OFF, reference_name="ref")
    assert result.snr_db is None and result.top1_agreement is None and result.passed


def test_a_flat_output_of_the_right_size_is_compared_in_the_reference_shape():
    result = compare_outputs([("y", np.array([[1.0, 2.0], [3.0, 4.0]]))], [np.array([1.0, 2.0, 3.0, 5.0])],
                             tolerance=0.5, min_snr_db=OFF, reference_name="torch/cpu/float32")
    (output,) = result.outputs
    assert (output.name, output.shape, output.max_abs, output.max_rel) == ("y", [2, 2], 1.0, 0.25)
    assert (result.reference, result.tolerance, result.passed, result.note) == ("torch/cpu/float32", 0.5, True, None)


def test_an_error_exactly_at_the_tolerance_passes():
    result = compare_outputs([("y", np.array([4.0]))], [np.array([5.0])], tolerance=0.25, min_snr_db=OFF, reference_name="r")
    assert result.max_rel == 0.25 and result.passed
    assert not compare_outputs([("y", np.array([4.0]))], [np.array([5.01])], tolerance=0.25, min_snr_db=OFF, reference_name="r").passed


def test_the_scale_is_the_largest_magnitude_but_never_below_one():
    result = compare_outputs([("half", np.array([0.5, -0.25])), ("two", np.array([-2.0, 1.0]))],
                             [np.array([0.75, -0.25]), np.array([-2.0, 2.0])], tolerance=1.0, min_snr_db=OFF, reference_name="r")
    assert [(e.max_abs, e.max_rel) for e in result.outputs] == [(0.25, 0.25), (1.0, 0.5)]
    assert (result.max_abs, result.max_rel) == (1.0, 0.5)


def test_empty_outputs_count_as_no_error():
    result = compare_outputs([("empty", np.zeros((0, 3))), ("y", np.full(2, 3.0))], [np.zeros((0, 3)), np.full(2, 3.0)],
                             tolerance=1e-6, min_snr_db=60.0, reference_name="r")
    assert [(e.max_abs, e.max_rel, e.shape) for e in result.outputs] == [(0.0, 0.0, [0, 3]), (0.0, 0.0, [2])]
    assert result.passed and result.note is None  # the largest value is over the non-empty outputs


def test_the_weak_note_gives_the_largest_reference_value_the_snr_and_its_floor():
    tiny = compare_outputs([("a", np.array([1e-7])), ("b", np.array([-5e-7]))], [np.zeros(1), np.zeros(1)],
                           tolerance=1e-4, min_snr_db=OFF, reference_name="r")
    assert tiny.note == ("outputs are at most 5e-07: relative error over max(scale, 1) cannot see a wrong export; "
                         "SNR 0.0 dB (floor -300 dB)")
    exact = compare_outputs([("a", np.array([1e-4]))], [np.array([1e-4])], tolerance=1e-4, min_snr_db=60.0,
                            reference_name="r")
    assert exact.note == ("outputs are at most 0.0001: relative error over max(scale, 1) cannot see a wrong export; "
                          "SNR exact (floor 60 dB)") and exact.passed
    above = compare_outputs([("a", np.array([1.01e-4]))], [np.array([1.01e-4])], tolerance=1e-4, min_snr_db=60.0,
                            reference_name="r")
    assert above.note is None  # an all-zero export would be 1.01e-4 off: max_rel sees it
    none = compare_outputs([], [], tolerance=1e-4, min_snr_db=60.0, reference_name="r")
    assert (none.max_abs, none.max_rel, none.passed, none.outputs) == (0.0, 0.0, True, [])
    assert none.note == "there are no non-empty outputs: nothing was compared"


def test_only_the_outputs_max_rel_cannot_see_are_named_weak():
    reference = [("logits", np.array([3.0, -1.0])), ("box", np.array([2e-5, -1e-5])), ("conf", np.array([4e-5]))]
    result = compare_outputs(reference, [np.array([3.0, -1.0]), np.array([2e-5, -1e-5]), np.array([4e-5])],
                             tolerance=1e-3, min_snr_db=30.0, reference_name="r")
    assert result.note == ("outputs 'box', 'conf' are at most 4e-05: relative error over max(scale, 1) cannot see a "
                           "wrong export; SNR exact (floor 30 dB)")
    silent = compare_outputs([("y", np.array([1e-5, 2e-5])), ("mask", np.zeros(2))], [np.zeros(2), np.zeros(2)],
                             tolerance=1e-3, min_snr_db=30.0, reference_name="r")
    assert silent.note == ("output 'y' is at most 2e-05: relative error over max(scale, 1) cannot see a wrong export; "
                           "SNR 0.0 dB (floor 30 dB); 'mask' all 0 in the reference: nothing can check it")
    assert silent.failures == ["output 'y' SNR 0.0 dB is below the floor 30 dB"] and not silent.passed


def test_an_all_zero_export_of_a_small_output_model_fails_on_its_snr():
    """Issue 23: outputs of |y| ≤ 1e-4 made any export pass max_rel, an all-zero one too."""
    reference = np.random.default_rng(0).normal(0, 1e-5, 20)
    zeros = compare_outputs([("y", reference)], [np.zeros(20)], tolerance=1e-4, min_snr_db=60.0,
                            reference_name="r")
    largest = float(np.max(np.abs(reference)))
    assert zeros.max_rel == pytest.approx(largest) and zeros.max_rel < zeros.tolerance  # max_rel alone: passed
    assert zeros.snr_db == pytest.approx(0.0) and not zeros.passed
    assert zeros.failures == ["output 'y' SNR 0.0 dB is below the floor 60 dB"]
    assert zeros.note == (f"outputs are at most {largest:.2g}: relative error over max(scale, 1) cannot see a wrong "
                          "export; SNR 0.0 dB (floor 60 dB)")
    assert zeros.why_failed() == "output 'y' SNR 0.0 dB is below the floor 60 dB"
    rounded = compare_outputs([("y", reference)], [reference.astype(np.float16)], tolerance=1e-2, min_snr_db=30.0,
                              reference_name="r")
    assert rounded.passed and 40 < rounded.snr_db < 80  # float16 (subnormal here) is still far above its floor
    assert rounded.note.startswith("outputs are at most") and rounded.failures == []
    flipped = reference.copy()
    flipped[3] = -flipped[3]  # a sign bit flipped: one of 20 values
    one_bit = compare_outputs([("y", reference)], [flipped], tolerance=1e-4, min_snr_db=60.0, reference_name="r")
    assert one_bit.max_rel < 1e-4 and not one_bit.passed and one_bit.snr_db < 30


def test_every_broken_check_is_listed_and_the_record_line_names_the_source():
    result = compare_samples([([("y", np.array([[2.0, 1.0]]))], [np.array([[0.0, 1.0]])])], tolerance=0.1,
                             min_snr_db=30.0, reference_name="r", source="emulated")
    assert result.failures == ["max_rel 1 exceeds the tolerance 0.1",
                               "output 'y' SNR 1.0 dB is below the floor 30 dB",
                               "output 'y' top-1 class moved in 1 of 1 rows where the reference's margin is over 6× "
                               "the noise 30 dB allows"]
    assert result.why_failed() == "; ".join(result.failures) + " (emulated)"
    assert result.min_snr_db == 30.0 and result.tolerance == 0.1


def test_nan_anywhere_in_an_output_makes_it_infinitely_wrong():
    result = compare_outputs([("y", np.array([1.0, 2.0, 3.0]))], [np.array([np.nan, 2.0, 30.0])], tolerance=1e9, min_snr_db=OFF,
                             reference_name="r")
    assert result.outputs[0].max_abs == float("inf") and result.max_rel == float("inf") and not result.passed


def test_integer_and_half_precision_outputs_are_compared_without_wrapping_or_overflow():
    """uint8 0 - 1 wraps to 255 and float16 65504 - (-65504) overflows to inf unless the difference is
    taken in float64."""
    result = compare_outputs([("mask", np.array([1, 200], dtype=np.uint8)), ("half", np.array([65504.0], np.float16))],
                             [np.array([0, 200], dtype=np.uint8), np.array([-65504.0], np.float16)], tolerance=1.0, min_snr_db=OFF,
                             reference_name="r")
    assert [e.max_abs for e in result.outputs] == [1.0, 131008.0]
    assert [e.max_rel for e in result.outputs] == [1 / 200, 2.0]


def test_the_scale_of_a_signed_integer_output_includes_its_most_negative_value():
    """abs() of int8 -128 is -128 in int8: the scale must be taken in float64."""
    result = compare_outputs([("q", np.array([-128, 0], dtype=np.int8))], [np.array([-128, 64], dtype=np.int8)],
                             tolerance=1.0, min_snr_db=OFF, reference_name="r")
    assert (result.outputs[0].max_abs, result.outputs[0].max_rel) == (64.0, 0.5)


def test_snr_of_integer_outputs_is_taken_in_float64():
    result = compare_samples([([("mask", np.array([200, 0], dtype=np.uint8))], [np.array([100, 0], dtype=np.uint8)])],
                             tolerance=1.0, min_snr_db=OFF, reference_name="r")
    assert result.snr_db == pytest.approx(10 * np.log10(200**2 / 100**2))  # uint8 would wrap 200² to 64


def test_snr_of_a_broken_or_silent_output_is_minus_infinity_and_of_a_small_one_finite():
    nan = compare_samples([([("y", np.ones(2))], [np.array([1.0, np.nan])])], tolerance=1.0, min_snr_db=OFF,
                          reference_name="r")
    assert nan.snr_db == float("-inf") and "output 'y' SNR -inf dB is below the floor -300 dB" in nan.failures
    silent = compare_samples([([("y", np.zeros(2))], [np.array([0.0, 0.1])])], tolerance=1.0, min_snr_db=OFF,
                             reference_name="r")
    assert silent.snr_db == float("-inf")  # no signal at all, only noise
    small = compare_samples([([("y", np.array([0.5, 0.0]))], [np.array([0.4, 0.0])])], tolerance=1.0,
                            min_snr_db=13.9, reference_name="r")
    assert small.snr_db == pytest.approx(10 * np.log10(0.25 / 0.01)) and small.passed  # 13.98 dB
    assert not compare_samples([([("y", np.array([0.5, 0.0]))], [np.array([0.4, 0.0])])], tolerance=1.0,
                               min_snr_db=14.0, reference_name="r").passed


def test_top1_reads_rows_of_class_scores_of_any_batch_and_any_number_of_classes():
    def top1(reference: np.ndarray, actual: np.ndarray) -> float | None:
        return compare_samples([([("p", reference)], [actual])], tolerance=10.0, min_snr_db=OFF, reference_name="r").top1_agreement

    rows = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1]])
    assert top1(rows, rows.ravel()) == 1.0  # a flat output is read in the reference's shape, row by row
    assert top1(rows[:1], rows[:1]) == 1.0  # a batch of one
    assert top1(np.array([[0.2, 0.8], [0.7, 0.3]]), np.array([[0.1, 0.9], [0.4, 0.6]])) == 0.5  # two classes
    assert top1(np.array([[1.0], [2.0]]), np.array([[1.0], [2.0]])) is None  # one class: no arg-max to agree on
    assert top1(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) is None  # not rows of scores


def test_top1_is_the_worst_outputs_mean_over_samples():
    scores = np.array([[1.0, 0.0], [0.0, 1.0]])
    swapped = scores[:, ::-1]
    pairs = [([("a", scores), ("b", scores)], [scores, swapped]),   # a agrees, b does not
             ([("a", scores), ("b", scores)], [scores, scores])]    # both agree
    result = compare_samples(pairs, tolerance=10.0, min_snr_db=OFF, reference_name="r")
    assert result.top1_agreement == 0.5  # b: (0 + 1) / 2; a: 1 — per output, not pooled (0.75)
    assert (result.source, result.samples, result.method) == ("measured", 2, None)


def test_a_sample_where_an_output_has_no_signal_is_not_judged_by_its_snr():
    quiet = ([("y", np.zeros(2))], [np.full(2, 1e-9)])      # no signal in this sample: SNR -inf
    loud = ([("y", np.ones(2))], [np.array([1.0, 1.5])])   # 10·log10(2 / 0.25) = 9.03 dB
    result = compare_samples([quiet, loud], tolerance=0.6, min_snr_db=9.0, reference_name="r")
    assert result.max_rel == 0.5 and result.snr_db == float("-inf") and result.passed and result.note is None
    stricter = compare_samples([quiet, loud], tolerance=0.6, min_snr_db=9.1, reference_name="r")
    assert stricter.failures == ["output 'y' SNR 9.0 dB is below the floor 9.1 dB"]


def test_a_class_decision_moves_the_verdict_only_when_noise_within_the_floor_could_not_have_moved_it():
    rng = np.random.default_rng(1)
    scores = rng.normal(0, 1, (1, 1000))
    top, median = int(np.argmax(scores)), int(np.argsort(scores[0])[500])
    promoted = scores.copy()
    promoted[0, median] = scores[0, top] + 0.1  # one wrong value wins: a localised error, not noise
    moved = compare_samples([([("logits", scores)], [promoted])], tolerance=10.0, min_snr_db=10.0,
                            reference_name="r")
    assert 10 < moved.snr_db < 25 and moved.max_rel < moved.tolerance and moved.top1_agreement == 0.0
    assert moved.failures == ["output 'logits' top-1 class moved in 1 of 1 rows where the reference's margin is "
                              "over 6× the noise 10 dB allows"]
    runner_up = int(np.argsort(scores[0])[-2])
    best = float(scores[0, top])
    tie = scores.copy()
    tie[0, [top, runner_up]] = best, best + 1e-3  # a near tie swapped by a thousandth
    rounded = scores.copy()
    rounded[0, [top, runner_up]] = best + 1e-3, best
    swapped = compare_samples([([("logits", rounded)], [tie])], tolerance=10.0, min_snr_db=30.0, reference_name="r")
    assert swapped.top1_agreement == 0.0 and swapped.passed and swapped.failures == []


def _flip_to(row: np.ndarray, index: int) -> np.ndarray:
    """The row with class `index` made the winner by a hair, its top class and it meeting halfway: the least
    noise that moves the decision (a flip needs an error of at least the margin)."""
    moved = np.array(row, dtype=np.float64)
    top = int(np.argmax(row))
    middle = (float(row[top]) + float(row[index])) / 2
    moved[top], moved[index] = middle, middle + 1e-9
    return moved


def test_a_moved_class_fails_only_past_six_times_the_noise_the_floor_allows():
    peak = np.zeros((1, 36))
    peak[0, 0] = 6.0  # RMS exactly 1: at floor 0 dB the noise allowed is 1 and the bound is a margin of exactly 6
    at_bound = compare_samples([([("p", peak)], [_flip_to(peak[0], 5)[None]])], tolerance=10.0, min_snr_db=0.0,
                               reference_name="r")
    assert at_bound.top1_agreement == 0.0 and at_bound.snr_db > 0 and at_bound.passed  # exactly 6× is not over it
    row = np.random.default_rng(2).uniform(-1.0, 0.5, 200)
    row[0] = 1.0
    for _ in range(6):  # the two margins move the RMS a little: settle them at 0.95 and 1.05 of the bound
        bound = 6 * float(np.sqrt(np.mean(row**2))) * 10 ** (-20 / 20)  # floor 20 dB
        row[1], row[2] = 1.0 - 0.95 * bound, 1.0 - 1.05 * bound
    assert (1.0 - row[1]) / bound == pytest.approx(0.95, abs=1e-6) and (1.0 - row[2]) / bound == pytest.approx(1.05)
    within = compare_samples([([("p", row[None])], [_flip_to(row, 1)[None]])], tolerance=10.0, min_snr_db=20.0,
                             reference_name="r")
    assert within.top1_agreement == 0.0 and within.passed
    past = compare_samples([([("p", row[None])], [_flip_to(row, 2)[None]])], tolerance=10.0, min_snr_db=20.0,
                           reference_name="r")
    assert past.snr_db > 25 and past.failures == [  # the SNR is fine: only the class decision fails it
        "output 'p' top-1 class moved in 1 of 1 rows where the reference's margin is over 6× the noise 20 dB allows"]


def test_each_row_of_class_scores_is_judged_against_its_own_noise_and_moves_add_up_over_samples():
    scores = np.zeros((2, 100))
    scores[0, 0] = 1.0                                   # RMS 0.1: at 20 dB a margin over 0.06 is decisive
    scores[1] = 100.0 - np.arange(100) * 1e-3            # RMS ≈ 100: a margin of 1e-3 is a near tie
    moved = np.stack([_flip_to(scores[0], 1), _flip_to(scores[1], 1)])
    one = ([("p", scores)], [moved])
    result = compare_samples([one, one, ([("p", scores)], [scores])], tolerance=10.0, min_snr_db=20.0,
                             reference_name="r")
    assert result.snr_db > 60 and result.failures == [
        "output 'p' top-1 class moved in 2 of 6 rows where the reference's margin is over 6× the noise 20 dB allows"]
    assert result.top1_agreement == pytest.approx((0.0 + 0.0 + 1.0) / 3)


def test_integer_class_scores_are_judged_in_float64():
    """uint8 squares wrap (200² is 64): the noise allowed would shrink and a near tie would fail."""
    scores = np.array([[200, 198, 0]], dtype=np.uint8)
    swapped = np.array([[198, 200, 0]], dtype=np.uint8)
    result = compare_samples([([("p", scores)], [swapped])], tolerance=1.0, min_snr_db=30.0, reference_name="r")
    assert result.top1_agreement == 0.0 and result.passed
    wrapped = compare_samples([([("q", np.array([-128, 0], dtype=np.int8))], [np.zeros(2, dtype=np.int8)])],
                              tolerance=10.0, min_snr_db=30.0, reference_name="r")
    assert wrapped.failures == ["output 'q' SNR 0.0 dB is below the floor 30 dB"]  # |-128| taken in float64


def test_an_snr_at_the_floor_passes_and_the_worst_sample_counts_in_any_order():
    exact_64 = float(10 * np.log10(64.0))
    at_floor = compare_samples([([("y", np.array([1.0, 0.0]))], [np.array([1.0, 0.125])])], tolerance=1.0,
                               min_snr_db=exact_64, reference_name="r")
    assert at_floor.snr_db == exact_64 and at_floor.passed

    def sample(noise: float):
        return [("y", np.array([1.0, 0.0]))], [np.array([1.0, noise])]  # SNR −20·log10(noise)

    for order in ([0.1, 0.3, 0.1], [0.3, 0.1], [0.1, 0.3]):
        result = compare_samples([sample(n) for n in order], tolerance=1.0, min_snr_db=12.0, reference_name="r")
        assert result.failures == ["output 'y' SNR 10.5 dB is below the floor 12 dB"], order


def test_the_weak_note_reads_the_largest_value_over_samples_and_the_tolerance_against_max_scale_one():
    first = ([("y", np.array([4e-5])), ("z", np.array([1.0]))], [np.array([4e-5]), np.array([1.0])])
    second = ([("y", np.array([1e-5])), ("z", np.array([1.0]))], [np.array([1e-5]), np.array([1.0])])
    result = compare_samples([first, second], tolerance=1e-3, min_snr_db=30.0, reference_name="r")
    assert result.note == ("output 'y' is at most 4e-05: relative error over max(scale, 1) cannot see a wrong export; "
                           "SNR exact (floor 30 dB)")
    loose = compare_outputs([("y", np.array([2.0, 0.0]))], [np.array([2.0, 0.0])], tolerance=1.0, min_snr_db=30.0,
                            reference_name="r")
    assert loose.note is not None and loose.note.startswith("outputs are at most 2: ")  # all zeros: max_rel 2 / 2
    silent = compare_outputs([("a", np.zeros(2)), ("b", np.zeros(2)), ("c", np.ones(2))],
                             [np.zeros(2), np.zeros(2), np.ones(2)], tolerance=1e-3, min_snr_db=30.0,
                             reference_name="r")
    assert silent.note == "'a', 'b' all 0 in the reference: nothing can check them"


def test_a_float16_overflow_is_named_on_the_verification():
    result = compare_samples([([("y", np.array([[75000.0, 1.0]]))], [np.array([[np.inf, 1.0]], dtype=np.float16)])],
                             tolerance=1e-2, min_snr_db=30.0, reference_name="r")
    assert result.overflow == "float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504)"
    assert not result.passed and result.failures[0] == "max_rel inf exceeds the tolerance 0.01"
