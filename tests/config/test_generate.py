"""The `generate:` block: each mistake one line with its place, the prompt a measurement axis of every
variant (in its id, not in its artifact's), and backends that run no generative model skipping it in one line."""

from __future__ import annotations

import pytest

from mlbench.errors import UserError
from mlbench.matrix import expand
from mlbench.validate import load_pipeline

LLAMA = ("{config: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2, "
         "num_key_value_heads: 1, vocab_size: 100, max_position_embeddings: 256}}")

PIPELINE = """\
version: 1
name: g
models:
  - name: llama
    source: {source}
    kwargs: {kwargs}
    generate: {generate}
    inputs:
{inputs}
targets:
  - backend: torch
  - backend: onnxruntime
latency: {{warmup: 0, repeats: 1, min_time_s: 0.0, retry_s: 0}}
report: {{dir: out}}
"""


def pipeline(write_pipeline, *, generate: str = "{prompt: [32, 128], new_tokens: 8, context: 256}",
             source: str = "transformers:LlamaForCausalLM", kwargs: str = LLAMA,
             inputs: str = "{name: input_ids, shape: [1, 32], dtype: int64, range: [0, 100]}"):
    body = "\n".join(f"      - {line}" for line in inputs.split(";"))
    return write_pipeline(PIPELINE.format(source=source, kwargs=kwargs, generate=generate, inputs=body))


def errors(path) -> list[str]:
    with pytest.raises(UserError) as info:
        load_pipeline(path)
    return [line.split(": ", 1)[1] for line in str(info.value).splitlines()]


def test_prompt_and_new_tokens_must_fit_the_context(write_pipeline):
    path = pipeline(write_pipeline, generate="{prompt: [32, 128], new_tokens: 160, context: 256}")
    assert errors(path) == ["models[0].generate: prompt 128 + new_tokens 160 = 288 exceeds context 256: raise "
                            "context or shorten the prompt or new_tokens"]
    with pytest.raises(UserError) as info:
        load_pipeline(path)
    assert str(info.value).startswith(f"{path}:7:"), str(info.value)  # the file, line and column of the block


def test_each_generate_mistake_is_one_line_with_its_place(write_pipeline):
    assert errors(pipeline(write_pipeline, generate="{prompt: [32, 32], new_tokens: 8, context: 256}")) == [
        "models[0].generate.prompt: prompt length 32 is listed twice; each length is measured once"]
    assert errors(pipeline(write_pipeline, generate="{prompt: [0], new_tokens: 0, context: 256}")) == [
        "models[0].generate.prompt[0]: Input should be greater than or equal to 1, got 0",
        "models[0].generate.new_tokens: Input should be greater than or equal to 1, got 0"]
    assert errors(pipeline(write_pipeline, generate="{prompt: [32], new_tokens: 8, context: 512}")) == [
        "models[0].generate.context: context 512 exceeds the config's max_position_embeddings 256: the model knows "
        "no positions past it"]
    two_inputs = ("{name: input_ids, shape: [1, 32], dtype: int64, range: [0, 100]};"
                  "{name: attention_mask, shape: [1, 32], dtype: int64, fill: ones}")
    assert errors(pipeline(write_pipeline, inputs=two_inputs)) == [
        "models[0].inputs: a generative model takes its prompt as one input, input_ids (token ids), not input_ids, "
        "attention_mask"]
    flexible = "{name: input_ids, shape: [1, [32, 64]], dtype: int64, range: [0, 100]}"
    assert errors(pipeline(write_pipeline, inputs=flexible)) == [
        "models[0].inputs[0]: input_ids of a generative model is integer token ids of one shape; the prompt lengths "
        "come from generate.prompt"]


def test_a_model_without_a_kv_cache_is_refused_in_one_line(write_pipeline):
    no_cache = LLAMA.replace("vocab_size: 100", "vocab_size: 100, use_cache: false")
    assert errors(pipeline(write_pipeline, kwargs=no_cache)) == [
        "models[0].kwargs: the config sets use_cache: false, so the model keeps no key/value cache: generate needs "
        "one (drop use_cache or the generate block)"]
    assert errors(pipeline(write_pipeline, source="transformers:BertModel", kwargs="{config: {vocab_size: 100}}")) == [
        "models[0].source: transformers:BertModel is not a causal language model: generate needs a decoder with a "
        "key/value cache (a ...ForCausalLM or ...LMHeadModel class)"]


def test_the_prompt_is_a_measurement_axis_in_the_variant_id(write_pipeline):
    variants = expand(load_pipeline(pipeline(write_pipeline)).config)
    assert [v.id for v in variants] == [
        "llama/torch/cpu/float32/p32", "llama/torch/cpu/float32/p128",
        "llama/onnxruntime/float32/cpu/p32", "llama/onnxruntime/float32/cpu/p128"]
    assert [v.prompt for v in variants] == [32, 128, 32, 128]
    assert len({v.artifact_id for v in variants}) == 2  # one export serves both prompt lengths
    assert variants[0].artifact_id == "llama/torch/float32"


def test_exclude_may_name_a_prompt_length(write_pipeline):
    path = pipeline(write_pipeline)
    path.write_text(path.read_text() + "exclude:\n  - {backend: onnxruntime, prompt: p128}\n")
    ids = [v.id for v in expand(load_pipeline(path).config)]
    assert "llama/onnxruntime/float32/cpu/p128" not in ids and len(ids) == 3


NO_CACHE_MODEL = """\
import torch


class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 8)
        self.head = torch.nn.Linear(8, 100)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids))
"""


def test_a_module_without_a_kv_cache_fails_its_generative_variants_in_one_line(write_pipeline, tmp_path):
    from mlbench.run.runner import run

    (tmp_path / "plain.py").write_text(NO_CACHE_MODEL, encoding="utf-8")
    path = pipeline(write_pipeline, source="plain.py:Plain", kwargs="{}")
    path.write_text(path.read_text().replace("  - backend: onnxruntime\n", "") + "history: {enabled: false}\n"
                    "cache: {dir: cache}\n")
    records = run(load_pipeline(path), jobs=1).records
    assert [(r.variant_id, r.status) for r in records] == [("llama/torch/cpu/float32/p32", "failed"),
                                                           ("llama/torch/cpu/float32/p128", "failed")]
    assert records[0].error == ("measure: model 'llama' has no key/value cache mlbench can drive: generate needs a "
                                "transformers causal language model (a ...ForCausalLM or ...LMHeadModel class)")
