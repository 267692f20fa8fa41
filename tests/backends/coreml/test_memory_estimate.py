"""memory.estimated of a Core ML program (mlbench/backends/coreml/memory_estimate.py): weights as stored + the
largest set of live activations in program order, checked against sums made by hand on real packages."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
ct = pytest.importorskip("coremltools")

from mlbench.backends.apple.analysis import analyse_package  # noqa: E402
from mlbench.backends.coreml.memory_estimate import ASSUMPTION, estimate_memory, memory_metrics  # noqa: E402


class Chain(torch.nn.Module):
    """conv 3→16, conv 16→8, conv 8→4 (no bias, 3x3, same padding): every activation's size is known."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.b = torch.nn.Conv2d(16, 8, 3, padding=1, bias=False)
        self.c = torch.nn.Conv2d(8, 4, 3, padding=1, bias=False)

    def forward(self, x):
        return self.c(self.b(self.a(x)))


WEIGHT_ELEMENTS = 16 * 3 * 9 + 8 * 16 * 9 + 4 * 8 * 9


def _convert(tmp_path, name, shape, precision, **kwargs):
    torch.manual_seed(0)
    traced = torch.jit.trace(Chain().eval(), torch.rand(1, 3, 32, 32))
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=shape)], convert_to="mlprogram",
                       compute_precision=precision, **kwargs)
    path = tmp_path / f"{name}.mlpackage"
    model.save(str(path))
    return model, path


def test_a_chain_of_convs_gets_its_largest_live_set_to_the_byte(tmp_path):
    _model, path = _convert(tmp_path, "chain", (1, 3, 32, 32), ct.precision.FLOAT32)
    analysis = analyse_package(path)
    pixels, fp32 = 32 * 32, 4
    # live at each conv: its input and its output (the input is dead once read; the last output lives on)
    live = [(3 + 16) * pixels * fp32, (16 + 8) * pixels * fp32, (8 + 4) * pixels * fp32]
    assert max(live) == 24 * pixels * fp32 == 98304
    estimate = estimate_memory(path, analysis)
    assert estimate.weight_bytes == WEIGHT_ELEMENTS * fp32
    assert estimate.activation_bytes == 98304
    metrics, details = memory_metrics(path, analysis)
    assert metrics["memory.estimated"].value == WEIGHT_ELEMENTS * fp32 + 98304
    assert metrics["memory.estimated"].source == "estimated"
    assert details["assumption"] == ASSUMPTION and details["functions"][0]["activation_bytes"] == 98304


def test_flexible_shapes_are_estimated_at_the_largest_allowed_shape(tmp_path):
    size = ct.RangeDim(16, 64, default=32)
    _model, ranged = _convert(tmp_path, "ranged", (1, 3, size, size), ct.precision.FLOAT32)
    estimate = estimate_memory(ranged, analyse_package(ranged))
    assert estimate.activation_bytes == 24 * 64 * 64 * 4  # the same live set at 64x64
    assert estimate.shape == "the largest allowed input shape (x [1, 3, 64, 64])"
    shapes = ct.EnumeratedShapes(shapes=[(1, 3, 32, 32), (2, 3, 16, 16), (1, 3, 8, 8)], default=(1, 3, 32, 32))
    _model, enumerated = _convert(tmp_path, "enumerated", shapes, ct.precision.FLOAT32)
    assert estimate_memory(enumerated, analyse_package(enumerated)).activation_bytes == 24 * 32 * 32 * 4


def test_an_unbounded_range_has_no_estimate_and_says_which_input(tmp_path):
    from mlbench.backends.apple.analysis.liveness import NotEstimable
    from mlbench.backends.coreml.flexible_memory import candidate_shapes

    model, _path = _convert(tmp_path, "ranged", (1, 3, ct.RangeDim(8, 64, default=32), 32), ct.precision.FLOAT32)
    spec = model.get_spec()
    assert candidate_shapes(spec) == [{"x": (1, 3, 64, 32)}]
    spec.description.input[0].type.multiArrayType.shapeRange.sizeRanges[2].upperBound = -1  # a neural network's
    with pytest.raises(NotEstimable, match=r"^input x's dimension 2 has no upper bound: there is no largest shape "
                       r"to size the program at$"):
        candidate_shapes(spec)


def test_compressed_weights_estimate_less_than_float16_by_their_weight_bytes(tmp_path):
    from coremltools.optimize import coreml as cto

    model, path16 = _convert(tmp_path, "float16", (1, 3, 32, 32), ct.precision.FLOAT16,
                             minimum_deployment_target=ct.target.iOS18)
    palettized = cto.palettize_weights(model, cto.OptimizationConfig(
        global_config=cto.OpPalettizerConfig(nbits=4, mode="uniform", weight_threshold=1)))
    int4 = cto.linear_quantize_weights(model, cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(dtype="int4", granularity="per_channel", weight_threshold=1)))
    base = estimate_memory(path16, analyse_package(path16))
    assert base.weight_bytes == WEIGHT_ELEMENTS * 2
    # float16: cast x (fp32 + fp16 copy: 18 kB), conv a (3+16 channels), conv b (16+8: the peak), conv c, cast out
    assert base.activation_bytes == 24 * 32 * 32 * 2
    for name, compressed in (("palettized", palettized), ("int4", int4)):
        path = tmp_path / f"{name}.mlpackage"
        compressed.save(str(path))
        estimate = estimate_memory(path, analyse_package(path))
        assert estimate.activation_bytes == base.activation_bytes, name
        assert estimate.weight_bytes < base.weight_bytes / 3, name  # 4 bits a weight and its table or scales
        assert base.total - estimate.total == base.weight_bytes - estimate.weight_bytes, name
