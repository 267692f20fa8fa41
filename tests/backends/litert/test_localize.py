"""LiteRT localization: every tensor kept by the interpreter, tensors named back to the model's modules, a
flipped weight sign named as the first jump, a float16 model paired with its float32 one."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ai_edge_litert")
pytest.importorskip("litert_torch")

from tests.backends.coreml.localize.known_models import Chain, Stack, flip_one_sign  # noqa: E402

pytestmark = pytest.mark.torch


def _export(module, tmp_path, name, precision="float32"):
    from mlbench.backends.litert.export import export_tflite

    torch.manual_seed(0)
    example = torch.randn(2, 64)
    folder = tmp_path / name
    folder.mkdir()
    return export_tflite(module.eval(), [example], precision=precision, scheme=None, dest=folder).artifact, \
        example.numpy()


def test_a_flipped_weight_sign_is_the_first_jump_inside_a_sequential(tmp_path):
    from mlbench.backends.litert.localize import localize_models

    torch.manual_seed(3)
    model = Chain(depth=3)
    reference, x = _export(model, tmp_path, "right")
    flipped = flip_one_sign(model, 1)
    variant, _ = _export(flipped, tmp_path, "flipped")
    found = localize_models(variant, reference, [[x]], variant_id="v", reference_label="r", module=flipped)
    jump = found.ops[found.first_jump]
    assert jump.origin.label == "layers.1"  # a Sequential is called, so it keeps its name in the scope
    assert found.ops[0].origin.label == "layers.0" and found.ops[0].snr_db is None
    top = found.top(1)[0]  # the model cut around it: its own op alone carries the error
    assert top.origin.label == "layers.1" and top.share > 0.9
    assert found.modules[0].module == "layers.1" and found.modules[0].share > 0.9


def test_float16_weights_pair_with_float32_and_name_each_module(tmp_path):
    from mlbench.backends.litert.localize import localize_models

    torch.manual_seed(1)
    model = Stack()
    reference, x = _export(model, tmp_path, "f32")
    variant, _ = _export(model, tmp_path, "f16", precision="float16")
    found = localize_models(variant, reference, [[x]], variant_id="v", reference_label="r", module=model)
    labels = [op.origin.label for op in found.ops if op.origin is not None]
    assert labels[:4] == ["blocks.0.fc", "blocks.0.softmax", "blocks.1.fc", "blocks.1.softmax"]  # ModuleList left out
    assert not found.unpaired and all(op.snr_db is not None and op.snr_db > 40 for op in found.ops)
    assert any(n.startswith("LiteRT keeps no source line") for n in found.notes)
    shares = [op.share for op in found.ops if op.share is not None]
    assert shares and all(0.0 <= s <= 1.0 for s in shares) and found.notes[-1].startswith("shares: the reference")
