"""Placement rules v2: one small torch model per new rule, exported and estimated; OS bounds, unknown
devices from a compute plan, the estimate's confidence, and `mlbench rules`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from mlbench.backends.apple.analysis import (  # noqa: E402
    LayerInfo,
    ProgramAnalysis,
    TensorDescription,
    Totals,
    analyse_package,
)
from mlbench.backends.apple.placement import estimate_placement  # noqa: E402
from mlbench.backends.apple.placement_rules import load_rules, os_level  # noqa: E402
from mlbench.backends.coreml.compute_plan import placement_from_plan  # noqa: E402
from mlbench.backends.coreml.export import export_coreml  # noqa: E402
from mlbench.cli import main  # noqa: E402

pytestmark = pytest.mark.torch


def _estimate(module: nn.Module, inputs: list, tmp_path, units: str = "cpu_and_ne", target: str | None = None):
    torch.manual_seed(0)
    names = [f"x{i}" for i in range(len(inputs))]
    result = export_coreml(module.eval(), inputs, names, precision="float16", optimization=None,
                           deployment_target=target, dest=tmp_path)
    return estimate_placement(analyse_package(result.artifact), units)


def _ops(placement, op_type: str):
    return [(op.device, op.rule) for op in placement.ops if op.op_type == op_type]


class Padded(nn.Module):
    """Enough neighbouring work that the program is not 'small': the rules decide per op."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.pre = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())

    def forward(self, x):
        return self.pre(x)


class ScatterModel(Padded):
    def forward(self, x, idx):
        y = self.pre(x)
        return torch.zeros_like(y).scatter(1, idx, y)


class TrilModel(Padded):
    def forward(self, x):
        return torch.tril(self.pre(x))


class VocabHead(Padded):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(64, 20000)

    def forward(self, x):
        return self.head(self.pre(x))


class Embedder(nn.Module):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.table = nn.Embedding(rows, 16)
        self.body = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())

    def forward(self, ids):
        return self.body(self.table(ids))


def test_scatter_leaves_the_neural_engine(tmp_path):
    x, idx = torch.randn(2, 64), torch.randint(0, 64, (2, 64))
    placement = _estimate(ScatterModel(), [x, idx], tmp_path)
    scatters = [op for op in placement.ops if op.op_type.startswith("scatter")]
    assert scatters and all((op.device, op.rule) == ("cpu", "scatter") for op in scatters)


def test_triangular_mask_band_part_leaves_the_neural_engine(tmp_path):
    placement = _estimate(TrilModel(), [torch.randn(64, 64)], tmp_path)
    assert _ops(placement, "band_part") == [("cpu", "band-part")]
    assert placement.by_count["neural_engine"] > 0.5


def test_a_vocabulary_sized_output_exceeds_the_dimension_limit(tmp_path):
    placement = _estimate(VocabHead(), [torch.randn(1, 64)], tmp_path)
    linears = _ops(placement, "linear")
    assert linears[-1] == ("cpu", "dim-over-16384")
    assert all(device == "neural_engine" for device, _ in linears[:-1])


def test_embedding_lookups_run_on_the_cpu_and_large_tables_say_why(tmp_path):
    ids = torch.randint(0, 100, (1, 8), dtype=torch.int32)
    small = _estimate(Embedder(100), [ids], tmp_path / "small")
    assert _ops(small, "gather") == [("cpu", "gather-runtime-indices")]
    large = _estimate(Embedder(40000), [ids], tmp_path / "large")
    assert _ops(large, "gather") == [("cpu", "embedding-table-over-32768")]
    assert large.confidence == "medium"


def test_a_tiny_single_matmul_program_stays_on_the_cpu(tmp_path):
    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b

    small = _estimate(MatMul(), [torch.randn(64, 64), torch.randn(64, 64)], tmp_path / "small")
    assert small.by_count == {"cpu": 1.0} and {op.rule for op in small.ops} == {"small-program-cpu"}
    assert small.confidence == "low" and "small-program-cpu (low)" in small.note
    big = _estimate(MatMul(), [torch.randn(512, 512), torch.randn(512, 512)], tmp_path / "big")
    assert _ops(big, "matmul") == [("neural_engine", None)]


def test_rules_with_os_bounds_apply_only_inside_them():
    rule = load_rules()["flexible-layer-norm"]
    assert (rule.os_min, rule.os_max) == (None, 16.0)
    assert os_level("macOS13") == 16.0 and os_level("iOS17.4") == pytest.approx(17.4) and os_level("bogus") is None

    def program(opset_os: str) -> ProgramAnalysis:
        layers = [LayerInfo(name=f"op{i}", op_type=t, output_dtype="fp16", output_shape=[1, 8, 16])
                  for i, t in enumerate(["linear", "layer_norm", "linear", "relu", "linear"])]
        flexible = TensorDescription(name="x", kind="tensor", shape=[1, None, 16], dtype="fp16", flexible=True)
        return ProgramAnalysis(path="x", model_type="mlProgram", spec_version=7, precision="FLOAT16", opset_os=opset_os,
                               op_counts={}, const_count=0, layers=layers, package_size_bytes=1, inputs=[flexible],
                               outputs=[], totals=Totals(compute_ops=5, const_ops=0, weight_ops=0, params=0,
                                                         weight_bytes=0, macs=0, flops=10**9, macs_complete=True))

    old = estimate_placement(program("iOS16"), "cpu_and_ne")
    assert [(op.op_type, op.device, op.rule) for op in old.ops if op.op_type == "layer_norm"] == [
        ("layer_norm", "cpu", "flexible-layer-norm")]
    new = estimate_placement(program("iOS17"), "cpu_and_ne")
    assert all(op.device == "neural_engine" for op in new.ops) and new.confidence is None


def test_operations_with_no_device_in_a_compute_plan_count_as_unknown():
    ops = [
        {"operator": "ios17.cast", "output": "c0", "preferred": None, "supported": None, "cost": None},
        {"operator": "ios17.conv", "output": "c", "preferred": "neural_engine", "supported": ["neural_engine"],
         "cost": 0.9},
        {"operator": "ios17.cast", "output": "c1", "preferred": None, "supported": None, "cost": None},
    ]
    placement = placement_from_plan(ops, "cpu_and_ne", "FLOAT16")
    assert placement.unknown == 2 and placement.by_count == {"neural_engine": 1.0}
    assert [op.reason for op in placement.ops] == [None, None, None]
    assert placement.note == ("Core ML named no device for 2 operations (e.g. casts at the boundary): "
                              "counted apart as unknown.")


def test_rules_command_lists_every_rule_with_its_source(capsys):
    assert main(["rules", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["coreml"]
    from mlbench.backends.apple.compression_rules import load_compression_rules

    assert [r["id"] for r in rows] == [*load_rules(), *load_compression_rules()]  # placement, then compression
    assert all(r["source"] and r["confidence"] in ("high", "medium", "low") for r in rows)
    by_id = {r["id"]: r for r in rows}
    assert by_id["flexible-layer-norm"]["applies_to"] == "layer_norm when flexible_input=True, rank=3 (max iOS16)"
