"""Kernels fixed by running coremltools' own MIL op tests through the interpreter (issue 38).

Each expected value is computed by hand (numpy, float64) from the op's definition as coremltools'
reference implementation in its op tests states it.
"""

from __future__ import annotations

import numpy as np
import torch

from mlbench.backends.coreml.emulate.registry import KERNELS


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def test_gru_applies_the_reset_gate_to_h_before_the_recurrent_matmul():
    hidden, x_t, h0 = 2, np.array([[[0.5]]]), np.array([[0.3, -0.7]])
    w_ih = np.array([[0.2], [-0.4], [0.6], [0.1], [0.9], [-0.3]])  # r, o, z rows
    w_hh = np.array([[0.5, -0.2], [0.3, 0.8], [-0.6, 0.4], [0.7, -0.5], [0.2, 0.1], [-0.4, 0.6]])
    xr, xo, xz = np.split(w_ih @ x_t[0, 0], 3)
    wr, wo, wz = np.split(w_hh, 3)
    r = _sigmoid(xr + wr @ h0[0])
    z = _sigmoid(xz + wz @ h0[0])
    o = np.tanh(xo + wo @ (r * h0[0]))
    expected = (1 - z) * o + z * h0[0]
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    _seq, h = KERNELS["gru"].fn(x=t(x_t), initial_h=t(h0), weight_ih=t(w_ih), weight_hh=t(w_hh))
    assert h.shape == (1, hidden)
    np.testing.assert_allclose(h.numpy()[0], expected, atol=1e-6)
    wrong = np.tanh(xo + r * (wo @ h0[0]))  # the old reading
    assert np.max(np.abs(expected - ((1 - z) * wrong + z * h0[0]))) > 1e-3


def test_lstm_clip_bounds_the_cell_state_not_the_cell_gate():
    # one step, one unit: all gates' pre-activations come from x only (w_hh = 0).
    x = torch.tensor([[[1.0]]])
    w_ih = torch.tensor([[10.0], [10.0], [10.0], [10.0]])  # i, f, o, z ~ saturated
    w_hh = torch.zeros(4, 1)
    c0 = torch.tensor([[5.0]])
    _out, h, c = KERNELS["lstm"].fn(x=x, initial_h=torch.zeros(1, 1), initial_c=c0, weight_ih=w_ih,
                                    weight_hh=w_hh, clip=torch.tensor(2.0))
    i = f = o = _sigmoid(10.0)
    z = np.tanh(10.0)
    c_expected = min(f * 5.0 + i * z, 2.0)  # ~6.0 clipped to 2.0
    assert abs(float(c) - c_expected) < 1e-6
    assert abs(float(h) - o * np.tanh(c_expected)) < 1e-6


def test_flatten2d_axis_equal_to_rank_gives_a_trailing_one():
    x = torch.arange(24.0).reshape(2, 3, 4)
    assert KERNELS["flatten2d"].fn(x=x, axis=torch.tensor(3)).shape == (24, 1)
    assert KERNELS["flatten2d"].fn(x=x, axis=torch.tensor(-1)).shape == (6, 4)
    assert KERNELS["flatten2d"].fn(x=x, axis=torch.tensor(0)).shape == (1, 24)


def test_reshape_like_takes_end_masks_as_a_list():
    x = torch.arange(6.0)
    refs = [torch.zeros(2, 5), torch.zeros(7, 3)]
    out = KERNELS["reshape_like"].fn(x=x, ref_tensors=refs, begins=[0, 1], ends=[1, 2], end_masks=[False, True])
    assert out.shape == (2, 3)


def test_topk_without_indices_returns_the_values_only():
    out = KERNELS["topk"].fn(x=torch.tensor([3.0, 1.0, 2.0]), k=torch.tensor(2), return_indices=False)
    assert isinstance(out, torch.Tensor)
    assert out.tolist() == [3.0, 2.0]


