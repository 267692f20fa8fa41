"""Core ML export: real torch + coremltools on tiny models (Linux: convert, compress, save)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")

import coremltools as ct
import torch
from coremltools.proto import MIL_pb2

from mlbench.backends.apple.coremltools_messages import import_coremltools, shorten_coremltools_message
from mlbench.backends.coreml.conversion import _convert_exported
from mlbench.backends.coreml.deployment import (
    ExportError,
    InvalidExportOptions,
    check_deployment_target,
    minimum_deployment_target,
    valid_deployment_targets,
)
from mlbench.backends.coreml.export import EXPORT_PATH_TORCH_EXPORT, EXPORT_PATH_TRACE, export_coreml

pytestmark = pytest.mark.torch

nn = torch.nn

PALETTIZE4 = {"kind": "palettize", "nbits": 4, "mode": "kmeans", "granularity": "per_tensor"}
INT8 = {"kind": "linear_quantize", "dtype": "int8", "mode": "linear_symmetric"}
PRUNE50 = {"kind": "prune", "target_sparsity": 0.5}


class SmallConvNet(nn.Module):
    """Conv weights of 16*3*9=432, 32*16*9=4608 and 32*32*9=9216 elements: two are above
    coremltools' 2048-element compression threshold."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        x = torch.relu(self.c3(x))
        return self.fc(x.mean((2, 3)))


class DictOutputNet(SmallConvNet):
    """Returns a dict, as many model zoos do: torch.jit.trace refuses it (strict), torch.export
    takes it."""

    def forward(self, x):
        feat = torch.relu(self.c2(torch.relu(self.c1(x))))
        return {"logits": feat.mean((2, 3)), "features": feat}


class CallCounterNet(SmallConvNet):
    """Keeps Python state across calls: each trace bakes in another constant, so the trace's
    sanity check finds the graphs differ (as torchvision's vit_b_16 does with grad enabled)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.c1(x) * float(self.calls)


class BufferCounterNet(SmallConvNet):
    """Mutates a buffer: the graphs match but the trace check's outputs differ from the module's.
    torch.export turns the buffer into Core ML state (iOS18+)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return self.c1(x) * self.calls


class NoisyNet(SmallConvNet):
    """Random by design: torch reports nondeterministic nodes, so differing outputs are expected
    and the trace is kept."""

    def forward(self, x):
        y = self.c1(x)
        return y + 0.01 * torch.randn_like(y)


class ErfinvNet(SmallConvNet):
    """aten::erfinv has no converter in coremltools 9 (on either path)."""

    def forward(self, x):
        return torch.special.erfinv(torch.tanh(self.c1(x)))


def _x():
    torch.manual_seed(0)
    return [torch.randn(1, 3, 32, 32)]


def _spec(result):
    return ct.models.MLModel(str(result.artifact), skip_model_load=True).get_spec()


def _ops(spec):
    """(op type, output dtypes) of every op in the ML program."""
    found = []

    def walk(block):
        for op in block.operations:
            found.append((op.type, [o.type.tensorType.dataType for o in op.outputs]))
            for inner in op.blocks:
                walk(inner)

    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            walk(block)
    return found


def _export(tmp_path: Path, module=None, **kwargs):
    options = {"precision": "float16", "optimization": None, "deployment_target": None}
    options.update(kwargs)
    return export_coreml(
        module if module is not None else SmallConvNet(), _x(), ["image"], dest=tmp_path, **options
    )


