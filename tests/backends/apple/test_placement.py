"""Core ML placement: rules-based estimates on real exported packages, and compute-plan mapping."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")

import torch
from torch import nn

from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, Totals, analyse_package
from mlbench.backends.apple.placement import ESTIMATE_CAVEAT, estimate_placement, load_rules, normalise_op_type
from mlbench.backends.base import placement_metrics
from mlbench.backends.coreml.compute_plan import placement_from_plan
from mlbench.backends.coreml.export import export_coreml
from mlbench.cli.main import main
from tests.conftest import ROOT

pytestmark = pytest.mark.torch


class LstmTagger(nn.Module):
    """A recurrent model: embedding-free so the LSTM is the only thing the rules should move."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(torch.relu(self.proj(x)))
        return self.head(out)


class DilatedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.c = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def export(module: nn.Module, shape: list[int], precision: str, dest) -> ProgramAnalysis:
    torch.manual_seed(0)
    result = export_coreml(module.eval(), [torch.randn(shape)], ["x"], precision=precision, optimization=None,
                           deployment_target=None, dest=dest)
    return analyse_package(result.artifact)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    from tiny_cnn import TinyCNN

    out = tmp_path_factory.mktemp("tiny")
    return {p: export(TinyCNN(), [1, 3, 32, 32], p, out / p) for p in ("float32", "float16")}


def test_float16_program_on_the_neural_engine(tiny):
    placement = estimate_placement(tiny["float16"], "cpu_and_ne")
    assert placement.source == "estimated"
    assert placement.by_count["neural_engine"] >= 0.9
    # the only op off it is the float32 output cast coremltools adds at the end
    off = [op for op in placement.ops if op.device != "neural_engine"]
    assert [(op.op_type, op.rule) for op in off] == [("cast", "float32-op")]
    assert placement.constants == tiny["float16"].const_count
    assert placement.switches == 1
    assert placement.note.endswith(ESTIMATE_CAVEAT)
    metrics = placement_metrics(placement)
    assert metrics["placement.neural_engine"].source == "estimated"
    assert metrics["placement.switches"].value == 1


def test_float32_program_never_reaches_the_neural_engine(tiny):
    placement = estimate_placement(tiny["float32"], "cpu_and_ne")
    assert placement.by_count == {"cpu": 1.0}
    assert placement.note.startswith("No operation reached the Neural Engine because the program is float32")
    assert all(op.rule == "float32-program" for op in placement.ops)
    under_all = estimate_placement(tiny["float32"], "all")
    assert under_all.by_count == {"gpu": 1.0} and "Under ALL it runs on the GPU" in under_all.note


