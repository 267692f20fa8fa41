"""Static analysis of saved Core ML models (mlbench.backends.apple.analysis) and its Markdown.

The packages are real coremltools conversions of a small torch model, built once per module.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")

import coremltools as ct
import torch

from mlbench.backends.apple.analysis import ProgramAnalysis, analyse_package
from mlbench.backends.coreml.program_report import render_program_markdown
from mlbench.errors import UserError

pytestmark = pytest.mark.torch

# ---------------------------------------------------------------- the model and its hand counts
#
# conv1: 3->8, 3x3, pad 1, 32x32 out   weight 8*3*3*3 = 216, bias 8
# conv2: 8->16, 3x3, stride 2, 16x16   weight 16*8*3*3 = 1152, bias 16
# conv3: depthwise 16, 3x3, 16x16      weight 16*1*3*3 = 144, bias 16
# fc:    16->10                        weight 160, bias 10
WEIGHT_ELEMS = 216 + 1152 + 144 + 160  # 1672 (conv + linear weights)
BIAS_ELEMS = 8 + 16 + 16 + 10  # 50
PARAMS = WEIGHT_ELEMS + BIAS_ELEMS  # 1722
MACS_CONV1 = 32 * 32 * 8 * (3 // 1) * 3 * 3  # 221184
MACS_CONV2 = 16 * 16 * 16 * (8 // 1) * 3 * 3  # 294912
MACS_CONV3 = 16 * 16 * 16 * (16 // 16) * 3 * 3  # 36864
MACS_FC = 16 * 10  # 160
MACS = MACS_CONV1 + MACS_CONV2 + MACS_CONV3 + MACS_FC  # 553120
FP32_OPS = {"conv": 3, "relu": 3, "reduce_mean": 1, "reshape": 1, "linear": 1}


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.c3 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        x = torch.relu(self.c3(x))
        return self.fc(self.pool(x).flatten(1))


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    import coremltools.optimize.coreml as cto

    out = tmp_path_factory.mktemp("coreml")
    torch.manual_seed(0)
    model = SmallNet().eval()
    assert sum(p.numel() for p in model.parameters()) == PARAMS
    example = torch.rand(1, 3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated; coremltools renames outputs
        return _build(out, model, example, cto)


def _build(out: Path, model, example, cto) -> dict[str, Path]:
    traced = torch.jit.trace(model, example)

    def inputs() -> list:  # fresh each time: ct.convert mutates the TensorType (iOS18 sets its dtype to fp16)
        return [ct.TensorType(name="x", shape=example.shape)]

    paths: dict[str, Path] = {}

    def save(name: str, mlmodel) -> None:
        paths[name] = out / name
        mlmodel.save(str(paths[name]))

    fp32 = ct.convert(traced, inputs=inputs(), convert_to="mlprogram", compute_precision=ct.precision.FLOAT32)
    save("fp32.mlpackage", fp32)
    save("fp16.mlpackage", ct.convert(traced, inputs=inputs(), convert_to="mlprogram",
                                      compute_precision=ct.precision.FLOAT16))
    fp16_ios18 = ct.convert(traced, inputs=inputs(), convert_to="mlprogram",
                            minimum_deployment_target=ct.target.iOS18)
    # weight_threshold=0: the defaults skip weights under 2048 elements, i.e. all of ours.
    pal = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(nbits=4, mode="uniform", weight_threshold=0))
    save("pal4.mlpackage", cto.palettize_weights(fp32, pal))
    q8 = cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", weight_threshold=0)
    )
    save("int8.mlpackage", cto.linear_quantize_weights(fp32, q8))
    save("pal4_ios18.mlpackage", cto.palettize_weights(fp16_ios18, pal))
    nn = ct.convert(traced, inputs=inputs(), convert_to="neuralnetwork")
    save("nn.mlmodel", nn)
    return paths


@pytest.fixture(scope="module")
def analyses(packages) -> dict[str, ProgramAnalysis]:
    return {name: analyse_package(path) for name, path in packages.items()}


# ---------------------------------------------------------------- float32 / float16


def test_float32_program(analyses):
    a = analyses["fp32.mlpackage"]
    assert a.model_type == "mlProgram"
    assert a.spec_version == 6 and a.opset == "CoreML5" and a.opset_os == "iOS15" and a.min_os == "iOS15"
    assert a.precision == "FLOAT32"
    assert a.op_counts == FP32_OPS
    assert a.weight_ops == {}
    assert a.const_count > 0 and "const" not in a.op_counts
    assert [layer.op_type for layer in a.layers] == [
        "conv", "relu", "conv", "relu", "conv", "relu", "reduce_mean", "reshape", "linear"
    ]
    assert a.totals.params == PARAMS
    assert a.totals.weight_bytes == PARAMS * 4
    assert a.totals.macs == MACS and a.totals.macs_complete
    # cost model: 2 x MACs + relu (1 per element) + reduce_mean (1 per input, 1 per output); reshape 0
    assert a.totals.flops == 2 * MACS + (8 * 32 * 32 + 2 * 16 * 16 * 16) + (16 * 16 * 16 + 16)
    convs = [layer for layer in a.layers if layer.op_type == "conv"]
    assert [c.macs for c in convs] == [MACS_CONV1, MACS_CONV2, MACS_CONV3]
    assert [c.params for c in convs] == [224, 1168, 160]
    assert convs[0].output_shape == [1, 8, 32, 32] and convs[0].output_dtype == "fp32"
    fc = a.layers[-1]
    assert (fc.macs, fc.params, fc.output_shape) == (MACS_FC, 170, [1, 10])
    assert all(layer.macs is None for layer in a.layers if layer.op_type in {"relu", "reshape", "reduce_mean"})
    assert [(i.name, i.kind, i.shape, i.dtype) for i in a.inputs] == [("x", "tensor", [1, 3, 32, 32], "fp32")]
    assert a.outputs[0].dtype == "fp32" and a.outputs[0].shape == [1, 10]
    assert a.package_size_bytes > a.totals.weight_bytes
    assert a.notes == []
    # it is a JSON-ready pydantic model
    assert ProgramAnalysis.model_validate_json(a.model_dump_json()) == a


def test_float16_program(analyses):
    a16, a32 = analyses["fp16.mlpackage"], analyses["fp32.mlpackage"]
    assert a16.precision == "FLOAT16"  # the boundary casts to/from fp32 do not make it MIXED
    assert a16.op_counts == {**FP32_OPS, "cast": 2}
    assert a16.dtype_counts == {"fp16": 9}
    assert a16.totals.params == PARAMS
    assert a16.totals.weight_bytes * 2 == a32.totals.weight_bytes
    assert a16.totals.macs == MACS


# ---------------------------------------------------------------- compressed weights


def test_palettized_4bit_ios16(analyses):
    a, a32 = analyses["pal4.mlpackage"], analyses["fp32.mlpackage"]
    assert a.opset == "CoreML6"  # constexpr_lut_to_dense needs iOS16
    assert a.weight_ops == {"constexpr_lut_to_dense": 4}
    assert a.op_counts == FP32_OPS and a.precision == "FLOAT32"
    assert a.totals.params == PARAMS
    # packed 4-bit indices + a 16-entry fp32 LUT per weight + fp32 biases
    assert a.totals.weight_bytes == WEIGHT_ELEMS // 2 + 4 * 16 * 4 + BIAS_ELEMS * 4
    assert a.totals.weight_bytes < a32.totals.weight_bytes / 5
    conv1 = a.layers[0]
    assert "lut_to_dense" in (conv1.weight_storage or "") and "uint8 indices" in conv1.weight_storage


def test_palettized_4bit_ios18(analyses):
    a = analyses["pal4_ios18.mlpackage"]
    assert a.opset == "CoreML8" and a.precision == "FLOAT16"
    assert a.weight_ops == {"constexpr_lut_to_dense": 4}
    assert a.totals.params == PARAMS
    # uint4 indices + a 16-entry fp16 LUT per weight + fp16 biases
    assert a.totals.weight_bytes == WEIGHT_ELEMS // 2 + 4 * 16 * 2 + BIAS_ELEMS * 2
    assert "uint4 indices" in (a.layers[0].weight_storage or "")


def test_int8_linear_quantized(analyses):
    a, a32 = analyses["int8.mlpackage"], analyses["fp32.mlpackage"]
    assert a.weight_ops == {"constexpr_affine_dequantize": 4}
    assert a.totals.params == PARAMS
    # int8 data + per-output-channel fp32 scales and int8 zero points + fp32 biases
    out_channels = 8 + 16 + 16 + 10
    assert a.totals.weight_bytes == WEIGHT_ELEMS + out_channels * (4 + 1) + BIAS_ELEMS * 4
    ratio = (a.totals.weight_bytes - BIAS_ELEMS * 4) / (a32.totals.weight_bytes - BIAS_ELEMS * 4)
    assert 0.25 <= ratio < 0.32


# ---------------------------------------------------------------- other model types


def test_neural_network_model(analyses):
    a = analyses["nn.mlmodel"]
    assert a.model_type == "neuralNetwork"
    assert a.precision == "UNKNOWN"
    assert a.op_counts == {"convolution": 3, "activation": 3, "pooling": 1, "reshapeStatic": 1, "innerProduct": 1}
    assert a.totals.macs is None and a.totals.params is None
    assert a.totals.weight_bytes == PARAMS * 4
    assert any("neural-network model" in note and "not analysed" in note for note in a.notes)
    assert a.inputs[0].shape == [1, 3, 32, 32]


def test_nested_blocks_and_matmul(tmp_path):
    import numpy as np
    from coremltools.converters.mil import Builder as mb

    weight = np.ones((6, 4), dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 4)), mb.TensorSpec(shape=(2, 3, 5))])
    def prog(x, y):
        pred = mb.greater(x=mb.reduce_sum(x=x), y=0.0)
        z = mb.cond(
            pred=pred,
            _true_fn=lambda: mb.linear(x=x, weight=weight),
            _false_fn=lambda: mb.mul(x=mb.linear(x=x, weight=weight), y=2.0),
        )
        return z, mb.matmul(x=y, y=y, transpose_x=True)  # (2,5,3) @ (2,3,5): K = 3

    path = tmp_path / "cond.mlpackage"
    ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32).save(str(path))
    a = analyse_package(path)
    assert [(layer.op_type, layer.depth) for layer in a.layers] == [
        ("reduce_sum", 0), ("greater", 0), ("cond", 0), ("linear", 1), ("linear", 1), ("mul", 1), ("matmul", 0)
    ]
    assert [layer.macs for layer in a.layers if layer.op_type in ("linear", "matmul")] == [48, 48, 2 * 5 * 5 * 3]
    assert a.precision == "FLOAT32"  # the bool output of greater is not a float
    assert any("nested blocks" in note for note in a.notes)


# ---------------------------------------------------------------- errors


def _error(path: Path) -> str:
    with pytest.raises(UserError) as info:
        analyse_package(path)
    assert "\n" not in str(info.value)
    assert info.value.file == str(path)
    return str(info.value)


def test_errors(tmp_path, packages):
    missing = tmp_path / "missing.mlpackage"
    assert _error(missing) == f"{missing}: no such file or directory"

    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert _error(text) == f"{text}: not a Core ML model: expected an .mlpackage directory or an .mlmodel file"

    fake = tmp_path / "fake.mlmodel"
    fake.write_text("hello world\n")
    assert _error(fake) == f"{fake}: cannot parse the model spec: the protobuf is truncated or corrupt"

    empty_dir = tmp_path / "empty.mlpackage"
    empty_dir.mkdir()
    assert _error(empty_dir) == f"{empty_dir}: not a Core ML model: no Manifest.json"

    truncated = tmp_path / "truncated.mlpackage"
    shutil.copytree(packages["fp32.mlpackage"], truncated)
    spec_file = truncated / "Data" / "com.apple.CoreML" / "model.mlmodel"
    spec_file.write_bytes(spec_file.read_bytes()[:1000])
    assert _error(truncated) == f"{truncated}: cannot parse the model spec: the protobuf is truncated or corrupt"

    no_weights = tmp_path / "noweights.mlpackage"
    shutil.copytree(packages["fp32.mlpackage"], no_weights)
    (no_weights / "Data" / "com.apple.CoreML" / "weights" / "weight.bin").unlink()
    assert _error(no_weights) == (
        f"{no_weights}: corrupt Core ML package: the weight file weights/weight.bin is missing"
    )

    cut_weights = tmp_path / "cutweights.mlpackage"
    shutil.copytree(packages["fp32.mlpackage"], cut_weights)
    blob = cut_weights / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    blob.write_bytes(blob.read_bytes()[:3000])
    assert _error(cut_weights).startswith(f"{cut_weights}: corrupt Core ML package: weights/weight.bin is truncated")


# ---------------------------------------------------------------- Markdown


def test_render_program_markdown(analyses):
    a = analyses["pal4.mlpackage"]
    md = render_program_markdown(a, title="SmallNet 4-bit")
    assert md.startswith("### SmallNet 4-bit")
    assert "| Precision | FLOAT32 |" in md
    assert "| Compute ops | 9 |" in md
    assert "4 constexpr_lut_to_dense" in md
    assert "| Parameters | 1,722 (1.7 K) |" in md
    assert "553,120" in md and "1.1 M FLOPs" in md
    assert "| conv | 3 |" in md
    assert "<details><summary>Layers (9)</summary>" in md and md.rstrip().endswith("</details>")
    assert "| 1 | " in md and "1×8×32×32" in md and "221,184" in md

    short = render_program_markdown(a, max_layers=2)
    assert short.startswith(f"### {a.path}")
    assert "| 3 | " not in short and "7 more layers not shown" in short
    none = render_program_markdown(a, max_layers=0)  # `inspect --max-layers 0`: the count, no empty table
    assert "9 layers, not listed (at most 0 asked for)." in none and "| # | Op |" not in none
    assert "<details><summary>Layers" not in none

    nn_md = render_program_markdown(analyses["nn.mlmodel"])
    assert "| Precision | UNKNOWN |" in nn_md and "| MACs (estimated) | n/a |" in nn_md
    assert "- neural-network model" in nn_md