# --- precision ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "precision, dtype", [("float32", MIL_pb2.FLOAT32), ("float16", MIL_pb2.FLOAT16)]
)
def test_export_precision(tmp_path, precision, dtype):
    result = _export(tmp_path, precision=precision)
    assert result.artifact == tmp_path / "model.mlpackage" and result.artifact.is_dir()
    assert result.export_path == EXPORT_PATH_TRACE
    assert result.fallback_reason is None
    assert result.deployment_target == "iOS15"
    assert result.seconds > 0
    spec = _spec(result)
    assert spec.WhichOneof("Type") == "mlProgram"
    ops = _ops(spec)
    conv_dtypes = {d for t, ds in ops if t == "conv" for d in ds}
    assert conv_dtypes == {dtype}
    assert ("cast" in {t for t, _ in ops}) == (precision == "float16")
    assert [i.name for i in spec.description.input] == ["image"]
    meta = spec.description.metadata.userDefined
    assert meta["mlbench.precision"] == precision
    assert meta["mlbench.export_path"] == EXPORT_PATH_TRACE
    assert meta["mlbench.deployment_target"] == "iOS15"
    assert meta["mlbench.optimization"] == "none"
    # coremltools' noise is captured, shortened and kept one line each
    assert all("\n" not in w and len(w) <= 200 for w in result.warnings)
    assert len(result.warnings) == len(set(result.warnings))


def test_export_overwrites_and_honours_explicit_target(tmp_path):
    _export(tmp_path)
    result = _export(tmp_path, deployment_target="macOS14")
    assert result.deployment_target == "macOS14"
    assert _spec(result).specificationVersion == ct.target.macOS14.value


# --- fallback to torch.export ------------------------------------------------------------


def test_dict_output_falls_back_to_torch_export(tmp_path):
    result = _export(tmp_path, module=DictOutputNet())
    assert result.export_path == EXPORT_PATH_TORCH_EXPORT
    assert result.fallback_reason.startswith("torch.jit.trace failed: Encountering a dict")
    assert "\n" not in result.fallback_reason and len(result.fallback_reason) <= 200
    spec = _spec(result)
    assert [i.name for i in spec.description.input] == ["image"]  # renamed from "x"
    assert len(spec.description.output) == 2
    assert spec.description.metadata.userDefined["mlbench.export_path"] == EXPORT_PATH_TORCH_EXPORT
    assert spec.description.metadata.userDefined["mlbench.fallback_reason"] == result.fallback_reason


def test_trace_sanity_check_failure_falls_back_to_torch_export(tmp_path):
    result = _export(tmp_path, module=CallCounterNet(), precision="float32")
    assert result.export_path == EXPORT_PATH_TORCH_EXPORT
    assert result.fallback_reason == (
        "torch.jit.trace failed: Tracing failed sanity checks! ERROR: Graphs differed across invocations!"
    )


def test_trace_output_mismatch_falls_back_to_torch_export(tmp_path):
    result = _export(tmp_path, module=BufferCounterNet(), precision="float32", deployment_target="iOS18")
    assert result.export_path == EXPORT_PATH_TORCH_EXPORT
    assert result.fallback_reason == (
        "torch.jit.trace failed its check: Output nr 1. of the traced function does not match "
        "the corresponding output of the Python function"
    )


def test_random_model_keeps_the_trace(tmp_path):
    result = _export(tmp_path, module=NoisyNet(), precision="float32")
    assert result.export_path == EXPORT_PATH_TRACE
    assert result.fallback_reason is None


def test_torch_export_branch_directly():
    ct_mod = import_coremltools()
    sink: list[str] = []
    mlmodel = _convert_exported(
        ct_mod,
        SmallConvNet().eval(),
        _x(),
        ["pixels"],
        {
            "convert_to": "mlprogram",
            "compute_precision": ct_mod.precision.FLOAT32,
            "minimum_deployment_target": ct_mod.target.iOS15,
            "skip_model_load": True,
        },
        sink,
    )
    spec = mlmodel.get_spec()
    assert [i.name for i in spec.description.input] == ["pixels"]
    assert "conv" in {t for t, _ in _ops(spec)}


