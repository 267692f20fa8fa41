"""Hugging Face transformers sources, offline: built from small configs with random weights, or read from a
save_pretrained folder; inputs passed by name, ModelOutput flattened by name, and a whole pipeline run."""

from __future__ import annotations

import json
import sys

import pytest

from mlbench.config.models import ModelSpec
from mlbench.validate import load_pipeline

pytestmark = pytest.mark.torch
transformers = pytest.importorskip("transformers")

BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "vocab_size": 100, "max_position_embeddings": 64}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def spec(source: str, kwargs: dict | None = None, **extra) -> ModelSpec:
    return ModelSpec.model_validate({"name": "m", "source": source, "kwargs": kwargs or {}, "inputs": [
        {"name": "input_ids", "dtype": "int64", "shape": [1, 16], "range": [0, 100]},
        {"name": "attention_mask", "dtype": "int64", "shape": [1, 16], "fill": "ones"}], **extra})


def test_a_config_builds_a_model_whose_inputs_go_by_name_and_outputs_keep_their_names(tmp_path):
    from mlbench.sources.binding import BoundModule
    from mlbench.sources.loading import load_model

    model = load_model(spec("transformers:BertModel", {"config": BERT}), 0, tmp_path)
    assert isinstance(model.module, BoundModule) and model.module.input_names == ["input_ids", "attention_mask"]
    assert [(n, list(a.shape)) for n, a in model.reference] == [("output.last_hidden_state", [1, 16, 32]),
                                                                ("output.pooler_output", [1, 32])]
    # the same seed builds the same weights; another sample's reference comes from the same module
    again = load_model(spec("transformers:BertModel", {"config": BERT}), 0, tmp_path)
    assert again.digest == model.digest
    assert [n for n, _ in model.sample(1)[1]] == ["output.last_hidden_state", "output.pooler_output"]


def test_an_auto_class_takes_the_model_type_from_the_config(tmp_path):
    from mlbench.sources.loading import load_model

    model = load_model(spec("transformers:AutoModel", {"config": {"model_type": "bert", **BERT}}), 0, tmp_path)
    assert type(model.module.module).__name__ == "BertModel"  # type: ignore[union-attr]


@pytest.mark.parametrize(("source", "kwargs", "message"), [
    ("transformers:BertModle", {"config": BERT}, f"transformers {transformers.__version__} has no class 'BertModle'"),
    ("transformers:BertModel", {"config": BERT, "weights": None}, "transformers sources take kwargs: config (got weights)"),
    ("transformers:AutoModel", {"config": BERT}, "AutoModel needs config.model_type (e.g. bert) to choose its config"),
    ("transformers:BertModel", {"config": {**BERT, "hidden_size": 33}},
     "building transformers.BertModel failed: ValueError: The hidden size (33) is not a multiple of the number of "
     "attention heads (2)"),
])
def test_mistakes_are_one_line(tmp_path, source, kwargs, message):
    from mlbench.sources.loading import ModelLoadError, load_model

    with pytest.raises(ModelLoadError) as info:
        load_model(spec(source, kwargs), 0, tmp_path)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_without_transformers_the_reason_is_one_line(tmp_path, monkeypatch):
    from mlbench.sources.loading import ModelLoadError, load_model

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(ModelLoadError) as info:
        load_model(spec("transformers:BertModel", {"config": BERT}), 0, tmp_path)
    assert str(info.value) == "transformers is not installed; install it with pip install 'mlbench-ondevice[transformers]'"


def test_a_save_pretrained_folder_loads_with_the_same_outputs(tmp_path):
    import numpy as np

    from mlbench.sources.loading import load_model

    built = load_model(spec("transformers:BertModel", {"config": BERT}), 0, tmp_path)
    built.module.module.save_pretrained(tmp_path / "bert_saved")  # type: ignore[union-attr]
    assert (tmp_path / "bert_saved" / "model.safetensors").is_file()
    loaded = load_model(spec("bert_saved/"), 0, tmp_path)
    for (name, a), (other, b) in zip(built.reference, loaded.reference):
        assert name == other and np.allclose(a, b, atol=1e-6)
    assert loaded.source_digest is not None
    with pytest.raises(Exception, match="a saved Hugging Face folder takes kwargs: class"):
        load_model(spec("bert_saved/", {"config": {}}), 0, tmp_path)


