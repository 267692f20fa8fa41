"""More compression recipes: 4-bit per-block weights, W8A8 (activations calibrated by mlbench's interpreter
off macOS), and joint compression (a chain of recipes). Each makes a package whose weights shrink as
expected and whose program still computes what the model computes."""

from __future__ import annotations

import pytest

from mlbench.errors import UserError
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

PIPELINE = f"""\
version: 1
name: recipes
models:
  - name: cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    kwargs: {{width: 32}}
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
  - backend: coreml
    precision: [float16]
    compute_units: [cpu_and_ne]
    optimize: OPTIMIZE
optimizations:
  int4block: {{kind: linear_quantize, dtype: int4, granularity: per_block, block_size: 16}}
  w8a8: {{kind: linear_quantize_activations}}
  prune50: {{kind: prune, target_sparsity: 0.5}}
  palettize4: {{kind: palettize, nbits: 4, mode: uniform}}
  sparse_palettized: {{kind: chain, steps: [prune50, palettize4]}}
latency: {{warmup: 0, repeats: 1, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: 3, tolerance: {{float16: 5.0e-2, int4block: 0.3, w8a8: 0.3, prune50: 1.0, palettize4: 0.3,
                                  sparse_palettized: 1.0}}}}
report: {{dir: out, formats: [json]}}
history: {{enabled: false}}
"""


def errors(write_pipeline, text: str) -> list[str]:
    with pytest.raises(UserError) as info:
        load_pipeline(write_pipeline(text))
    return [line.split(": ", 1)[1] for line in str(info.value).splitlines()]


def test_recipe_mistakes_are_one_line(write_pipeline):
    text = PIPELINE.replace("OPTIMIZE", "[chained]").replace(
        "  w8a8:", "  chained: {kind: chain, steps: [prune50, palletize4]}\n"
                   "  badblock: {kind: linear_quantize, block_size: 16}\n  w8a8:")
    assert errors(write_pipeline, text) == [
        "optimizations.badblock: block_size is only allowed with granularity per_block",
    ]
    text = text.replace("  badblock: {kind: linear_quantize, block_size: 16}\n", "")
    assert errors(write_pipeline, text) == [
        "targets[0]: recipe 'chained' step 'palletize4' must name a palettize, linear_quantize or prune recipe; "
        "did you mean 'palettize4'?"]
    low = PIPELINE.replace("OPTIMIZE", "[int4block, w8a8]").replace(
        "    optimize:", "    deployment_target: iOS17\n    optimize:")
    assert errors(write_pipeline, low) == [
        "targets[0].deployment_target: deployment target iOS17 is too low for linear_quantize int4: it needs iOS18 "
        "or later"]


def test_another_backends_recipe_is_refused_on_a_coreml_target(write_pipeline):
    """A recipe kind another backend registers (LiteRT's quantizer) is no Core ML compression: refused when
    validating, not found out by the exporter, neither named directly nor as a chain's step."""
    text = PIPELINE.replace("OPTIMIZE", "[none, dyn8]").replace(
        "  w8a8:", "  dyn8: {kind: litert_quantize, scheme: dynamic_int8}\n  w8a8:")
    assert errors(write_pipeline, text) == [
        "targets[0].optimize[1]: recipe 'dyn8' is of kind 'litert_quantize', which Core ML cannot apply "
        "(Core ML's kinds: palettize, linear_quantize, prune, linear_quantize_activations, chain)"]
    chained = text.replace("[none, dyn8]", "[pruned_dyn8]").replace(
        "  w8a8:", "  pruned_dyn8: {kind: chain, steps: [prune50, dyn8]}\n  w8a8:")
    assert errors(write_pipeline, chained) == [
        "targets[0]: recipe 'pruned_dyn8' step 'dyn8' must name a palettize, linear_quantize or prune recipe"]