# --- weight compression ------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe, constexpr",
    [
        (PALETTIZE4, "constexpr_lut_to_dense"),
        (INT8, "constexpr_affine_dequantize"),
        (PRUNE50, "constexpr_sparse_to_dense"),
    ],
)
def test_compression(tmp_path, recipe, constexpr):
    result = _export(tmp_path, optimization=recipe)
    assert result.deployment_target == "iOS16"
    spec = _spec(result)
    assert spec.specificationVersion == ct.target.iOS16.value
    types = Counter(t for t, _ in _ops(spec))
    assert types[constexpr] == 2  # c2, c3 (c1 and fc are under the 2048-element threshold)
    assert spec.description.metadata.userDefined["mlbench.optimization"].startswith("{")
    assert not any("compressed no weights" in w for w in result.warnings)


def test_palettize_3bit_uses_ios18_op(tmp_path):
    recipe = {"kind": "palettize", "nbits": 3, "mode": "uniform", "granularity": "per_tensor"}
    result = _export(tmp_path, optimization=recipe)
    assert result.deployment_target == "iOS18"
    assert Counter(t for t, _ in _ops(_spec(result)))["constexpr_lut_to_dense"] == 2


def test_compression_of_tiny_weights_warns(tmp_path):
    tiny = nn.Sequential(nn.Conv2d(3, 4, 3))
    result = _export(tmp_path, module=tiny, optimization=PRUNE50)
    assert any("compressed no weights" in w for w in result.warnings)


# --- deployment targets ------------------------------------------------------------------


@pytest.mark.parametrize(
    "precision, optimization, expected",
    [
        ("float32", None, "iOS15"),
        ("float16", None, "iOS15"),
        ("float16", PALETTIZE4, "iOS16"),
        ("float32", {"kind": "palettize", "nbits": 6, "mode": "uniform", "granularity": "per_tensor"}, "iOS16"),
        ("float16", {"kind": "palettize", "nbits": 3, "mode": "kmeans", "granularity": "per_tensor"}, "iOS18"),
        (
            "float16",
            {"kind": "palettize", "nbits": 4, "mode": "kmeans", "granularity": "per_grouped_channel", "group_size": 16},
            "iOS18",
        ),
        ("float16", INT8, "iOS16"),
        ("float16", {"kind": "linear_quantize", "dtype": "uint8", "mode": "linear"}, "iOS16"),
        ("float32", PRUNE50, "iOS16"),
    ],
)
def test_minimum_deployment_target(precision, optimization, expected):
    assert minimum_deployment_target(precision, optimization) == expected
    assert check_deployment_target(None, precision, optimization) == expected


def test_target_names_map_to_coremltools():
    for name in valid_deployment_targets():
        assert hasattr(ct.target, name), name
    assert check_deployment_target("macos13", "float16", PALETTIZE4) == "macOS13"
    assert check_deployment_target("watchOS9", "float16", INT8) == "watchOS9"


def test_unknown_target_message():
    with pytest.raises(InvalidExportOptions) as info:
        check_deployment_target("iOS14", "float32", None)
    assert str(info.value) == (
        "unknown deployment target 'iOS14'; valid: iOS15, iOS16, iOS17, iOS18, iOS26, "
        "macOS12, macOS13, macOS14, macOS15, macOS26, watchOS8, watchOS9, watchOS10, watchOS11, "
        "watchOS26, tvOS15, tvOS16, tvOS17, tvOS18, tvOS26"
    )
    assert isinstance(info.value, ValueError) and isinstance(info.value, ExportError)


def test_too_low_target_message(tmp_path):
    with pytest.raises(InvalidExportOptions) as info:
        _export(tmp_path, optimization=PALETTIZE4, deployment_target="macOS12")
    assert str(info.value) == "deployment target macOS12 is too low for palettize: it needs macOS13 or later"
    with pytest.raises(InvalidExportOptions) as info:
        check_deployment_target(
            "iOS17", "float16", {"kind": "palettize", "nbits": 3, "mode": "kmeans", "granularity": "per_tensor"}
        )
    assert str(info.value) == "deployment target iOS17 is too low for palettize nbits=3: it needs iOS18 or later"
    assert not (tmp_path / "model.mlpackage").exists()


