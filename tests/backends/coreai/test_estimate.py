"""Core ML's cost model and placement rules applied to Core AI ops (the `estimate` module), with real
conversions of tiny models: FLOPs as Core ML's conventions count them, composites (layer norm, SDPA) mapped,
an op without a counterpart leaving the estimate absent with its name, and the backend's metrics."""

from __future__ import annotations

import pytest

from mlbench.backends.coreai.availability import unavailable

pytestmark = [pytest.mark.torch, pytest.mark.coreai,
              pytest.mark.skipif(unavailable() is not None, reason=f"needs Core AI: {unavailable()}")]

torch = pytest.importorskip("torch")


class ConvHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8 * 6 * 6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.q = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q(self.norm(x)).view(1, 8, 2, 8).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(1, 8, 16)


class Cumsum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 1) + x


def _asset(module, x, folder, precision="float32", optimization=None):
    from mlbench.backends.coreai.export import export_coreai

    return export_coreai(module.eval(), [x], ["x"], ["y"], precision=precision, optimization=optimization,
                         dest=folder).artifact


def test_flops_follow_core_mls_conventions(tmp_path):
    from mlbench.backends.coreai.estimate import NOTE, walk_function

    torch.manual_seed(0)
    analysis, why = walk_function(_asset(ConvHead(), torch.randn(1, 3, 8, 8), tmp_path))
    assert why is None
    by_type = {layer.op_type: layer for layer in analysis.layers}
    assert by_type["conv"].flops == 2 * (8 * 6 * 6) * (3 * 3 * 3)  # 2 x MACs: output elements x C_in x k x k
    assert by_type["matmul"].flops == 2 * 4 * 288
    assert by_type["relu"].flops == 288  # one per output element
    assert analysis.op_counts == {"conv": 1, "add": 2, "relu": 1, "reshape": 1, "transpose": 1, "matmul": 1}
    assert analysis.totals.flops == 15552 + 2304 + 288 + 288 + 4
    assert analysis.totals.weight_bytes == 4 * (8 * 27 + 8 + 288 * 4 + 4)  # float32 weights and biases
    assert analysis.precision == "FLOAT32"
    assert analysis.notes == [NOTE]


@pytest.mark.slow
def test_compressed_weights_are_data_read_at_their_stored_size(tmp_path):
    from mlbench.backends.coreai.estimate import walk_function

    torch.manual_seed(0)
    model, x = torch.nn.Linear(64, 64), torch.randn(1, 64)
    plain, _ = walk_function(_asset(model, x, tmp_path / "plain"))
    palettized, why = walk_function(_asset(model, x, tmp_path / "pal", optimization={"kind": "palettize", "nbits": 4}))
    assert why is None
    assert palettized.totals.weight_ops == 1  # the 64 x 64 weight, rebuilt by lut_to_dense
    assert palettized.op_counts == plain.op_counts  # the lookup table is data, not a compute op
    assert plain.totals.weight_bytes == 4 * (64 * 64 + 64)
    # 4-bit indices, a lookup table of 16 float32 entries and its int16 axis, then the float32 bias
    assert palettized.totals.weight_bytes == 64 * 64 // 2 + 16 * 4 + 2 + 4 * 64


def test_composites_map_to_layer_norm_and_attention(tmp_path):
    from mlbench.backends.coreai.estimate import walk_function

    analysis, why = walk_function(_asset(Attention(), torch.randn(1, 8, 16), tmp_path))
    assert why is None
    attention = next(layer for layer in analysis.layers if layer.op_type == "scaled_dot_product_attention")
    L = S = E = 8
    assert attention.flops == 2 * (2 * L * S * E + L * S + 5 * L * S + 2 * L * S * E)  # batch of 2 heads
    assert analysis.op_counts["layer_norm"] == 1


@pytest.mark.slow
def test_an_op_without_a_counterpart_leaves_the_estimate_absent(tmp_path):
    from mlbench.backends.coreai.estimate import walk_function

    analysis, why = walk_function(_asset(Cumsum(), torch.randn(1, 4), tmp_path))
    assert analysis is None
    assert why == "Core AI ops without a Core ML counterpart in mlbench's table: scan ×1"


