"""A generative model on Core AI with the real packages: the KV cache as Core AI state, prefill and decode as two
functions of one asset, Core AI's reference runtime decoding with the cache equal to a full forward pass over the
same tokens, and a pipeline run carrying token agreement, logits error, cache bytes and per-function estimates."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench.backends.coreai.availability import unavailable

pytestmark = [pytest.mark.torch, pytest.mark.coreai,
              pytest.mark.skipif(unavailable() is not None, reason=f"needs Core AI: {unavailable()}")]

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "vocab_size": 100, "max_position_embeddings": 128}
CONTEXT = 32


def tiny_llama():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()


@pytest.fixture(scope="module")
def asset(tmp_path_factory):
    from mlbench.backends.coreai.generate import export_generation

    return export_generation(tiny_llama(), context=CONTEXT, precision="float32", optimization=None,
                             dest=tmp_path_factory.mktemp("gen")).artifact


def test_prefill_and_decode_are_two_functions_sharing_the_cache_as_state(asset):
    from mlbench.backends.coreai.analysis import analyse_asset
    from mlbench.backends.coreai.generate import kv_cache_bytes

    analysis = analyse_asset(asset)
    functions = {f["name"]: f for f in analysis["functions"]}
    assert sorted(functions) == ["decode", "prefill"]
    cache = "NDArray (Float32, 2 × 1 × 1 × 32 × 16)"  # layers, batch, kv heads, context, head size
    for name in ("prefill", "decode"):
        assert functions[name]["states"] == [{"name": "key_cache", "type": cache}, {"name": "value_cache", "type": cache}]
    assert [i["type"] for i in functions["prefill"]["inputs"]] == ["NDArray (Int32, 1 × ?)",
                                                                   "NDArray (Float32, 1 × 1 × ? × ?)"]
    assert [i["type"] for i in functions["decode"]["inputs"]] == ["NDArray (Int32, 1 × 1)",
                                                                  "NDArray (Float32, 1 × 1 × 1 × ?)"]
    assert kv_cache_bytes(analysis) == 2 * 2 * 1 * 1 * 32 * 16 * 4
    params = sum(p.numel() for p in tiny_llama().parameters())
    assert analysis["storage_types"]["Float32"] < 1.2 * params  # the two functions share one copy of the weights


@pytest.mark.parametrize("length", [5, 12])
def test_reference_decode_with_the_state_equals_a_full_forward(asset, length):
    """One asset serves two prompt lengths; each step's logits equal a full forward over the same tokens."""
    from mlbench.backends.coreai.generate import reference_generation
    from mlbench.generate.eager import full_forward_logits

    lm = tiny_llama()
    prompt = [int(t) for t in np.random.default_rng(length).integers(0, 100, size=length)]
    fed = [7, 42, 3]
    trace, runs, details = reference_generation(asset, prompt, fed)
    want = full_forward_logits(lm, prompt + fed)[length - 1:]
    assert trace.logits.shape == (4, 100)
    assert np.abs(trace.logits - want).max() < 1e-4
    assert sorted(runs[1].states) == ["key_cache", "value_cache"]  # the states the decode steps carried
    assert np.abs(runs[1].states["key_cache"][:, :, :, length + len(fed):]).max() == 0  # nothing past the end
    assert sorted(details["seconds_by_function"]) == ["decode", "prefill"]
    assert len(details["seconds_by_function"]["decode"]) == len(fed)


@pytest.mark.slow  # past 10 s on a quiet 2-core machine: out of the fast lane
def test_a_pipeline_reports_token_agreement_cache_bytes_and_estimates(tmp_path):
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""\
version: 1
name: gen
models:
  - name: llama
    source: transformers:LlamaForCausalLM
    kwargs: {{config: {LLAMA}}}
    generate: {{prompt: [6], new_tokens: 3, context: {CONTEXT}}}
    inputs: [{{name: input_ids, dtype: int64, shape: [1, 6], range: [0, 100]}}]
targets:
  - backend: coreai
    precision: [float32]
    estimate_on: [a17pro]
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown]}}
""", encoding="utf-8")
    (record,) = run(load_pipeline(path)).records
    assert record.status == "ok", record.error
    metrics = record.metrics
    assert metrics["verify.token_agreement"].value == 1.0 and metrics["verify.token_agreement"].source == "reference"
    assert metrics["verify.logits_max_rel"].value < 1e-4
    assert metrics["memory.kv_cache"].value == 2 * 2 * 32 * 16 * 4
    for name in ("latency.prefill", "latency.decode", "tokens_per_s.decode"):
        assert metrics[name].value is None and metrics[name].reason.startswith("Core AI runs on a device only")
    prefill, decode = metrics["latency.estimated.prefill.a17pro"], metrics["latency.estimated.decode.a17pro"]
    assert prefill.source == decode.source == "estimated" and prefill.value > 0 and decode.value > 0
    assert record.details["reference_runtime"]["note"].endswith("not latency")
    assert record.verify.source == "reference" and record.verify.passed
    assert record.placement.source == "estimated" and "The decode function's" in record.placement.note