@pytest.mark.parametrize(
    "precision, optimization, fragment",
    [
        ("bfloat16", None, "precision must be float32 or float16"),
        ("float16", {"kind": "quantize"}, "unknown optimization kind 'quantize'"),
        ("float16", {"kind": "palettize", "nbits": 5, "mode": "kmeans"}, "nbits must be one of 1, 2, 3, 4, 6, 8"),
        ("float16", {"kind": "palettize", "nbits": 4, "granularity": "per_grouped_channel"}, "group_size"),
        ("float16", {"kind": "linear_quantize", "dtype": "int2"}, "dtype must be one of int8, uint8, int4, uint4"),
        ("float16", {"kind": "prune", "target_sparsity": 1.5}, "target_sparsity"),
    ],
)
def test_bad_options(precision, optimization, fragment):
    with pytest.raises(InvalidExportOptions, match=fragment):
        minimum_deployment_target(precision, optimization)


def test_input_names_checked(tmp_path):
    with pytest.raises(InvalidExportOptions, match="not valid for Core ML"):
        export_coreml(SmallConvNet(), _x(), ["1image"], precision="float32", optimization=None,
                      deployment_target=None, dest=tmp_path)
    with pytest.raises(InvalidExportOptions, match="1 example input"):
        export_coreml(SmallConvNet(), _x(), ["a", "b"], precision="float32", optimization=None,
                      deployment_target=None, dest=tmp_path)


# --- failures ------------------------------------------------------------------------------


def test_unsupported_op_is_one_short_line(tmp_path):
    with pytest.raises(ExportError) as info:
        _export(tmp_path, module=ErfinvNet())
    message = str(info.value)
    assert "\n" not in message and len(message) <= 200
    assert message.startswith("Core ML export failed: PyTorch convert function for op 'erfinv' not implemented")
    assert "erfinv" in info.value.trace_error and "erfinv" in info.value.export_error
    assert not (tmp_path / "model.mlpackage").exists()


def test_shorten_messages():
    sanity = (
        "Tracing failed sanity checks!\nERROR: Graphs differed across invocations!\n"
        "\tGraph diff:\n\t\t  graph(%self.1 : __torch__.Foo,\n" + "\t\t  %x : Tensor\n" * 500
    )
    assert (
        shorten_coremltools_message(RuntimeError(sanity))
        == "Tracing failed sanity checks! ERROR: Graphs differed across invocations!"
    )
    assert (
        shorten_coremltools_message(NotImplementedError("Unsupported fx node special_erfinv, kind special_erfinv"))
        == "PyTorch convert function for op 'special_erfinv' not implemented (torch.export graph)"
    )
    long = shorten_coremltools_message(ValueError("x" * 1000))
    assert len(long) == 200 and long.endswith("…")
    assert shorten_coremltools_message(KeyError("missing")) == "missing"
    assert shorten_coremltools_message(ValueError()) == "ValueError"


@pytest.mark.slow
def test_coremltools_is_imported_without_scikit_learn_which_a_model_may_still_import():
    """import_coremltools hides scikit-learn while coremltools imports (its sklearn converters are never
    used; the import cost a second of every child's start); a user's model imports it afterwards."""
    import subprocess
    import sys

    pytest.importorskip("sklearn")
    script = ("import sys\nfrom mlbench.backends.apple.coremltools_messages import import_coremltools\nct = import_coremltools()\n"
              "assert 'sklearn' not in sys.modules and not ct._deps._HAS_SKLEARN\n"
              "import sklearn.linear_model\nprint('sklearn', sklearn.__version__)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("sklearn ")
    assert "scikit-learn version" not in done.stderr  # coremltools' notice about it is gone with it
