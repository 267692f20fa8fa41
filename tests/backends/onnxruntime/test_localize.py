"""ONNX Runtime localization: every node's output exposed, the graph's own module and line metadata, a
flipped weight sign named as the first jump, float16 against float32 paired through the inserted casts."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from tests.backends.coreml.localize.known_models import Chain, Stack, flip_one_sign, line_of  # noqa: E402

pytestmark = pytest.mark.torch


def _export(module, tmp_path, name, precision="float32"):
    from mlbench.backends.onnxruntime.export import export_onnx

    torch.manual_seed(0)
    example = torch.randn(2, 64)
    folder = tmp_path / name
    folder.mkdir()
    result = export_onnx(module.eval(), [example], ["x"], ["y"], precision=precision, opset=None, dest=folder)
    return result.artifact, example.numpy()


def test_the_graph_names_each_nodes_module_and_line(tmp_path):
    import onnx

    from mlbench.backends.onnxruntime.localize import graph_origins

    torch.manual_seed(1)
    path, _ = _export(Stack(), tmp_path, "stack")
    by_label = {o.label: o.where for o in graph_origins(onnx.load(str(path)).graph).values()}
    assert by_label["blocks.1.fc"] == f"known_models.py:{line_of('block_fc')}"
    assert by_label["blocks.2.softmax"] == f"known_models.py:{line_of('block_softmax')}"


def test_a_flipped_weight_sign_is_the_first_jump(tmp_path):
    from mlbench.backends.onnxruntime.localize import localize_graphs

    torch.manual_seed(3)
    model = Chain(depth=3)
    reference, x = _export(model, tmp_path, "right")
    variant, _ = _export(flip_one_sign(model, 1), tmp_path, "flipped")
    found = localize_graphs(variant, reference, [{"x": x}], variant_id="v", reference_label="r")
    jump = found.ops[found.first_jump]
    assert jump.origin.module == "layers.1" and jump.origin.where == f"known_models.py:{line_of('chain')}"
    assert found.ops[0].snr_db is None  # layers.0: exact
    assert found.source == "measured" and found.top(1)[0].origin.module == "layers.1"


def test_float16_pairs_through_the_casts_the_conversion_inserts(tmp_path):
    from mlbench.backends.onnxruntime.localize import localize_graphs

    torch.manual_seed(1)
    model = Stack()
    reference, x = _export(model, tmp_path, "f32")
    variant, _ = _export(model, tmp_path, "f16", precision="float16")
    found = localize_graphs(variant, reference, [{"x": x}], variant_id="v", reference_label="r")
    assert not found.unpaired
    casts = [op for op in found.ops if op.pairing == "cast"]
    assert casts and casts[0].op_type == "Cast" and casts[0].reference == "x"  # the input's float16 rounding
    assert all(op.snr_db is not None and 40 < op.snr_db < 100 for op in found.ops)
    assert math.isfinite(found.output_snr_db) and found.first_jump is not None


def test_shares_name_the_flipped_layer_and_the_float16_ones_are_measured(tmp_path):
    from mlbench.backends.onnxruntime.localize import localize_graphs

    torch.manual_seed(3)
    model = Chain(depth=3)
    reference, x = _export(model, tmp_path, "right")
    variant, _ = _export(flip_one_sign(model, 1), tmp_path, "flipped")
    found = localize_graphs(variant, reference, [{"x": x}], variant_id="v", reference_label="r")
    top = found.top(1)[0]
    assert top.origin.module == "layers.1" and top.share > 0.9
    assert found.modules[0].module == "layers.1" and found.modules[0].share > 0.9
    assert found.notes[-1].startswith("shares: the reference graph run")
    variant16, _ = _export(model, tmp_path, "f16", precision="float16")
    found16 = localize_graphs(variant16, reference, [{"x": x}], variant_id="v", reference_label="r")
    shares = [op.share for op in found16.ops if op.share is not None]
    assert shares and all(0.0 <= s <= 1.0 for s in shares)
