"""benchmarks/calibration_generation.py: Apple's Llama 3.1 steps read from the calibration file, and the
comparison kept runnable on a tiny Llama of the same structure (exported, scaled by layers, estimated)."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests.conftest import ROOT


def module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("calibration_generation")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_articles_steps_are_read_per_table_at_one_context():
    generation = module()
    if not generation.PUBLISHED_PATH.exists():
        pytest.skip(f"no calibration file at {generation.PUBLISHED_PATH}")
    rows = generation.published(2048)
    assert rows == {"Table 1": {"tokens_per_s": 0.19, "ttft_ms": 5374.15},
                    "Table 2": {"tokens_per_s": 1.25, "ttft_ms": 933.89},
                    "Table 3": {"tokens_per_s": 16.26, "ttft_ms": 128.32},
                    "Table 4": {"tokens_per_s": 33.67, "ttft_ms": 51.91}}
    assert generation.published(8192)["Table 4"] == {"tokens_per_s": 21.46}  # time to first token: 2048 only


@pytest.mark.slow
def test_the_comparison_runs_on_a_tiny_llama_and_says_it_scaled_by_layers():
    pytest.importorskip("coremltools")
    pytest.importorskip("transformers")
    generation = module()
    lines = generation.report(context=64, layers=1, widths=generation.TINY)
    assert "exported with 1 decoder layer(s)" in lines[0] and "scaled to 4 layers" in lines[0]
    assert "embedding, rotary tables, final norm and lm_head once" in lines[0]
    table = {line.split(":")[0]: line for line in lines[2:7]}
    assert "not estimated: mlbench exports the cache as state only" in table["Table 2"]
    gains = [line for line in lines if "->" in line]
    assert [g.split(":")[0].strip() for g in gains] == ["static -> state_sdpa", "state_sdpa -> state_sdpa_int4",
                                                         "state_eager -> state_sdpa (no article row; the article's "
                                                         "Table 3 adds both)"]


def test_layers_are_repeated_between_the_first_and_the_final_norm():
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, Totals
    from mlbench.records import OpPlacement, Placement

    generation = module()
    types = ["gather", "pow", "linear", "add", "pow", "linear", "add", "pow", "linear"]  # embed, 1 layer, norm, head
    layers = [LayerInfo(name=f"op{i}", op_type=t, inputs=[i - 1] if i else []) for i, t in enumerate(types)]
    analysis = ProgramAnalysis(path="x", model_type="mlProgram", spec_version=9, precision="FLOAT16", op_counts={},
                               const_count=0, layers=layers, package_size_bytes=1, inputs=[], outputs=[],
                               totals=Totals(compute_ops=9, const_ops=0, weight_ops=0, params=0, weight_bytes=0,
                                             macs=0, flops=0, macs_complete=True))
    placement = Placement(source="estimated", method="test", preferred="gpu", compute_ops=9, constants=0,
                          by_count={"gpu": 1.0}, switches=0,
                          ops=[OpPlacement(name=x.name, op_type=x.op_type, device="gpu") for x in layers])
    scaled, placed = generation.scale_layers(analysis, placement, 1, 3)
    assert [x.op_type for x in scaled.layers] == ["gather", *["pow", "linear", "add", "pow", "linear", "add"] * 3,
                                                  "pow", "linear"]
    assert [op.name for op in placed.ops] == [x.name for x in scaled.layers]
    # inside each copy an op reads its own copy's ops; the final norm reads the last copy
    assert scaled.layers[8].inputs == [7] and scaled.layers[14].inputs == [13] and scaled.layers[-2].inputs == [18]
    with pytest.raises(ValueError, match="expected 5 RMSNorms"):
        generation.scale_layers(analysis, placement, 2, 3)
