"""The cost model (mlbench.backends.apple.cost): FLOPs and bytes per op family on real exported
packages (tiny torch models through mlbench's exporter), the roofline time-like cost, and the
placement cost shares it feeds."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")

import torch
import torch.nn.functional as F
from torch import nn

from mlbench.backends.apple.analysis import ProgramAnalysis, analyse_package
from mlbench.backends.apple.cost import (
    OpCost,
    OpDescription,
    Roofline,
    TensorSpec,
    load_roofline,
    op_cost,
    registered_op_types,
    time_like_cost,
)
from mlbench.backends.apple.placement import estimate_placement
from mlbench.backends.coreml.export import export_coreml
from mlbench.backends.coreml.program_report import render_program_markdown

pytestmark = pytest.mark.torch

SIZE = {"float32": 4, "float16": 2}


def export(module: nn.Module, shapes: list[tuple[int, ...]], names: list[str], dest, precision: str = "float32",
           optimization: dict | None = None, deployment_target: str | None = None,
           dtypes: list | None = None) -> ProgramAnalysis:
    torch.manual_seed(0)
    examples = [torch.randint(0, 10, s) if (dtypes and dtypes[i] == "int") else torch.randn(*s)
                for i, s in enumerate(shapes)]
    result = export_coreml(module.eval(), examples, names, precision=precision, optimization=optimization,
                           deployment_target=deployment_target, dest=dest)
    return analyse_package(result.artifact)


def only(analysis: ProgramAnalysis, op_type: str):
    layers = [layer for layer in analysis.layers if layer.op_type == op_type]
    assert len(layers) == 1, [layer.op_type for layer in analysis.layers]
    return layers[0]


class Zoo(nn.Module):
    """One op of each cheap family: layer_norm, softmax, add, avg_pool, both upsamplings, gather."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.emb = nn.Embedding(100, 16)

    def forward(self, x, ids):  # x [1, 8, 8, 16], ids [1, 5]
        y = torch.softmax(self.norm(x), dim=-1) + x
        pooled = F.avg_pool2d(y.permute(0, 3, 1, 2), 2)  # [1, 16, 4, 4]
        up = F.interpolate(pooled, scale_factor=2, mode="bilinear") + F.interpolate(pooled, scale_factor=2)
        return up, self.emb(ids)


class Lstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32)

    def forward(self, x):  # [T=10, B=1, I=16]
        return self.lstm(x)[0]


class Misc(nn.Module):
    """A bidirectional LSTM, a matmul with a transposed operand, a transposed convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, bidirectional=True)
        self.up = nn.ConvTranspose2d(4, 8, 3, stride=2)

    def forward(self, x, y):  # x [10, 1, 16], y [6, 5]
        gram = torch.matmul(y.transpose(-1, -2), y)  # [5, 5], K = 6
        return self.lstm(x)[0], self.up(gram.unsqueeze(0).repeat(1, 4, 1, 1))


class Speech(nn.Module):
    """A small conv front-end and an LSTM(256, 256) over 64 steps that holds most of the FLOPs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(32, 256, 3, padding=1)
        self.lstm = nn.LSTM(256, 256, batch_first=True)
        self.head = nn.Linear(256, 32)

    def forward(self, x):  # [1, 32, 64]
        out, _ = self.lstm(torch.relu(self.conv(x)).transpose(1, 2))
        return self.head(out)


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, ProgramAnalysis]:
    out = tmp_path_factory.mktemp("cost")
    built: dict[str, ProgramAnalysis] = {}
    for p in ("float32", "float16"):
        built[f"linear-{p}"] = export(nn.Linear(64, 32), [(1, 64)], ["x"], out / f"linear-{p}", p)
        built[f"zoo-{p}"] = export(Zoo(), [(1, 8, 8, 16), (1, 5)], ["x", "ids"], out / f"zoo-{p}", p,
                                   dtypes=[None, "int"])
    built["lstm"] = export(Lstm(), [(10, 1, 16)], ["x"], out / "lstm")
    built["misc"] = export(Misc(), [(10, 1, 16), (6, 5)], ["x", "y"], out / "misc")
    built["pal4"] = export(nn.Linear(128, 64), [(1, 128)], ["x"], out / "pal4",
                           optimization={"kind": "palettize", "nbits": 4, "mode": "uniform"})
    built["speech"] = export(Speech(), [(1, 32, 64)], ["x"], out / "speech", "float16")
    return built