def test_float16_placement_and_latency_by_core_mls_rules(tmp_path):
    from mlbench.backends.apple.latency import latency_metrics
    from mlbench.backends.apple.placement import estimate_placement
    from mlbench.backends.coreai.estimate import NOTE, walk_function

    analysis, _ = walk_function(_asset(ConvHead(), torch.randn(1, 3, 8, 8), tmp_path, "float16"))
    assert analysis.precision == "FLOAT16"
    placement = estimate_placement(analysis, "all")
    assert placement.source == "estimated"
    assert placement.by_count.get("neural_engine", 0) > 0
    metrics, _ = latency_metrics(analysis, placement, ["a17pro"])
    assert metrics["latency.estimated.a17pro"].source == "estimated"
    assert metrics["latency.estimated.a17pro"].value > 0
    assert NOTE.startswith("Core ML's placement rules and cost model applied to Core AI ops")


PIPELINE = """\
version: 1
name: est
models:
  - name: tiny
    source: {root}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: coreai
    precision: [float16]
    estimate_on: [a17pro, m1]
verify: {{samples: 1}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json]}}
"""


@pytest.mark.slow
def test_the_backend_reports_estimated_placement_and_latency(tmp_path):
    from mlbench.backends.coreai.estimate import NOTE
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline
    from tests.conftest import ROOT

    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(root=ROOT), encoding="utf-8")
    (record,) = run(load_pipeline(path)).records
    assert record.status == "ok", record.error
    for chip in ("a17pro", "m1"):
        metric = record.metrics[f"latency.estimated.{chip}"]
        assert metric.source == "estimated" and metric.value > 0
    assert record.placement is not None and record.placement.source == "estimated"
    assert record.placement.note.startswith(NOTE)
    assert record.details["latency_estimate"]["note"] == NOTE
    assert record.metrics["latency.median"].value is None  # measured latency stays absent off macOS 27


def test_an_unknown_chip_is_refused(tmp_path):
    from mlbench.errors import UserError
    from mlbench.validate import load_pipeline
    from tests.conftest import ROOT

    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(root=ROOT).replace("[a17pro, m1]", "[a17pro, m9]"), encoding="utf-8")
    with pytest.raises(UserError) as err:
        load_pipeline(path)
    assert "unknown chip 'm9'" in str(err.value)


def _rope_norm():
    from coreai_torch.composite_ops import RMSNorm, RoPE

    class RopeNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rope, self.norm = RoPE(), RMSNorm(16)

        def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            return self.rope(self.norm(x), position_ids=pos)

    return RopeNorm().eval(), (torch.randn(1, 2, 8, 16), torch.arange(8).view(1, 8)), (RoPE, RMSNorm)


def test_an_externalized_rope_and_rmsnorm_cost_what_their_ops_cost_inline(tmp_path):
    """coreai-torch keeps RoPE and RMSNorm as graphs of their own when asked (externalize_modules); an invoke of a
    graph Core ML has no single op for is priced as its body, the same ops as the model converted inline."""
    from mlbench.backends.coreai.estimate import walk_function
    from mlbench.backends.coreai.export import export_coreai, import_coreai

    coreai_torch = import_coreai()
    model, args, kinds = _rope_norm()
    inline = export_coreai(model, list(args), ["x", "pos"], ["y"], precision="float32", optimization=None,
                           dest=tmp_path / "inline").artifact
    converter = coreai_torch.TorchConverter().add_pytorch_module(
        model, export_fn=lambda m: torch.export.export(m, args).run_decompositions(coreai_torch.get_decomp_table()),
        externalize_modules=list(kinds), input_names=["x", "pos"], output_names=["y"])
    external = tmp_path / "external.aimodel"
    converter.to_coreai().save_asset(external)
    assert "coreai.invoke @rope_" in str(__import__("coreai.authoring").authoring.AIModelAsset.load(external).program)
    flat, why_flat = walk_function(inline)
    nested, why = walk_function(external)
    assert why is None and why_flat is None
    assert nested.op_counts == flat.op_counts and {"cos", "sin", "concat", "rsqrt"} <= set(nested.op_counts)
    assert nested.totals.flops == flat.totals.flops and nested.totals.bytes == flat.totals.bytes
    assert [layer.name.split("/")[0] for layer in nested.layers].count("rope") == 15  # the body's compute ops


class Branch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


def test_control_flow_leaves_the_estimate_absent_naming_it(tmp_path):
    from mlbench.backends.coreai.estimate import walk_function

    analysis, why = walk_function(_asset(Branch(), torch.randn(1, 4), tmp_path))
    assert analysis is None
    assert why.startswith("control flow (if): which branch runs and how often a loop turns are known only when it "
                          "runs, so no cost is sound; unmapped: if ×1")