def test_list_gather_reads_unwritten_slots_as_zeros():
    ls = KERNELS["make_list"].fn(init_length=torch.tensor(1), elem_shape=None)
    ls = KERNELS["list_write"].fn(ls=ls, index=torch.tensor(2), value=torch.tensor([1.0, 2.0]))
    out = KERNELS["list_gather"].fn(ls=ls, indices=torch.tensor([0, 1, 2]))
    assert out.tolist() == [[0.0, 0.0], [0.0, 0.0], [1.0, 2.0]]


def test_reshape_zero_entries_align_from_the_right_when_the_rank_changes():
    # coremltools ops/defs/iOS17/tensor_transformation.py reshape: x [2, 50], shape [1, 0, -1, 0] -> [1, 1, 2, 50]
    x = torch.zeros(2, 50)
    assert KERNELS["reshape"].fn(x=x, shape=torch.tensor([1, 0, -1, 0])).shape == (1, 1, 2, 50)
    assert KERNELS["reshape"].fn(x=torch.zeros(2, 3, 4), shape=torch.tensor([0, -1])).shape == (3, 8)
    assert KERNELS["reshape"].fn(x=torch.zeros(2, 3, 4), shape=torch.tensor([0, 0, -1])).shape == (2, 3, 4)


def test_upsample_nearest_neighbor_fractional_scale_maps_by_the_sizes():
    # coremltools' iOS15 op test: a 3-pixel row at width scale 1.12 -> 3 pixels reading 0, 1, 2
    # (floor(i * 3 / 3)); floor(i / 1.12) would read 0, 0, 1 (off by 6.0 on the last pixel).
    x = torch.tensor([1.5, -2.5, 3.5]).reshape(1, 1, 1, 3)
    up = KERNELS["upsample_nearest_neighbor"].fn
    assert up(x=x, scale_factor_height=torch.tensor(2.0), scale_factor_width=torch.tensor(1.12)).flatten().tolist() \
        == [1.5, -2.5, 3.5, 1.5, -2.5, 3.5]
    assert up(x=x, scale_factor_height=torch.tensor(3.17), scale_factor_width=torch.tensor(0.67)).flatten().tolist() \
        == [1.5, -2.5] * 3  # 3 // 2: sources 0 and floor(1 * 3 / 2) = 1


def test_local_response_norm_normalizes_across_axis_minus_3_whatever_the_rank():
    # coremltools' op test: x [1, 3, 2], size 2 -- axis -3 has one element, so each is divided by
    # (k + alpha / size * x**2) ** beta of itself alone (torch's would mix channels 0..2 of axis 1).
    x = np.array([[[1.0, -7.0], [5.0, -6.0], [-3.0, -5.0]]])
    expected = x / (1.0 + 1e-4 / 2 * x**2) ** 0.75
    got = KERNELS["local_response_norm"].fn(x=torch.tensor(x, dtype=torch.float32), size=2)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(expected[0, 1, 1], -5.99191284, rtol=1e-7)  # the op test's expected value
    # rank 4 [N, C, H, W]: across C, a window of `size` channels (size 3: c-1..c+1)
    x4 = np.arange(1.0, 13.0).reshape(1, 3, 2, 2)
    sums = np.stack([x4[0, 0] ** 2 + x4[0, 1] ** 2, x4[0, 0] ** 2 + x4[0, 1] ** 2 + x4[0, 2] ** 2,
                     x4[0, 1] ** 2 + x4[0, 2] ** 2])[None]
    expected4 = x4 / (2.0 + 0.01 / 3 * sums) ** 0.5
    got4 = KERNELS["local_response_norm"].fn(x=torch.tensor(x4, dtype=torch.float32), size=3, alpha=0.01, beta=0.5,
                                             k=2.0)
    np.testing.assert_allclose(got4.numpy(), expected4, rtol=1e-6)


