"""The generative metrics every backend reports the same way, and the greedy-generation check against eager."""

from __future__ import annotations

import numpy as np

from mlbench.generate.metrics import GreedyTrace, estimated_metrics, generative_metrics, verify_generation
from mlbench.metrics import compared_by_default, info
from mlbench.records import RunRecord


def test_generative_metrics_keep_their_samples_and_sources():
    metrics = generative_metrics(prefill_ms=[3.0, 1.0, 2.0], decode_ms=[0.5, 0.25, 0.5, 1.0], kv_cache_bytes=8192,
                                 token_agreement=0.75, logits_max_rel=1e-3, verify_source="emulated")
    assert metrics["latency.prefill"].value == 2.0 and metrics["latency.prefill"].samples == [3.0, 1.0, 2.0]
    assert metrics["latency.decode"].value == 0.5 and metrics["latency.decode"].source == "measured"
    assert metrics["tokens_per_s.decode"].value == 2000.0
    assert metrics["memory.kv_cache"].value == 8192 and metrics["memory.kv_cache"].unit == "bytes"
    assert metrics["verify.token_agreement"].source == "emulated"
    record = RunRecord(variant_id="m/torch/cpu/float32/p32", model="m", backend="torch", axes={"prompt": "p32"},
                       artifact_id="m/torch/float32", status="ok", metrics=metrics, started="x", seconds=1.0)
    again = RunRecord.model_validate_json(record.model_dump_json())
    assert again.metrics["latency.decode"].samples == [0.5, 0.25, 0.5, 1.0]
    assert "samples" not in record.model_dump(mode="json")["metrics"]["memory.kv_cache"]


def test_absent_metrics_say_why_and_estimates_are_a_family_per_chip():
    metrics = generative_metrics(prefill_ms=2.0, absent={"latency.decode": "no decode function"})
    assert metrics["latency.decode"].value is None and metrics["tokens_per_s.decode"].reason == "no decode function"
    estimates = estimated_metrics("m4", prefill_ms=12.0, decode_ms=0.8)
    assert {n: m.source for n, m in estimates.items()} == {"latency.estimated.prefill.m4": "estimated",
                                                             "latency.estimated.decode.m4": "estimated"}
    assert info("latency.estimated.decode.m4").label == "≈decode ms/token m4"
    assert {"latency.prefill", "latency.decode", "tokens_per_s.decode", "memory.kv_cache", "verify.token_agreement",
            "verify.logits_max_rel"} <= set(compared_by_default())
    assert info("latency.decode").sampled and info("tokens_per_s.decode").better == "higher"


def test_verify_generation_counts_agreeing_tokens_and_the_worst_step():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 10)).astype(np.float32) * 5
    tokens = [int(t) for t in logits.argmax(1)]
    reference = GreedyTrace(prompt=[1, 2], tokens=tokens, logits=logits)
    moved = logits.copy()
    moved[2, tokens[2]] -= 100.0  # step 2 chooses another token, by far
    actual = GreedyTrace(prompt=[1, 2], tokens=[int(t) for t in moved.argmax(1)], logits=moved)
    check = verify_generation(reference, actual, tolerance=1e-4, min_snr_db=60, reference_name="eager")
    assert check.top1_agreement == 0.75
    assert abs(check.max_rel - 100.0 / float(np.abs(logits).max())) < 1e-5
    assert not check.passed and check.outputs[0].name == "logits"
    same = verify_generation(reference, reference, tolerance=1e-4, min_snr_db=60, reference_name="eager")
    assert same.passed and same.top1_agreement == 1.0 and same.max_rel == 0.0


def _record(variant: str, metrics: dict, status: str = "ok") -> RunRecord:
    model, backend, *values = variant.split("/")
    names = {"torch": ["device", "precision"], "onnxruntime": ["precision", "providers"]}[backend]
    return RunRecord(variant_id=variant, model=model, backend=backend,
                     axes={**dict(zip(names, values[:-1])), "prompt": values[-1]}, artifact_id="a", status=status,
                     metrics=metrics, started="x", seconds=1.0, details={})


def test_the_generation_section_has_a_row_per_variant_and_prompt_with_sources_marked():
    from mlbench.generate.metrics import estimated_metrics
    from mlbench.report.markdown.generation import generation_section

    eager = generative_metrics(prefill_ms=[10.0], decode_ms=[2.0], kv_cache_bytes=32768)
    onnx = {**generative_metrics(prefill_ms=[1.0], decode_ms=[0.5, 0.5], kv_cache_bytes=32768, token_agreement=0.5,
                                 logits_max_rel=1e-3),
            **estimated_metrics("a17pro", prefill_ms=0.25, decode_ms=0.125)}
    lines = generation_section([_record("m/torch/cpu/float32/p32", eager),
                                _record("m/onnxruntime/float32/cpu/p32", onnx),
                                _record("m/onnxruntime/float32/cpu/p128", {}, status="failed")])
    assert lines[:5] == [
        "#### Generation", "",
        "| Variant | Prompt | Prefill ms | Decode ms/token | Tokens/s | vs eager | KV cache | Tokens = eager "
        "| Logits max_rel |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| `torch/cpu/float32` | 32 | 10.00 | 2.00 | 500 | 1.00× | 32.8 kB | reference | – |",
    ]
    assert lines[5] == "| `onnxruntime/float32/cpu` | 32 | 1.00 | 0.500 | 2000 | 4.00× | 32.8 kB | 50% | 1.00e-03 |"
    folded = "\n".join(lines)
    assert "≈0.250" in folded and "≈0.125" in folded  # the estimates per chip, marked, in the folded columns
    assert generation_section([_record("m/torch/cpu/float32/p32", {}, status="skipped")]) == []


def test_compare_tests_a_generation_on_its_own_decode_samples():
    from mlbench.compare.comparison import _samples

    record = _record("m/torch/cpu/float32/p32", generative_metrics(decode_ms=[1.0, 2.0, 3.0]))
    assert _samples(record, "latency.decode") == [1.0, 2.0, 3.0]
    assert _samples(record, "tokens_per_s.decode") == [1.0, 2.0, 3.0]
    assert _samples(record, "latency.median") is None  # no forward-pass latency in a generative record