class ArgmaxHead(nn.Module):
    """A float32 classifier that returns the class index: its last operation's output is int32."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(torch.relu(self.conv(x)).mean(dim=(2, 3)), dim=1)


def test_a_float32_programs_integer_operations_stay_off_the_neural_engine_too(tmp_path):
    """Per-operation rules keep the float32 operations off; only the whole-program rule keeps the int32
    argmax off as well (Core ML runs no part of a float32 program on the Neural Engine)."""
    analysis = export(ArgmaxHead(), [1, 3, 16, 16], "float32", tmp_path)
    assert analysis.precision == "FLOAT32"
    assert "int32" in {layer.output_dtype for layer in analysis.layers}  # the argmax's output
    placement = estimate_placement(analysis, "cpu_and_ne")
    assert {(op.device, op.rule) for op in placement.ops} == {("cpu", "float32-program")}
    assert placement.by_count == {"cpu": 1.0} and placement.switches == 0


def test_cpu_only_has_nothing_to_say(tiny):
    placement = estimate_placement(tiny["float16"], "cpu_only")
    assert placement.by_count == {"cpu": 1.0} and placement.note is None and placement.switches == 0


def test_lstm_stays_off_the_neural_engine_with_a_reason(tmp_path):
    analysis = export(LstmTagger(), [1, 5, 8], "float16", tmp_path)
    placement = estimate_placement(analysis, "cpu_and_ne")
    lstm = [op for op in placement.ops if op.op_type == "lstm"]
    assert lstm and all(op.device == "cpu" and op.rule == "recurrent" for op in lstm)
    assert lstm[0].reason == "recurrent layers do not run on the Neural Engine"
    assert "lstm ×1 (recurrent layers do not run on the Neural Engine)" in placement.note
    assert placement.by_count["neural_engine"] > 0


def test_dilated_convolution_stays_on_the_neural_engine(tmp_path):
    # v2 dropped the 2020 community rule: an Xcode report shows U2Net (dilations 2, 4, 8) fully on it
    analysis = export(DilatedNet(), [1, 3, 16, 16], "float16", tmp_path)
    convs = [op for op in estimate_placement(analysis, "cpu_and_ne").ops if op.op_type == "conv"]
    assert [op.device for op in convs] == ["neural_engine", "neural_engine", "neural_engine"]
    assert "dilated-conv" not in load_rules()


def synthetic(op_types: list[str], precision: str = "FLOAT16") -> ProgramAnalysis:
    layers = [LayerInfo(name=f"op{i}", op_type=t, output_dtype="fp16", output_shape=[1, 4],
                        attributes={"runtime_indices": True} if t == "gather" else {}) for i, t in enumerate(op_types)]
    return ProgramAnalysis(path="x", model_type="mlProgram", spec_version=7, precision=precision,
                           op_counts={}, const_count=3, layers=layers,
                           totals=Totals(compute_ops=len(layers), const_ops=3, weight_ops=0, params=0,
                                         weight_bytes=0, macs=0, flops=0, macs_complete=True),
                           package_size_bytes=1, inputs=[], outputs=[])


def test_short_island_between_cpu_ops_stays_on_the_cpu():
    placement = estimate_placement(synthetic(["relu", "gather", "add", "mul", "gather", "relu", "relu", "relu"]),
                                   "cpu_and_ne")
    devices = [op.device for op in placement.ops]
    assert devices == ["neural_engine", "cpu", "cpu", "cpu", "cpu", "neural_engine", "neural_engine",
                       "neural_engine"]
    assert [op.rule for op in placement.ops[2:4]] == ["small-island", "small-island"]
    assert placement.switches == 2


def test_unknown_precision_gets_causes_not_float32_advice():
    placement = estimate_placement(synthetic(["relu", "lstm"], precision="UNKNOWN"), "cpu_and_ne")
    assert "float32" not in placement.note
    assert placement.note.startswith("The package does not say its precision")
    assert "lstm ×1" in placement.note


def test_every_rule_names_its_source():
    rules = load_rules()
    assert {"float32-program", "recurrent", "gather-runtime-indices", "small-island", "large-pool"} <= set(rules)
    assert all(rule.source for rule in rules.values())


def test_compute_plan_operations_map_onto_a_placement():
    ops = [
        {"operator": "ios17.const", "output": "w", "preferred": None, "supported": None, "cost": None},
        {"operator": "ios17.conv", "output": "c", "preferred": "neural_engine",
         "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.7},
        {"operator": "ios17.gather", "output": "g", "preferred": "cpu", "supported": ["cpu", "gpu"], "cost": 0.1},
        {"operator": "ios17.relu", "output": "r", "preferred": "gpu",
         "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.2},
    ]
    placement = placement_from_plan(ops, "cpu_and_ne", "FLOAT16")
    assert placement.source == "measured" and placement.method == "MLComputePlan"
    assert placement.constants == 1 and placement.compute_ops == 3
    assert [op.op_type for op in placement.ops] == ["conv", "gather", "relu"]
    assert placement.by_cost == pytest.approx({"neural_engine": 0.7, "cpu": 0.1, "gpu": 0.2})
    assert placement.switches == 2
    assert placement.ops[1].reason == "not supported on the Neural Engine"
    assert placement.ops[2].reason == "Core ML preferred the gpu (the Neural Engine supports it)"
    assert placement.note.startswith("2 of 3 compute operations run off the Neural Engine")


def test_opset_prefixes_are_normalised():
    assert normalise_op_type("ios17.conv") == "conv"
    assert normalise_op_type("iOS18.constexpr_lut_to_dense") == "constexpr_lut_to_dense"
    assert normalise_op_type("conv") == "conv"
    assert normalise_op_type("my.custom") == "my.custom"


def test_inspect_with_compute_units(tiny, capsys):
    assert main(["inspect", tiny["float32"].path, "--compute-units", "cpu_and_ne"]) == 0
    out = capsys.readouterr().out
    assert "### Placement with cpu_and_ne (estimated: mlbench rules (placement_rules.yaml))" in out
    assert "| CPU | 100.0% |" in out
    assert "because the program is float32" in out


@pytest.mark.slow
def test_resnet18_float16_is_estimated_on_the_neural_engine(tmp_path):
    import torchvision

    analysis = export(torchvision.models.resnet18(weights=None), [1, 3, 224, 224], "float16", tmp_path)
    share = estimate_placement(analysis, "cpu_and_ne").by_count["neural_engine"]
    assert share >= 0.95
    assert estimate_placement(export(torchvision.models.resnet18(weights=None), [1, 3, 224, 224], "float32",
                                     tmp_path / "fp32"), "cpu_and_ne").by_count.get("neural_engine", 0.0) == 0.0


def test_prediction_inputs_follow_the_declared_dtypes(tmp_path):
    """What the macOS path feeds Core ML: float16 inputs for a package that declares them."""
    import sys

    import numpy as np

    from mlbench.backends.coreml.artifact import CoremlArtifact
    from mlbench.backends.coreml.runtime import ordered_outputs, prediction_inputs
    from mlbench.config.pipeline import ModelSpec
    from mlbench.sources.loading import load_model

    sys.path.insert(0, str(ROOT / "examples"))
    spec = ModelSpec(name="tiny", source=f"{ROOT}/examples/tiny_cnn.py:TinyCNN",
                     inputs=[{"name": "image", "shape": [1, 3, 32, 32]}])
    model = load_model(spec, seed=0, base_dir=ROOT)
    result = export_coreml(model.module, model.example_inputs, ["image"], precision="float16",
                           optimization=None, deployment_target="iOS16", dest=tmp_path)
    artifact = CoremlArtifact(result.artifact, analyse_package(result.artifact))
    arrays = prediction_inputs(artifact, model)
    assert arrays["image"].dtype == np.float16 and arrays["image"].shape == (1, 3, 32, 32)
    (output,) = artifact.analysis.outputs
    assert ordered_outputs(artifact, {output.name: "y", "other": "z"}) == ["y"]