PIPELINE = """\
version: 1
name: hf
models:
  - name: bert
    source: transformers:BertModel
    kwargs: {{config: {config}}}
    inputs:
      - {{name: input_ids, dtype: int64, shape: [1, 16], range: [0, 100]}}
      - {{name: attention_mask, dtype: int64, shape: [1, 16], fill: ones}}
  - name: gpt2
    source: transformers:GPT2LMHeadModel
    kwargs: {{config: {{n_embd: 32, n_layer: 1, n_head: 2, vocab_size: 100, n_positions: 32, use_cache: false}}}}
    inputs:
      - {{name: input_ids, dtype: int64, shape: [1, 16], range: [0, 100]}}
targets:
  - backend: torch
  - backend: coreml
    precision: [float16]
  - backend: onnxruntime
latency: {{warmup: 0, repeats: 2, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: 2, tolerance: {{float16: 5.0e-2, float32: 1.0e-3}}}}
report: {{dir: out, formats: [json]}}
history: {{enabled: false}}
"""


@pytest.mark.slow
def test_a_pipeline_runs_an_encoder_and_a_decoder_on_every_backend(write_pipeline, tmp_path):
    from mlbench.run import run

    path = write_pipeline(PIPELINE.format(config=json.dumps(BERT)))
    report = run(load_pipeline(path), jobs=1)
    by_id = {r.variant_id: r for r in report.records}
    assert {v: r.status for v, r in by_id.items()} == {
        f"{m}/{b}": "ok" for m in ("bert", "gpt2")
        for b in ("torch/cpu/float32", "coreml/float16/all/none", "onnxruntime/float32/cpu")}
    coreml = by_id["gpt2/coreml/float16/all/none"]
    assert coreml.verify is not None and coreml.verify.source == "emulated" and coreml.verify.samples == 2
    assert [o.name for o in coreml.verify.outputs] == ["output.logits"]
    onnx = by_id["bert/onnxruntime/float32/cpu"]
    assert onnx.verify is not None and onnx.verify.max_rel < 1e-4
    assert [o.name for o in onnx.verify.outputs] == ["output.last_hidden_state", "output.pooler_output"]


@pytest.mark.slow
def test_w8a8_on_a_transformer_leaves_its_integer_ops_alone(write_pipeline):
    from mlbench.run import run

    text = PIPELINE.format(config=json.dumps(BERT)).replace(
        "  - backend: torch\n  - backend: coreml\n    precision: [float16]\n  - backend: onnxruntime\n",
        "  - backend: coreml\n    precision: [float16]\n    optimize: [none, w8a8]\n").replace(
        "latency:", "exclude:\n  - {model: gpt2}\noptimizations:\n  w8a8: {kind: linear_quantize_activations}\n"
                    "latency:").replace("float16: 5.0e-2,", "float16: 5.0e-2, w8a8: 0.25,")
    report = run(load_pipeline(write_pipeline(text)), jobs=1)
    records = {r.axes["optimize"]: r for r in report.records}
    assert {k: (r.status, r.error) for k, r in records.items()} == {"none": ("ok", None), "w8a8": ("ok", None)}
    w8a8 = records["w8a8"]
    ops = report.artifacts[w8a8.artifact.key]["program"]["op_counts"]  # type: ignore[union-attr]
    assert ops.get("quantize", 0) > 0
    ratio = w8a8.metrics["size.weights"].value / records["none"].metrics["size.weights"].value  # type: ignore[operator]
    assert ratio < 0.95  # int8 weights; tensors under 2048 elements (most of this tiny model) stay float16
    assert w8a8.verify is not None and w8a8.verify.source == "emulated" and w8a8.verify.passed
