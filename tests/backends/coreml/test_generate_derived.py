"""A Core ML generation check is derived from the export alone (`derived_figures.emulated_generation`): the
compute-unit variants of one export emulate the generation once, with identical figures; a warm rerun emulates
nothing and reports the same figures; another prompt length or another number of new tokens emulates again."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("coremltools")

from tests.derived_uses import derived_uses, figures, run_all_ok

pytestmark = [pytest.mark.torch, pytest.mark.slow,
              pytest.mark.skipif(sys.platform == "darwin", reason="checks the Linux path (emulated and estimated)")]

LLAMA = {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1, "vocab_size": 50, "max_position_embeddings": 32}

PIPELINE = """\
version: 1
name: gen-derived
models:
  - name: llama
    source: transformers:LlamaForCausalLM
    kwargs: {{config: {llama}}}
    generate: {{prompt: {prompt}, new_tokens: {new_tokens}, context: 16}}
    inputs:
      - {{name: input_ids, shape: [1, 4], dtype: int64, range: [0, 50]}}
targets:
  - backend: coreml
    precision: [float32]
    compute_units: [cpu_only, all]
    estimate_on: [m1]
cache: {{dir: cache}}
history: {{enabled: false}}
report: {{dir: out, formats: [json]}}
"""


def _run(folder, prompt="[4]", new_tokens=3):
    path = folder / "gen.yaml"
    path.write_text(PIPELINE.format(llama=json.dumps(LLAMA).replace('"', ""), prompt=prompt, new_tokens=new_tokens),
                    encoding="utf-8")
    return run_all_ok(path)


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gen-derived")
    return folder, _run(folder), _run(folder)


def test_two_compute_unit_variants_of_one_export_emulate_the_generation_once(cold_and_warm):
    _, cold, _ = cold_and_warm
    assert [r.axes["compute_units"] for r in cold.records] == ["cpu_only", "all"]
    assert [derived_uses(r, "coreml.emulated_generation") for r in cold.records] == [["computed"], ["cached"]]
    assert cold.work["emulated"] == {"computed": 1, "cached": 0}
    assert cold.work["estimated"] == {"computed": 2, "cached": 0}  # placements and estimates per compute units
    first, second = (r.verify for r in cold.records)
    assert first == second and first.source == "emulated" and first.top1_agreement == 1.0
    assert [r.metrics["verify.token_agreement"].source for r in cold.records] == ["emulated"] * 2
    assert cold.records[0].placement.by_count == {"cpu": 1.0} != cold.records[1].placement.by_count
    assert cold.records[1].metrics["latency.estimated.decode.m1"].source == "estimated"


def test_a_warm_rerun_emulates_nothing_and_reports_the_same_figures(cold_and_warm):
    _, cold, warm = cold_and_warm
    assert warm.work == {"exported": {"computed": 0, "cached": 1}, "estimated": {"computed": 0, "cached": 2},
                         "emulated": {"computed": 0, "cached": 1}, "timed": {"computed": 0, "cached": 0}}
    assert figures(warm) == figures(cold)


def test_another_prompt_length_or_number_of_new_tokens_emulates_again(cold_and_warm):
    folder, cold, _ = cold_and_warm
    longer = _run(folder, prompt="[4, 6]")  # one export serves both prompt lengths; p4's check is found
    assert longer.work["exported"] == {"computed": 0, "cached": 1}
    assert longer.work["emulated"] == {"computed": 1, "cached": 1}
    assert {r.variant_id: derived_uses(r, "coreml.emulated_generation") for r in longer.records if r.axes["prompt"] == "p6"} == {
        "llama/coreml/float32/cpu_only/none/p6": ["computed"], "llama/coreml/float32/all/none/p6": ["cached"]}
    more = _run(folder, new_tokens=4)
    assert more.work["emulated"] == {"computed": 1, "cached": 0}
    assert more.records[0].verify.method != cold.records[0].verify.method  # 5 steps' logits, not 4
