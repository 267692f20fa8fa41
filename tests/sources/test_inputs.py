"""Inputs with meaning: integer ranges (token ids), constant fills (masks), real samples from .npz files
and image pixels; each mistake is one line with its place."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench.errors import UserError
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

HEAD = """\
version: 1
name: t
models:
  - name: m
    source: {source}
    inputs:
{inputs}
targets:
  - backend: torch
latency: {{warmup: 0, repeats: 1, min_time_s: 0.0, retry_s: 0}}
report: {{dir: out}}
"""


def pipeline(write_pipeline, inputs: list[str], source: str = f"{ROOT}/examples/tiny_text.py:TinyText",
             extra: str = "") -> str:
    body = "\n".join(f"      - {line}" for line in inputs)
    return write_pipeline(HEAD.format(source=source, inputs=body) + extra)


def errors(path) -> list[str]:
    with pytest.raises(UserError) as info:
        load_pipeline(path)
    return [line.split(": ", 1)[1] for line in str(info.value).splitlines()]


def test_each_input_mistake_is_one_line_with_its_place(write_pipeline):
    path = pipeline(write_pipeline, [
        "{name: a, dtype: float32, shape: [1, 8], range: [0, 10]}",
        "{name: b, dtype: int64, shape: [1, 8], range: [5, 5]}",
        "{name: c, dtype: int64, shape: [1, 8], range: [0, 5], fill: ones}",
        "{name: d, dtype: int64, shape: [1, [8, 16]], values: x.npz}",
        "{name: e, kind: image, shape: [1, 1, 8, 8]}",
        "{name: f, scale: 2.0, shape: [1, 1, 8, 8]}",
        "{name: g, shape: [1, {min: 4, max: 2, default: 3}]}",
        "{name: h, kind: image, shape: [1, 3, 8, 8], bias: [1, 2]}",
        "{name: i, kind: image, dtype: int32, shape: [1, 3, 8, 8]}",
    ])
    assert errors(path) == [
        "models[0].inputs[0]: range is for integer inputs; this one is float32",
        "models[0].inputs[1]: range [5, 5) is empty: low must be below high",
        "models[0].inputs[2]: range and fill are exclusive: give one",
        "models[0].inputs[3]: values need a static shape (no alternatives or ranges)",
        "models[0].inputs[4]: an RGB image input needs shape [1, 3, H, W], got [1, 1, 8, 8]",
        "models[0].inputs[5]: scale applies to kind: image inputs",
        "models[0].inputs[6].shape[1]: a range needs min <= default <= max, got 4, 3, 2",
        "models[0].inputs[7]: bias needs 3 value(s) for RGB, got 2",
        "models[0].inputs[8]: an image input is float32 pixels, not int32",
    ]


def test_enumerated_dimensions_must_agree(write_pipeline):
    path = pipeline(write_pipeline, ["{name: input_ids, dtype: int64, shape: [1, [8, 16]]}",
                                     "{name: attention_mask, dtype: int64, shape: [1, [8, 16, 32]], fill: ones}"])
    assert errors(path) == ["models[0]: enumerated dimensions vary together, so they need as many alternatives "
                            "each; got 2, 3"]


def test_token_ids_past_the_vocabulary_are_refused(write_pipeline):
    path = pipeline(write_pipeline, ["{name: input_ids, dtype: int64, shape: [1, 8], range: [0, 30522]}"],
                    source="transformers:BertModel")
    text = path.read_text().replace("    inputs:", "    kwargs: {config: {vocab_size: 1000}}\n    inputs:")
    path.write_text(text)
    assert errors(path) == ["models[0].inputs[0].range: token ids up to 30521 but the config's vocab_size is "
                            "1000: use range: [0, 1000]"]


def test_values_files_are_checked_against_their_inputs(write_pipeline, tmp_path):
    (tmp_path / "noise.npz").write_bytes(np.random.default_rng(0).bytes(2000))
    np.savez(tmp_path / "ok.npz", input_ids=np.zeros((3, 1, 8), np.int64), attention_mask=np.ones((2, 1, 8), np.int64))
    np.savez(tmp_path / "bad.npz", ids=np.zeros((1, 9), np.int64), other=np.zeros((1, 8), np.float32),
             mask=np.zeros((1, 8), np.float32))
    path = pipeline(write_pipeline, [
        "{name: input_ids, dtype: int64, shape: [1, 8], values: ok.npz}",
        "{name: attention_mask, dtype: int64, shape: [1, 8], values: ok.npz}",
        "{name: mask, dtype: int64, shape: [1, 8], values: bad.npz}",
        "{name: ids, dtype: int64, shape: [1, 8], values: bad.npz}",
        "{name: missing, dtype: int64, shape: [1, 8], values: bad.npz}",
        "{name: nofile, dtype: int64, shape: [1, 8], values: nofile.npz}",
        "{name: noise, dtype: int64, shape: [1, 8], values: noise.npz}",
        "{name: device, dtype: int64, shape: [1, 8], values: /dev/zero}",
    ])
    assert errors(path) == [
        "models[0].inputs[2].values: 'mask' in bad.npz holds float32; the input is int64",
        "models[0].inputs[3].values: 'ids' in bad.npz has shape [1, 9]; expected [1, 8] or [N, 1, 8]",
        "models[0].inputs[4].values: bad.npz has no array 'missing' (it has: ids, other, mask)",
        f"models[0].inputs[5].values: values file not found: {tmp_path / 'nofile.npz'}",
        "models[0].inputs[6].values: noise.npz is not an .npz archive (numpy.savez writes one)",  # not "pickled data"
        "models[0].inputs[7].values: values file is not a regular file: /dev/zero",  # it exists: not "not found"
    ]
    good = pipeline(write_pipeline, ["{name: input_ids, dtype: int64, shape: [1, 8], values: ok.npz}",
                                     "{name: attention_mask, dtype: int64, shape: [1, 8], values: ok.npz}"])
    assert errors(good) == ["models[0].inputs[1].values: 2 sample(s) here but 3 in inputs[0]; every input's values "
                            "need as many"]


def test_a_model_without_a_source_needs_targets_that_name_artifacts(write_pipeline):
    path = write_pipeline(HEAD.format(source="x", inputs="      - {name: a, shape: [1, 4]}").replace(
        "    source: x\n", ""))
    assert errors(path) == ["models[0]: no source, but variant m/torch/cpu/float32 needs one: give the model a "
                            "source, or exclude its variants that export"]


@pytest.mark.torch
def test_token_ids_stay_within_their_range_and_masks_are_constant(write_pipeline):
    from mlbench.sources.loading import load_model

    path = pipeline(write_pipeline, ["{name: input_ids, dtype: int64, shape: [2, 64], range: [90, 100]}",
                                     "{name: attention_mask, dtype: int64, shape: [2, 64], fill: ones}"])
    pipe = load_pipeline(path)
    model = load_model(pipe.config.models[0], 0, pipe.base_dir)
    for index in range(5):
        ids, mask = model.sample(index)[0]
        assert ids.dtype.is_floating_point is False and int(ids.min()) >= 90 and int(ids.max()) <= 99
        assert len(set(ids.flatten().tolist())) > 5  # drawn, not constant
        assert mask.dtype == ids.dtype and bool((mask == 1).all())
    # keyword binding is off for a plain module; its dict output is flattened by name
    assert [name for name, _ in model.reference] == ["output.logits", "output.hidden"]


@pytest.mark.torch
def test_ids_past_the_embedding_fail_the_model_in_one_line(write_pipeline):
    from mlbench.sources.loading import ModelLoadError, load_model

    path = pipeline(write_pipeline, ["{name: input_ids, dtype: int64, shape: [1, 16], range: [0, 500]}",
                                     "{name: attention_mask, dtype: int64, shape: [1, 16], fill: ones}"])
    pipe = load_pipeline(path)
    with pytest.raises(ModelLoadError) as info:
        load_model(pipe.config.models[0], 0, pipe.base_dir)
    assert str(info.value) == ("model does not run on its inputs (input_ids[1, 16], attention_mask[1, 16]): "
                               f"{ROOT / 'pipelines' / 'models' / 'tiny_text.py'}:21 in forward: "
                               "IndexError: index out of range in self")  # the innermost frame in the user's files


@pytest.mark.torch
def test_values_feed_the_samples_in_order(write_pipeline, tmp_path):
    from mlbench.sources.loading import load_model

    ids = np.arange(3 * 8, dtype=np.int64).reshape(3, 1, 8)
    np.savez(tmp_path / "real.npz", input_ids=ids, attention_mask=np.ones((3, 1, 8), np.int64))
    path = pipeline(write_pipeline, ["{name: input_ids, dtype: int64, shape: [1, 8], values: real.npz}",
                                     "{name: attention_mask, dtype: int64, shape: [1, 8], values: real.npz}"])
    pipe = load_pipeline(path)
    model = load_model(pipe.config.models[0], 0, pipe.base_dir)
    for index in range(4):  # sample k takes row k mod N
        assert model.sample(index)[0][0].tolist() == ids[index % 3].tolist()
    assert model.maker is not None and model.maker.value_samples == 3


@pytest.mark.torch
def test_image_inputs_are_whole_pixels_normalised_for_the_model():
    import torch

    from mlbench.config.models import ModelSpec
    from mlbench.sources.inputs import InputMaker, pixels

    spec = ModelSpec.model_validate({"name": "m", "source": "x.py:M", "inputs": [
        {"name": "image", "kind": "image", "shape": [1, 3, 4, 4], "scale": 1 / 255, "bias": [-0.5, -1.0, 0.25]}]})
    item = spec.inputs[0]
    tensor = InputMaker(spec, 0).make(0)[0]
    raw = pixels(tensor, item)
    assert bool((raw == raw.round()).all()) and float(raw.min()) >= 0 and float(raw.max()) <= 255
    expected = raw / 255 + torch.tensor([-0.5, -1.0, 0.25]).reshape(1, 3, 1, 1)
    assert torch.allclose(tensor, expected, atol=1e-6)
