"""The interpreter runs real coremltools exports of small torch models and matches eager PyTorch.

float32 programs: within 1e-5 (max|a-b| / max(max|ref|, 1)). float16 programs: within 1e-2 and
clearly nonzero, which proves every op's output is rounded to float16.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench.backends.coreml.emulate import EMULATION_NOTE, emulate, emulate_package, load_program, unsupported_ops
from tests.emulate_helpers import MODELS, eager, export, max_rel

# Op types each model must exercise (so a converter change that avoids them is noticed).
EXPECTED_OPS = {
    "cnn": {"conv", "max_pool", "relu", "relu6", "linear", "reduce_mean"},
    "transformer": {"gather", "layer_norm", "gelu", "softmax", "matmul", "linear", "split", "transpose"},
    "lstm": {"lstm"},
    "lstm_bidirectional": {"lstm", "concat"},
    "gru": {"while_loop", "gather", "scatter", "sigmoid", "tanh"},
    "resample": {"upsample_nearest_neighbor", "upsample_bilinear", "avg_pool", "max_pool", "conv_transpose",
                 "concat", "reshape", "transpose", "slice_by_index", "pad", "crop"},
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model name, precision) -> (package, reference outputs, feeds); exported once per module."""
    cache: dict = {}

    def get(name: str, precision: str):
        if (name, precision) not in cache:
            make, make_inputs, names = MODELS[name]
            model, inputs = make(), make_inputs()
            dest = tmp_path_factory.mktemp(f"{name}_{precision}")
            package = export(model, inputs, names, dest, precision=precision)
            feeds = {n: x.numpy() for n, x in zip(names, inputs)}
            cache[name, precision] = (package, eager(model, inputs), feeds)
        return cache[name, precision]

    return get


# The bidirectional LSTM converts slowly; its kernel is checked against torch in test_emulate_kernels.
NAMES = [pytest.param(n, marks=pytest.mark.slow) if n == "lstm_bidirectional" else n for n in sorted(MODELS)]


@pytest.mark.parametrize("name", NAMES)
def test_float32_program_matches_eager(exported, name):
    package, reference, feeds = exported(name, "float32")
    program = load_program(package)
    assert unsupported_ops(program) == []
    assert EXPECTED_OPS[name] <= set(program.op_types())
    outputs = emulate_package(package, feeds)
    assert list(outputs) == program.output_names  # by name, in declared order
    assert [o.shape for o in outputs.values()] == [r.shape for r in reference]
    assert all(o.dtype == np.float32 for o in outputs.values())
    assert max_rel(reference, list(outputs.values())) <= 1e-5


@pytest.mark.parametrize("name", NAMES)
def test_float16_program_rounds_every_op(exported, name):
    package, reference, feeds = exported(name, "float16")
    result = emulate(package, feeds)
    error = max_rel(reference, list(result.outputs.values()))
    assert 1e-6 < error <= 1e-2
    # precision="float32" skips the rounding of activations (weights stay float16): outputs move.
    unrounded = emulate_package(package, feeds, precision="float32")
    assert max_rel(list(unrounded.values()), list(result.outputs.values())) > 1e-6
    assert result.note == EMULATION_NOTE and "float16" in result.note


def test_outputs_depend_on_the_inputs(exported):
    package, _reference, feeds = exported("cnn", "float32")
    other = {"image": np.flip(feeds["image"], axis=-1).copy()}
    a, b = emulate_package(package, feeds), emulate_package(package, other)
    assert not np.allclose(next(iter(a.values())), next(iter(b.values())))


def test_inputs_are_cast_to_the_declared_dtype(exported):
    package, reference, feeds = exported("transformer", "float32")
    as_int64 = {"tokens": feeds["tokens"].astype(np.int64)}  # the program declares int32
    assert max_rel(reference, list(emulate_package(package, as_int64).values())) <= 1e-5
    as_float = {"tokens": feeds["tokens"].astype(np.float64)}
    assert max_rel(reference, list(emulate_package(package, as_float).values())) <= 1e-5


def test_wrong_inputs_are_refused(exported):
    package, _reference, feeds = exported("cnn", "float32")
    with pytest.raises(ValueError, match="missing image"):
        emulate_package(package, {})
    with pytest.raises(ValueError, match="unknown extra"):
        emulate_package(package, {**feeds, "extra": feeds["image"]})
    with pytest.raises(ValueError, match="shape"):
        emulate_package(package, {"image": feeds["image"][:, :2]})


def test_corrupted_weight_file_is_caught(exported, tmp_path):
    """One altered byte in weights/weight.bin: the emulated output moves far beyond tolerance."""
    import shutil

    package, reference, feeds = exported("cnn", "float32")
    broken = tmp_path / "broken.mlpackage"
    shutil.copytree(package, broken)
    weights = broken / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    data = bytearray(weights.read_bytes())
    program = load_program(package)
    # The first conv weight's data: its blob record's data offset (bytes 16..24 of the record at 64).
    offset = int.from_bytes(data[64 + 16: 64 + 24], "little")
    data[offset + 3] ^= 0x40  # flip an exponent bit of the first weight
    weights.write_bytes(bytes(data))
    assert program.op_types() == load_program(broken).op_types()
    error = max_rel(reference, list(emulate_package(broken, feeds).values()))
    assert error > 1e-2  # far beyond the 1e-5 tolerance


def test_torch_export_path_program(tmp_path):
    """A program made through torch.export (as vit_b_16 is) runs too."""
    from tests.emulate_helpers import export_coreml

    class DictOut(torch.nn.Module):  # a dict output makes tracing fail: torch.export is used
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 3)

        def forward(self, x):
            return {"y": torch.nn.functional.gelu(self.lin(x)).softmax(-1)}

    torch.manual_seed(0)
    model = DictOut().eval()
    x = torch.randn(2, 6)
    result = export_coreml(model, [x], ["x"], precision="float32", optimization=None, deployment_target=None,
                           dest=tmp_path)
    assert result.export_path == "torch.export"
    out = emulate_package(result.artifact, {"x": x.numpy()})
    assert max_rel([model(x)["y"].detach().numpy()], list(out.values())) <= 1e-5