# ---------------------------------------------------------------- families on real packages


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_linear(packages, precision):
    a, s = packages[f"linear-{precision}"], SIZE[precision]
    fc = only(a, "linear")
    assert fc.flops == 2 * 64 * 32 == 2 * fc.macs
    # x [1, 64] + weight 64x32 + bias 32 read, out [1, 32] written
    assert fc.bytes == 64 * s + (64 * 32 + 32) * s + 32 * s
    assert fc.weight_bytes == (64 * 32 + 32) * s


def test_lstm_over_the_whole_sequence(packages):
    a = packages["lstm"]
    lstm = only(a, "lstm")
    T, B, D, H = 10, 1, 16, 32
    matmuls = 2 * 4 * H * (D + H)  # input and recurrent matmuls, 4 gates
    bias = 4 * H
    gates = H * (3 * 4 + 5 + 5 + 4)  # 3 sigmoid (4), tanh candidate (5), tanh of the cell (5), c and h updates (4)
    assert lstm.flops == T * B * (matmuls + bias + gates) == 132_480
    assert lstm.macs is None  # the MAC count still leaves recurrent ops out
    weights = 4 * H * D + 4 * H * H + 4 * H + 2 * H  # weight_ih, weight_hh, bias, initial h and c (consts)
    assert lstm.weight_bytes == weights * 4
    # x, weights read; the output sequence and the final h and c written
    assert lstm.bytes == T * B * D * 4 + weights * 4 + (T * B * H + 2 * B * H) * 4
    assert a.totals.flops == lstm.flops and a.totals.bytes == lstm.bytes
    bidirectional = only(packages["misc"], "lstm")
    assert bidirectional.output_shape == [T, B, 2 * H] and bidirectional.flops == 2 * lstm.flops


def test_matmul_and_conv_transpose(packages):
    a = packages["misc"]
    matmul, up = only(a, "matmul"), only(a, "conv_transpose")
    assert matmul.flops == 2 * 5 * 5 * 6
    assert matmul.bytes == 2 * 6 * 5 * 4 + 5 * 5 * 4  # y read twice (as x and as y), the product written
    assert up.flops == 2 * (4 * 5 * 5) * (8 * 3 * 3)  # every input element meets C_out x kernel weights


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_softmax_norm_pool_resize_add_gather(packages, precision):
    a, s = packages[f"zoo-{precision}"], SIZE[precision]
    n = 8 * 8 * 16
    norm = only(a, "layer_norm")
    assert norm.flops == 7 * n  # 5 + gamma + beta
    assert norm.bytes == n * s + 2 * 16 * s + n * s
    softmax = only(a, "softmax")
    assert (softmax.flops, softmax.bytes) == (5 * n, 2 * n * s)
    adds = [layer for layer in a.layers if layer.op_type == "add"]
    assert [(add.flops, add.bytes) for add in adds] == [(n, 3 * n * s), (n, 3 * n * s)]
    pool = only(a, "avg_pool")
    assert pool.flops == (16 * 4 * 4) * (2 * 2)  # kernel elements per output
    assert pool.bytes == n * s + 16 * 4 * 4 * s
    bilinear, nearest = only(a, "upsample_bilinear"), only(a, "upsample_nearest_neighbor")
    assert bilinear.flops == 7 * n and nearest.flops == 0
    assert bilinear.bytes == nearest.bytes == 16 * 4 * 4 * s + n * s
    transpose = only(a, "transpose")
    assert (transpose.flops, transpose.bytes) == (0, 2 * n * s)
    gather = only(a, "gather")
    assert gather.weight_bytes == 100 * 16 * s  # the table is stored whole...
    assert gather.flops == 0 and gather.bytes == 5 * 4 + 2 * (5 * 16 * s)  # ...but only 5 rows are read
    assert a.totals.arithmetic_intensity == pytest.approx(a.totals.flops / a.totals.bytes)


