"""Placement v2.1 on real exports: transformers models (tiny configs, random weights) with an attention mask,
converted by mlbench's Core ML exporter and estimated. A float32 program stays float32 however its mask is
built, and nothing of it reaches the Neural Engine; in a float16 program the mask's bool ops and the int32
position arithmetic follow their neighbours instead of going to the Neural Engine blindly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("coremltools")

from mlbench.backends.apple.analysis import analyse_package  # noqa: E402
from mlbench.backends.apple.placement import estimate_placement  # noqa: E402
from mlbench.backends.base import placement_metrics  # noqa: E402
from mlbench.backends.coreml.export import export_coreml  # noqa: E402
from mlbench.config.models import ModelSpec  # noqa: E402
from mlbench.sources.loading import load_model  # noqa: E402

pytestmark = pytest.mark.torch

BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "vocab_size": 100, "max_position_embeddings": 64}
FOLLOW = "integer-follows-neighbour"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def export(tmp_path, source: str, precision: str):
    spec = ModelSpec.model_validate({"name": "m", "source": source, "kwargs": {"config": BERT}, "inputs": [
        {"name": "input_ids", "dtype": "int64", "shape": [1, 16], "range": [1, 100]},
        {"name": "attention_mask", "dtype": "int64", "shape": [1, 16], "fill": "ones"}]})
    model = load_model(spec, 0, tmp_path)
    result = export_coreml(model.module, list(model.example_inputs), model.input_names, precision=precision,
                           optimization=None, deployment_target=None, dest=tmp_path, inputs=spec.inputs)
    return analyse_package(result.artifact)


def test_a_float32_bert_with_an_attention_mask_is_float32_with_nothing_on_the_neural_engine(tmp_path):
    analysis = export(tmp_path, "transformers:BertModel", "float32")
    # the mask path: int32 -> bool -> float16 (cast) -> gather_nd -> bool -> logical_and, all an integer path
    mask = [(layer.op_type, layer.output_dtype) for layer in analysis.layers if layer.integer_data]
    assert ("cast", "fp16") in mask and ("gather_nd", "fp16") in mask and ("logical_and", "bool") in mask
    assert analysis.precision == "FLOAT32"  # those float16 casts no longer make it mixed
    assert set(analysis.dtype_counts) == {"fp32"} and not any("mixed" in note for note in analysis.notes)
    for units in ("cpu_and_ne", "all"):
        placement = estimate_placement(analysis, units)
        assert [o.name for o in placement.ops if o.device == "neural_engine"] == []
        metrics = placement_metrics(placement)
        assert metrics["placement.neural_engine"].value == 0.0 == metrics["placement.count.neural_engine"].value
    assert {(o.device, o.rule) for o in estimate_placement(analysis, "cpu_and_ne").ops} == {("cpu", "float32-program")}


def test_a_float16_robertas_integer_and_bool_ops_follow_their_neighbours(tmp_path):
    analysis = export(tmp_path, "transformers:RobertaModel", "float16")
    assert analysis.precision == "FLOAT16"
    placement = estimate_placement(analysis, "cpu_and_ne")
    ops = {o.name: (o.op_type, o.device, o.rule) for o in placement.ops}
    by_type = {}
    for layer, o in zip(analysis.layers, placement.ops):
        by_type.setdefault(layer.op_type, []).append((layer, o))
    # the position ids: not_equal on input_ids, an int32 cumsum and its arithmetic, all off the Neural Engine
    assert [(o.device, o.rule) for _, o in by_type["cumsum"]] == [("cpu", "wide-integer")]
    assert [(o.device, o.rule) for _, o in by_type["not_equal"]] == [("cpu", "wide-integer")]
    # the mask: its gather_nd and logical_and go where the float op they feed goes (here the Neural Engine)
    for op_type in ("gather_nd", "logical_and"):
        (layer, o), = by_type[op_type]
        assert (o.rule, layer.integer_data) == (FOLLOW, True)
        fed = next(i for i, other in enumerate(analysis.layers) if placement.ops.index(o) in other.inputs)
        while analysis.layers[fed].integer_data:  # through the rest of the mask path to the op it masks
            fed = next(i for i, other in enumerate(analysis.layers) if fed in other.inputs)
        assert o.device == placement.ops[fed].device == "neural_engine", (op_type, ops)
    assert placement.rules[FOLLOW] >= 4 and placement.confidence == "low"


class MaskedScores(torch.nn.Module):
    """Scores masked by `keep > 0.5` with a fill that does not fit float16 (coremltools keeps the select
    in float32): a float16 program with a genuine float32 op."""

    def __init__(self) -> None:
        super().__init__()
        self.qk = torch.nn.Linear(64, 128)

    def forward(self, x, keep):
        q, k = self.qk(x).split(64, dim=-1)
        return torch.softmax(q @ k.transpose(-1, -2) / 8.0 + torch.where(keep > 0.5, 0.0, -1e9), dim=-1)


def test_a_genuine_float32_op_still_makes_a_float16_program_mixed_and_its_mask_follows_it(tmp_path):
    torch.manual_seed(0)
    inputs = [torch.randn(1, 128, 64), (torch.rand(1, 128, 128) > 0.5).float()]
    result = export_coreml(MaskedScores().eval(), inputs, ["x", "keep"], precision="float16", optimization=None,
                           deployment_target=None, dest=tmp_path)
    analysis = analyse_package(result.artifact)
    assert analysis.precision == "MIXED"
    placed = {o.op_type: (o.device, o.rule) for o in estimate_placement(analysis, "cpu_and_ne").ops}
    assert placed["select"] == ("cpu", "float32-op")
    assert placed["greater"] == ("cpu", FOLLOW)  # the comparison goes with the float32 select it feeds
    assert placed["matmul"] == ("neural_engine", None)
