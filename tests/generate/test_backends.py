"""Generation with a key/value cache, per backend: decoding with the cache gives the logits of a full forward
pass over the same tokens (eager's StaticCache, ONNX Runtime's decoder graph, one export for two prompt
lengths), and a pipeline run carries the generative metrics and its Markdown section."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mlbench.generate.eager import CachedGenerator, full_forward_logits  # noqa: E402

LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "vocab_size": 100, "max_position_embeddings": 128}
GPT2 = {"n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100, "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}


def tiny(kind: str):
    torch.manual_seed(0)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2)).eval()


def expected(lm, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """Each step's logits from full forward passes without a cache: the prompt's last, then after each token."""
    full = full_forward_logits(lm, prompt + tokens)
    return full[len(prompt) - 1:]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_eager_decode_with_the_static_cache_equals_a_full_forward(kind):
    lm = tiny(kind)
    prompt = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(1))
    generator = CachedGenerator(lm, context=32)
    with torch.inference_mode():
        trace = generator.generate(prompt, new_tokens=6)
    assert trace.logits.shape == (7, 100) and trace.tokens == [int(r.argmax()) for r in trace.logits]
    want = expected(lm, prompt[0].tolist(), trace.tokens[:-1])
    assert np.abs(trace.logits - want).max() < 1e-4
    assert generator.kv_bytes() == {"llama": 2 * 2 * 1 * 32 * 16 * 4, "gpt2": 1 * 2 * 2 * 32 * 16 * 4}[kind]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_one_onnx_decoder_serves_two_prompt_lengths_with_the_logits_of_a_full_forward(kind, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from mlbench.backends.onnxruntime.generate import BoundDecoder
    from mlbench.backends.onnxruntime.generate_export import export_decoder

    lm = tiny(kind)
    result = export_decoder(lm, precision="float32", opset=None, dest=tmp_path)
    decoder = BoundDecoder(ort.InferenceSession(str(result.artifact)))
    for length in (5, 40):
        prompt = np.random.default_rng(length).integers(0, 100, size=(1, length), dtype=np.int64)
        trace = decoder.generate(prompt, new_tokens=4)
        want = expected(lm, prompt[0].tolist(), trace.tokens[:-1])
        assert np.abs(trace.logits - want).max() < 1e-4, length
        assert decoder.length == length + 4
    per_position = {"llama": 2 * 2 * 1 * 16 * 4, "gpt2": 1 * 2 * 2 * 16 * 4}[kind]
    assert decoder.bytes_per_position() == per_position


PIPELINE = """\
version: 1
name: gen
models:
  - name: llama
    source: transformers:LlamaForCausalLM
    kwargs: {{config: {llama}}}
    generate: {{prompt: [8, 24], new_tokens: 4, context: 32}}
    inputs:
      - {{name: input_ids, shape: [1, 8], dtype: int64, range: [0, 100]}}
targets:
  - backend: torch
  - backend: onnxruntime
  - backend: executorch
latency: {{warmup: 1, repeats: 4, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
history: {{enabled: false}}
report: {{dir: out, formats: [json, markdown, html]}}
"""


def test_a_generative_pipeline_reports_prefill_decode_and_its_section(tmp_path):
    pytest.importorskip("onnxruntime")
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    config = json.dumps(LLAMA).replace('"', "")
    path = tmp_path / "gen.yaml"
    path.write_text(PIPELINE.format(llama=config), encoding="utf-8")
    report = run(load_pipeline(path), jobs=1)
    records = {r.variant_id: r for r in report.records}
    assert list(records) == ["llama/torch/cpu/float32/p8", "llama/torch/cpu/float32/p24",
                             "llama/onnxruntime/float32/cpu/p8", "llama/onnxruntime/float32/cpu/p24",
                             "llama/executorch/xnnpack/float32/none/p8", "llama/executorch/xnnpack/float32/none/p24"]
    skipped = records["llama/executorch/xnnpack/float32/none/p8"]
    assert (skipped.status, skipped.error) == ("skipped", "the executorch backend does not run generative models "
                                               "yet: model 'llama' has a generate block (prefill and decode against "
                                               "a key/value cache)")
    onnx = records["llama/onnxruntime/float32/cpu/p24"]
    assert onnx.status == "ok", onnx.error
    assert len(onnx.metrics["latency.decode"].samples) == 4  # one timed round of 4 decode steps
    assert onnx.metrics["verify.token_agreement"].value == 1.0
    assert onnx.metrics["verify.logits_max_rel"].value < 1e-4
    assert onnx.metrics["memory.kv_cache"].value == records["llama/torch/cpu/float32/p8"].metrics[
        "memory.kv_cache"].value == 2 * 2 * 1 * 32 * 16 * 4
    assert records["llama/onnxruntime/float32/cpu/p8"].artifact.key == onnx.artifact.key  # one export
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "#### Generation" in markdown
    assert "| `torch/cpu/float32` |" in markdown
    assert "Decode ms/token by variant" in (tmp_path / "out" / "report.html").read_text()