def test_matrix_ops_cost_twice_their_macs(packages):
    layers = [layer for a in packages.values() for layer in a.layers if layer.macs is not None]
    assert {layer.op_type for layer in layers} >= {"linear", "conv"}
    assert all(layer.flops == 2 * layer.macs for layer in layers)


def test_palettized_weight_is_read_at_its_stored_size(packages):
    fc = only(packages["pal4"], "linear")
    assert "lut_to_dense" in (fc.weight_storage or "")
    stored_weight = 128 * 64 // 2 + 16 * 4  # 4-bit indices + a 16-entry fp32 LUT
    assert fc.weight_bytes == stored_weight + 64 * 4
    assert fc.bytes == 128 * 4 + stored_weight + 64 * 4 + 64 * 4
    assert stored_weight < 128 * 64 * 4 / 7  # about an eighth of the float32 weight
    assert fc.flops == 2 * 128 * 64  # compression changes the bytes, not the arithmetic


def test_scaled_dot_product_attention(tmp_path):
    class Attention(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    a = export(Attention(), [(1, 2, 6, 8), (1, 2, 10, 8), (1, 2, 10, 4)], ["q", "k", "v"], tmp_path, "float16",
               deployment_target="iOS18")
    sdpa = only(a, "scaled_dot_product_attention")
    batch, L, S, E, Ev = 2, 6, 10, 8, 4
    assert sdpa.flops == batch * (2 * L * S * E + L * S + 5 * L * S + 2 * L * S * Ev)  # QK^T, scale, softmax, AV
    assert sdpa.bytes == 2 * batch * (L * E + S * E + S * Ev + L * Ev)


# ---------------------------------------------------------------- the LSTM case: cost shares


def test_an_lstm_that_holds_most_flops_keeps_most_cost_off_the_neural_engine(packages):
    a = packages["speech"]
    lstm = only(a, "lstm")
    assert lstm.flops > 0.9 * a.totals.flops
    placement = estimate_placement(a, "cpu_and_ne")
    assert placement.cost_basis == "roofline"
    on_cpu = [op for op in placement.ops if op.op_type == "lstm"]
    assert [(op.device, op.rule) for op in on_cpu] == [("cpu", "recurrent")]
    assert placement.by_cost["neural_engine"] < 0.5
    assert placement.by_cost["neural_engine"] + placement.by_cost["cpu"] == pytest.approx(1.0)
    # by MACs alone (the former basis) the Neural Engine would hold all of the work
    devices = {op.name: op.device for op in placement.ops}
    mac_total = sum(layer.macs or 0 for layer in a.layers)
    assert sum(layer.macs or 0 for layer in a.layers if devices[layer.name] == "neural_engine") == mac_total


# ---------------------------------------------------------------- descriptions without a package


def tensor(*shape, dtype="fp16", const=False) -> TensorSpec:
    return TensorSpec(tuple(shape), dtype, const)


def test_unknown_op_types_count_bytes_but_not_flops():
    desc = OpDescription("my_custom_op", inputs={"x": [tensor(2, 3)]}, outputs=[tensor(2, 3)], weight_bytes=10)
    assert op_cost(desc) == OpCost(None, 12 + 10, 12)


def test_unknown_dimensions_are_never_guessed():
    flexible = OpDescription("add", inputs={"x": [tensor(None, 3)], "y": [tensor(1, 3)]}, outputs=[tensor(None, 3)])
    cost = op_cost(flexible)
    assert (cost.flops, cost.bytes_read, cost.bytes_written, cost.bytes) == (None, None, None, None)
    no_kernel = OpDescription("max_pool", inputs={"x": [tensor(1, 4, 8, 8)]}, outputs=[tensor(1, 4, 4, 4)])
    assert op_cost(no_kernel).flops is None and op_cost(no_kernel).bytes == (256 + 64) * 2
    garbage = OpDescription("lstm", inputs={"x": [TensorSpec(None, None)]}, outputs=[], attributes={"direction": 3})
    assert op_cost(garbage).flops is None


def test_recurrent_families_and_directions():
    def rec(op, gates, **attributes):
        return OpDescription(op, inputs={"x": [tensor(7, 2, 5)], "weight_ih": [tensor(gates * 3, 5, const=True)],
                                         "weight_hh": [tensor(gates * 3, 3, const=True)],
                                         "bias": [tensor(gates * 3, const=True)]},
                             outputs=[tensor(7, 2, 3)], attributes=attributes)

    per_step = {"gru": 2 * 9 * (5 + 3) + 9 + 3 * (2 * 4 + 5 + 5), "rnn": 2 * 3 * (5 + 3) + 3 + 3 * 5}
    assert op_cost(rec("gru", 3)).flops == 7 * 2 * per_step["gru"]
    assert op_cost(rec("rnn", 1)).flops == 7 * 2 * per_step["rnn"]
    assert op_cost(rec("rnn", 1, activation="relu")).flops == 7 * 2 * (per_step["rnn"] - 3 * 4)
    assert op_cost(rec("gru", 3, direction="bidirectional")).flops == 2 * 7 * 2 * per_step["gru"]


def test_constants_and_weights_are_not_computation():
    assert op_cost(OpDescription("const", outputs=[tensor(100)])) == OpCost(0, 0, 0)
    assert op_cost(OpDescription("constexpr_lut_to_dense", outputs=[tensor(100)])) == OpCost(0, 0, 0)


def test_every_coremltools_op_has_a_cost_family():
    import coremltools.converters.mil.mil.ops.defs  # noqa: F401
    from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

    missing = {op for op in SSAOpRegistry.core_ops if not op.startswith("constexpr_")} - registered_op_types()
    assert not missing


# ---------------------------------------------------------------- roofline


def test_time_like_cost_is_the_slower_of_compute_and_memory():
    devices = {"x": Roofline(peak_flops=1e9, bandwidth=1e8)}
    assert time_like_cost(OpCost(2_000_000, 10_000, 0), "x", devices) == pytest.approx(2e-3)  # compute bound
    assert time_like_cost(OpCost(1000, 500_000, 500_000), "x", devices) == pytest.approx(1e-2)  # memory bound
    assert time_like_cost(OpCost(None, 100, 0), "x", devices) == pytest.approx(1e-6)  # bytes only: lower bound
    assert time_like_cost(OpCost(None, None, None), "x", devices) is None
    assert time_like_cost(OpCost(1, 1, 1), "tpu", devices) is None


def test_reference_chip_names_its_sources():
    devices = load_roofline()
    assert set(devices) == {"neural_engine", "gpu", "cpu"}
    assert devices["neural_engine"].peak_flops == 11e12 and devices["gpu"].peak_flops == 2.6e12
    assert devices["cpu"].peak_flops == 4 * 3.2e9 * 4 * 4 * 2 and devices["cpu"].peak_confidence == "low"
    for d in devices.values():
        assert d.peak_source and d.bandwidth_source and d.peak_confidence and d.bandwidth_confidence
        assert d.bandwidth == 68.25e9


def test_markdown_shows_flops_and_bytes(packages):
    md = render_program_markdown(packages["linear-float32"])
    assert "| MACs | FLOPs | Bytes |" in md
    assert "| 2,048 | 4,096 | 8,704 |" in md
    assert "| FLOPs, bytes (cost model) | 4.1 K FLOPs; 8.7 kB read + written; 0.47 FLOP/byte |" in md
