"""The Core AI summary's op histogram against the IR walk, and each op's origin from the debug info, with real
conversions of tiny models (`mlbench.backends.coreai.ir`, `layers`)."""

from __future__ import annotations

import inspect

import pytest

from mlbench.backends.coreai.availability import unavailable

pytestmark = [pytest.mark.torch, pytest.mark.coreai,
              pytest.mark.skipif(unavailable() is not None, reason=f"needs Core AI: {unavailable()}")]

torch = pytest.importorskip("torch")


class Block(torch.nn.Module):
    """Layer norm and SDPA (composites called through invoke, their bodies graphs of their own), a linear (a
    decomposable matmul and add), relu."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.q = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.relu(self.q(self.norm(x))).view(1, 8, 2, 8).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(1, 8, 16)


def _line(method, text: str) -> int:
    lines, start = inspect.getsourcelines(method)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from mlbench.backends.coreai.export import export_coreai

    folder = tmp_path_factory.mktemp("coreai-ir")
    torch.manual_seed(0)
    int4 = {"kind": "linear_quantize", "dtype": "int4", "granularity": "per_block", "block_size": 16}
    made = {}
    for name, module, x, recipe in (
            ("plain", Block(), torch.randn(1, 8, 16), None),
            ("int4", torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()), torch.randn(1, 64), int4)):
        made[name] = export_coreai(module.eval(), [x], ["x"], ["y"], precision="float32", optimization=recipe,
                                   dest=folder / name).artifact
    return made


def _summary(path):
    from coreai.authoring import AIModelAsset

    return {name: int(n) for name, n in AIModelAsset.load(path).summary(include_statistics=True).operation_distribution}


@pytest.mark.parametrize("name", ["plain", "int4"])
def test_summary_op_histogram_equals_the_ir_walks_counts(assets, name):
    """The summary counts every op of every graph plus each decomposable op's decomposition: the walk over the
    written ops, each counted as Core AI counts it alone, gives the same histogram."""
    from mlbench.backends.coreai.ir import graph_ops, load_module, summary_counts

    histogram, expansions, unexpanded = summary_counts(assets[name])
    summary = _summary(assets[name])
    assert histogram == summary
    assert unexpanded == {}
    written = graph_ops(load_module(assets[name]))
    assert sum(written.values()) < sum(summary.values())  # the decompositions are what the summary adds
    for kind, count in written.items():
        assert summary[kind] >= count, kind
    if name == "int4":  # a compressed weight is rebuilt by one op, written and counted alike
        assert written["blockwise_shift_scale"] == summary["blockwise_shift_scale"] == 1
        return
    # the mapping: a broadcasting add counts itself, a broadcast, the add and shape constants; relu decomposes
    # into a broadcasting maximum against zero; SDPA's body (its own graph) is written, with its softmax
    assert {"broadcasting_add", "broadcast_in_dims", "add", "constant"} <= set(expansions["broadcasting_add"])
    assert {"relu", "broadcasting_maximum", "maximum"} <= set(expansions["relu"])
    assert {"softmax", "exp", "reduce_sum"} <= set(expansions["softmax"])
    assert written["invoke"] == 2 and written["softmax"] == 1


def test_each_op_names_its_torch_node_source_line_and_module_stack(assets):
    from mlbench.backends.coreai.layers import layer_rows

    rows = layer_rows(assets["plain"])
    this_file = __file__
    body = _line(Block.forward, "torch.relu(")
    norm = next(row for row in rows if row["op"] == "invoke @layer_norm")
    assert norm["torch"] == ["native_layer_norm"]
    assert norm["source"] == f"{this_file}:{body}"  # the user's line, not torch's normalization.py
    assert norm["module_stack"] == "Block$1/LayerNorm$1"
    assert norm["frames"][0].endswith("torch/nn/modules/normalization.py:" + norm["frames"][0].rsplit(":", 1)[1])
    matmul = next(row for row in rows if row["op"] == "decomposable.broadcasting_batch_matmul")
    assert matmul["torch"] == ["addmm"] and matmul["module_stack"] == "Block$1/Linear$1" and matmul["as"] == "matmul"
    assert matmul["flops"] == 2 * 8 * 16 * 16
    sdpa = next(row for row in rows if row["op"] == "invoke @sdpa_maskless")
    assert sdpa["source"] == f"{this_file}:{body + 1}" and sdpa["module_stack"] == "Block$1"
    assert next(row for row in rows if row["op"] == "relu")["torch"] == ["relu"]


def test_inspect_prints_the_per_op_table_with_origins(assets, capsys):
    from mlbench.cli.main import main

    assert main(["inspect", str(assets["plain"])]) == 0
    out = capsys.readouterr().out
    body = _line(Block.forward, "torch.relu(")
    assert (f"| `invoke @layer_norm` | layer_norm | fp32 1×8×16 | 896 | 1,152 | native_layer_norm | "
            f"test_ir.py:{body} | Block$1/LayerNorm$1 |") in out
    from mlbench.backends.coreai.ir import graph_ops, load_module

    summary, written = _summary(assets["plain"]), graph_ops(load_module(assets["plain"]))
    assert "add" not in written and summary["add"] > 0  # only inside the broadcasting adds' decompositions
    assert f"| `add` | {summary['add']} | 0 |" in out
    assert f"| `broadcasting_add` | {summary['broadcasting_add']} | {written['broadcasting_add']} |" in out
    assert main(["inspect", str(assets["plain"]), "--max-layers", "2"]) == 0
    assert "… 8 more ops not shown." in capsys.readouterr().out
    assert main(["inspect", str(assets["plain"]), "--max-layers", "0"]) == 0
    out = capsys.readouterr().out
    assert "\n10 ops as written in the IR, not listed (at most 0 asked for).\n" in out and "| Torch node |" not in out
