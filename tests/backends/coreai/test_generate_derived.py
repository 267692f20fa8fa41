"""A Core AI generation check is derived from the asset alone (`derived_figures.reference_generation`): the
compute-unit variants of one asset run the reference runtime's generation once, with identical figures; a warm
rerun runs it not at all and reports the same figures; another prompt length runs it again."""

from __future__ import annotations

import pytest

from mlbench.backends.coreai.availability import unavailable
from tests.derived_uses import derived_uses, figures, run_all_ok

pytestmark = [pytest.mark.torch, pytest.mark.coreai, pytest.mark.slow,
              pytest.mark.skipif(unavailable() is not None, reason=f"needs Core AI: {unavailable()}")]

pytest.importorskip("torch")
pytest.importorskip("transformers")

LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "vocab_size": 100, "max_position_embeddings": 128}

PIPELINE = """\
version: 1
name: gen-derived
models:
  - name: llama
    source: transformers:LlamaForCausalLM
    kwargs: {{config: {llama}}}
    generate: {{prompt: {prompt}, new_tokens: 3, context: 32}}
    inputs: [{{name: input_ids, dtype: int64, shape: [1, 5], range: [0, 100]}}]
targets:
  - backend: coreai
    precision: [float32]
    compute_units: [cpu_only, all]
    estimate_on: [a17pro]
cache: {{dir: cache}}
history: {{enabled: false}}
report: {{dir: out, formats: [json]}}
"""


def _run(folder, prompt="[5]"):
    path = folder / "pipeline.yaml"
    path.write_text(PIPELINE.format(llama=LLAMA, prompt=prompt), encoding="utf-8")
    return run_all_ok(path)


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coreai-gen-derived")
    return folder, _run(folder), _run(folder)


def test_two_compute_unit_variants_of_one_asset_run_the_reference_generation_once(cold_and_warm):
    _, cold, _ = cold_and_warm
    assert [r.axes["compute_units"] for r in cold.records] == ["cpu_only", "all"]
    assert [derived_uses(r, "coreai.reference_generation") for r in cold.records] == [["computed"], ["cached"]]
    assert cold.work["reference-run"] == {"computed": 1, "cached": 0}
    assert cold.work["estimated"] == {"computed": 2, "cached": 0}  # the estimates per compute units
    first, second = (r.verify for r in cold.records)
    assert first == second and first.source == "reference" and first.top1_agreement == 1.0
    assert [r.metrics["verify.token_agreement"].source for r in cold.records] == ["reference"] * 2
    assert cold.records[0].placement.by_count == {"cpu": 1.0} != cold.records[1].placement.by_count
    assert cold.records[0].details["reference_runtime"] == cold.records[1].details["reference_runtime"]


def test_a_warm_rerun_runs_no_reference_generation_and_reports_the_same_figures(cold_and_warm):
    _, cold, warm = cold_and_warm
    assert warm.work == {"exported": {"computed": 0, "cached": 1}, "reference-run": {"computed": 0, "cached": 1},
                         "estimated": {"computed": 0, "cached": 2}, "timed": {"computed": 0, "cached": 0}}
    assert figures(warm, "reference_runtime") == figures(cold, "reference_runtime")


def test_another_prompt_length_runs_the_reference_generation_again(cold_and_warm):
    folder, _, _ = cold_and_warm
    longer = _run(folder, prompt="[5, 12]")
    assert longer.work["exported"] == {"computed": 0, "cached": 1}
    assert longer.work["reference-run"] == {"computed": 1, "cached": 1}
    assert longer.work["estimated"] == {"computed": 2, "cached": 2}
