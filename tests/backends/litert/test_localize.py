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


def test_a_full_int8_models_inputs_are_quantized_as_the_runtime_does(tmp_path):
    """A full_int8 model takes int8 inputs: the localization quantizes them with the input's own scale and zero
    point, as the run's verification does (casting the float inputs to int8 put the first layer near 0 dB), and
    the first layer's growth is taken over the quantized input's error."""
    import numpy as np

    from mlbench.backends.litert.export import export_tflite
    from mlbench.backends.litert.localize import localize_models
    from mlbench.backends.litert.runtime import Runner, interpreter

    torch.manual_seed(3)
    model = Chain(depth=3).eval()
    torch.manual_seed(0)
    samples = [[(torch.rand(2, 64) * 2 - 1).numpy()] for _ in range(3)]  # inside the calibrated range
    paths = {}
    for name, scheme in (("f32", None), ("int8", "full_int8")):
        (tmp_path / name).mkdir()
        paths[name] = export_tflite(model, [torch.from_numpy(samples[0][0])], precision="float32", scheme=scheme,
                                    dest=tmp_path / name, calibration=samples if scheme else None).artifact
    found = localize_models(paths["int8"], paths["f32"], samples, variant_id="v", reference_label="r", module=model)
    first = next(op for op in found.ops if op.origin is not None and op.origin.label == "layers.0")
    assert first.snr_db is not None and first.snr_db > 25  # int8's own error: about 8 bits, not noise
    assert 0 < first.growth_db < 30  # over its input's own quantization error, not over an exact input

    def outputs(path):
        runner = Runner(interpreter(path, 1, delegate=False))
        return [runner.outputs_of(runner(runner.feed(sample)))[0].astype(np.float64) for sample in samples]

    got, want = outputs(paths["int8"]), outputs(paths["f32"])
    noise = sum(float(np.sum((g - w) ** 2)) for g, w in zip(got, want))
    signal = sum(float(np.sum(w ** 2)) for w in want)
    assert found.output_snr_db == pytest.approx(-10 * np.log10(noise / signal), abs=1.0)  # the runtime's figure