def test_a_scalar_fed_to_an_input_declared_as_shape_1_is_taken(tmp_path):
    # coremltools declares a rank-0 placeholder as shape [1]; its op tests (one_hot, range_1d) feed scalars
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    from mlbench.backends.coreml.emulate import Emulator, load_program

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.mul(x=x, y=np.float32(2.0))

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS15)
    model.save(str(tmp_path / "m.mlpackage"))
    emulator = Emulator(load_program(tmp_path / "m.mlpackage"))
    (name,) = emulator.program.input_names
    out = next(iter(emulator.run({name: np.float32(3.0)}).values()))
    assert out.tolist() == [6.0]


def test_scatter_out_of_range_is_refused_when_validated_and_dropped_when_not():
    import pytest

    from mlbench.backends.coreml.emulate.registry import KernelError

    data = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    updates = torch.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]])
    with pytest.raises(KernelError, match="out of bounds"):  # Core ML refuses the prediction
        KERNELS["scatter"].fn(data=data, indices=torch.tensor([10, 0]), updates=updates, validate_indices=True)
    # undefined without validation: the out-of-range row's update goes nowhere, row 0 takes [8, 9, 10]
    out = KERNELS["scatter"].fn(data=data, indices=torch.tensor([10, 0]), updates=updates, validate_indices=False)
    assert out.tolist() == [[8.0, 9.0, 10.0], [4.0, 5.0, 6.0]]
    # a negative index within [-size, 0) wraps, as MIL allows
    out = KERNELS["scatter"].fn(data=data, indices=torch.tensor([-1, 0]), updates=updates, mode="add")
    assert out.tolist() == [[9.0, 11.0, 13.0], [9.0, 11.0, 13.0]]


def test_a_reverse_recurrence_returns_its_outputs_in_the_order_computed():
    # rnn, one unit, identity weights, no bias: h_t = tanh(x_t + h_{t-1}); reverse reads x[1] first
    x, h0 = np.array([[[0.5]], [[-0.2]]]), np.array([[0.1]])
    first = np.tanh(-0.2 + 0.1)
    second = np.tanh(0.5 + first)
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    seq, h = KERNELS["rnn"].fn(x=t(x), initial_h=t(h0), weight_ih=t([[1.0]]), weight_hh=t([[1.0]]),
                               direction="reverse", output_sequence=True)
    np.testing.assert_allclose(seq.flatten().numpy(), [first, second], rtol=1e-6)  # not [second, first]
    np.testing.assert_allclose(h.flatten().numpy(), [second], rtol=1e-6)
    seq, _h = KERNELS["gru"].fn(x=t(x), initial_h=t(h0), weight_ih=t(np.zeros((3, 1))), weight_hh=t(np.zeros((3, 1))),
                                direction="reverse", output_sequence=True)
    z = 0.5  # all pre-activations 0: r = z = 0.5, o = 0, h_t = 0.5 * h_{t-1}
    np.testing.assert_allclose(seq.flatten().numpy(), [0.1 * z, 0.1 * z * z], rtol=1e-6)


def test_ios17_linear_and_matmul_take_an_int32_weight_with_a_float_input():
    """iOS17 lets linear's weight and bias, and matmul's y, be int32 beside a float x (and the reverse): the
    product is computed in the wider type (coremltools' iOS17 test_linear.py mixed-precision tests crashed)."""
    x = torch.tensor([[1.5, -2.0]])
    weight = torch.tensor([[3, 1], [0, -2], [4, 5]], dtype=torch.int32)
    bias = torch.tensor([1, 2, 3], dtype=torch.int32)
    expected = np.array([[1.5 * 3 - 2.0 + 1, 4.0 + 2, 1.5 * 4 - 10.0 + 3]])  # x @ weight.T + bias, by hand
    np.testing.assert_allclose(KERNELS["linear"].fn(x=x, weight=weight, bias=bias).numpy(), expected)
    y = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    np.testing.assert_allclose(KERNELS["matmul"].fn(x=x, y=y).numpy(), [[1.5 * 2 - 2.0, -6.0]])
    ints = torch.tensor([[1, 2]], dtype=torch.int32)
    np.testing.assert_allclose(KERNELS["matmul"].fn(x=ints, y=torch.tensor([[0.5], [0.25]])).numpy(), [[1.0]])