@pytest.mark.torch
@pytest.mark.slow  # past 10 s on a quiet 2-core machine: out of the fast lane
def test_int4_blocks_w8a8_and_joint_compression_shrink_the_weights_and_stay_correct(write_pipeline):
    from mlbench.run import run

    path = write_pipeline(PIPELINE.replace("OPTIMIZE", "[none, int4block, w8a8, palettize4, sparse_palettized]"))
    report = run(load_pipeline(path), jobs=1)
    records = {r.axes["optimize"]: r for r in report.records}
    assert {k: (r.status, r.error) for k, r in records.items()} == dict.fromkeys(("none", "int4block", "w8a8", "palettize4", "sparse_palettized"), ("ok", None))
    weights = {k: r.metrics["size.weights"].value for k, r in records.items()}
    # float16 weights → 4 bits plus one float16 scale per block of 16: about 0.3 of the bytes
    assert 0.2 < weights["int4block"] / weights["none"] < 0.4
    # W8A8: int8 weights, about half of float16
    assert 0.45 < weights["w8a8"] / weights["none"] < 0.65
    # sparse palettized: fewer bytes than palettized alone
    assert weights["sparse_palettized"] < weights["palettize4"]
    for key, record in records.items():
        assert record.verify is not None and record.verify.source == "emulated", key
        assert record.verify.samples == 3
    deployment = {k: report.artifacts[r.artifact.key]["export"]["deployment_target"]  # type: ignore[union-attr]
                  for k, r in records.items()}
    # one target: every variant at the lowest target all of them need (int4 blocks and the chain: iOS18)
    assert deployment == dict.fromkeys(records, "iOS18")
    ops = {k: report.artifacts[r.artifact.key]["program"]["op_counts"] for k, r in records.items()}  # type: ignore[union-attr]
    assert ops["w8a8"].get("quantize", 0) > 0 and ops["w8a8"].get("dequantize", 0) > 0


def test_a_models_variants_in_one_target_share_the_lowest_deployment_target_all_of_them_need():
    from mlbench.backends.coreml.deployment import InvalidExportOptions, shared_deployment_target

    palettize4 = {"kind": "palettize", "nbits": 4, "mode": "kmeans"}
    w8a8 = {"kind": "linear_quantize_activations"}
    assert shared_deployment_target("float16", None, [("float16", None)]) == "iOS15"
    assert shared_deployment_target("float16", None, [("float16", None), ("float16", palettize4)]) == "iOS16"
    assert shared_deployment_target("float32", palettize4, [("float32", palettize4), ("float16", w8a8)]) == "iOS17"
    # a sibling's invalid recipe is its own export's error, not this variant's
    assert shared_deployment_target("float16", None, [("float16", {"kind": "palettize", "nbits": 5})]) == "iOS15"
    with pytest.raises(InvalidExportOptions, match="unknown optimization kind 'zip'"):
        shared_deployment_target("float16", {"kind": "zip"}, [])


@pytest.mark.torch
def test_float16_and_palettized_variants_take_the_same_inputs_so_the_estimate_compares_only_the_weights(write_pipeline):
    """At per-variant minimums `none` (iOS15) took float32 inputs cast on the CPU and palettize4 (iOS16) float16
    ones: the estimate gave `none` a device switch palettize4 did not have. An include entry is a target of its own."""
    from mlbench.run import run

    text = PIPELINE.replace("OPTIMIZE", "[none, palettize4]").replace(
        "    compute_units: [cpu_and_ne]\n", "    compute_units: [cpu_and_ne]\n    estimate_on: [a16]\n")
    text = text.replace("optimizations:", "include:\n  - {model: cnn, backend: coreml, precision: float32, "
                        "compute_units: cpu_only, optimize: none}\noptimizations:")
    report = run(load_pipeline(write_pipeline(text)), jobs=1)
    records = {r.variant_id: r for r in report.records}
    assert {k: r.status for k, r in records.items()} == dict.fromkeys(
        ("cnn/coreml/float16/cpu_and_ne/none", "cnn/coreml/float16/cpu_and_ne/palettize4",
         "cnn/coreml/float32/cpu_only/none"), "ok")
    exported = {k: report.artifacts[r.artifact.key] for k, r in records.items()}  # type: ignore[union-attr]
    assert {k: (a["export"]["deployment_target"], [i["dtype"] for i in a["program"]["inputs"]])
            for k, a in exported.items()} == {
        "cnn/coreml/float16/cpu_and_ne/none": ("iOS16", ["fp16"]),
        "cnn/coreml/float16/cpu_and_ne/palettize4": ("iOS16", ["fp16"]),
        "cnn/coreml/float32/cpu_only/none": ("iOS15", ["fp32"]),
    }
    switches = {k: records[k].details["latency_estimate"]["a16"]["switches"]
                for k in ("cnn/coreml/float16/cpu_and_ne/none", "cnn/coreml/float16/cpu_and_ne/palettize4")}
    assert switches == dict.fromkeys(switches, 0)
