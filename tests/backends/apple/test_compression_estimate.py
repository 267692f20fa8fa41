"""Compression in the latency estimate (compression_rules.yaml), the costs that carry to chips without
calibration rows, and their leave-one-chip-out band (issue 36)."""

from __future__ import annotations

from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, Totals
from mlbench.backends.apple.calibration.profile import chip_parameters, cost_scale, transfer_donor
from mlbench.backends.apple.chips import builtin_chips, calibration
from mlbench.backends.apple.compression_rules import apple_rule_table, load_compression_rules
from mlbench.backends.apple.latency import estimate_latency, latency_metrics
from mlbench.records import OpPlacement, Placement
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

CONV = {"op_type": "conv", "output_dtype": "fp16", "output_shape": [1, 256, 28, 28], "flops": 2 * 256 * 256 * 9 * 784,
        "params": 256 * 256 * 9}


def program(kind: str, blocks: int = 8) -> tuple[ProgramAnalysis, Placement]:
    """`blocks` 3x3 convs, 256 channels at 28x28, stored as float16, palettized to 4 bits, or W8A8 (each conv
    between a quantize and a dequantize, weights int8); every op on the Neural Engine."""
    activations = 2 * 2 * 256 * 784  # float16 input and output
    layers: list[LayerInfo] = []
    for i in range(blocks):
        params = CONV["params"]
        weights = {"float16": 2 * params, "palettize4": params // 2 + 16 * 2, "w8a8": params}[kind]
        storage = {"float16": "fp16", "palettize4": "lut_to_dense(uint4 indices, fp16 lut)",
                   "w8a8": "affine_dequantize(int8 quantized_data, fp16 scale)"}[kind]
        if kind == "w8a8":
            layers.append(LayerInfo(name=f"q_{i}", op_type="quantize", output_dtype="int8",
                                    output_shape=[1, 256, 28, 28], flops=256 * 784, bytes=3 * 256 * 784))
        layers.append(LayerInfo(name=f"conv_{i}", **{**CONV, "bytes": activations + weights, "weight_bytes": weights,
                                                     "weight_storage": storage}))
        if kind == "w8a8":
            layers.append(LayerInfo(name=f"dq_{i}", op_type="dequantize", output_dtype="fp16",
                                    output_shape=[1, 256, 28, 28], flops=256 * 784, bytes=3 * 256 * 784))
    counts: dict[str, int] = {}
    for layer in layers:
        counts[layer.op_type] = counts.get(layer.op_type, 0) + 1
    analysis = ProgramAnalysis(
        path="x.mlpackage", model_type="mlProgram", spec_version=8, precision="FLOAT16", op_counts=counts,
        const_count=0, layers=layers, package_size_bytes=1, inputs=[], outputs=[],
        totals=Totals(compute_ops=len(layers), const_ops=0, weight_ops=0, params=0, weight_bytes=0, macs=1,
                      flops=None, macs_complete=True))
    placement = Placement(source="estimated", method="test", preferred="neural_engine", compute_ops=len(layers),
                          constants=0, by_count={"neural_engine": 1.0}, switches=0,
                          ops=[OpPlacement(name=x.name, op_type=x.op_type, device="neural_engine") for x in layers])
    return analysis, placement


def ms(kind: str, chip_id: str) -> float:
    fit = calibration()
    assert fit is not None
    params, _band = chip_parameters(fit, chip_id)
    return estimate_latency(*program(kind), builtin_chips()[chip_id], params).total_ms


def test_w8a8_is_faster_than_float16_on_a17pro_but_not_on_a14():
    assert ms("w8a8", "a17pro") < ms("float16", "a17pro")
    assert ms("w8a8", "a14") >= ms("float16", "a14")
    analysis, placement = program("w8a8")
    fit = calibration()
    assert fit is not None
    newer = estimate_latency(analysis, placement, builtin_chips()["a17pro"], chip_parameters(fit, "a17pro")[0])
    older = estimate_latency(analysis, placement, builtin_chips()["a14"], chip_parameters(fit, "a14")[0])
    assert newer.rules == ["w8a8_int8_activation_traffic", "w8a8_int8_compute",
                           "compressed_weights_read_at_stored_size"]
    assert older.rules == ["w8a8_unfused_before_a16", "compressed_weights_read_at_stored_size"]


def test_palettization_is_not_slower_than_float16_on_a16():
    assert ms("palettize4", "a16") <= ms("float16", "a16")


def test_grouped_tables_cost_time():
    analysis, placement = program("palettize4")
    grouped = analysis.model_copy(deep=True)
    for layer in grouped.layers:  # 64 tables of 16 float16 entries per weight instead of one
        layer.weight_bytes = (layer.weight_bytes or 0) + 63 * 16 * 2
    chip, params = builtin_chips()["a16"], chip_parameters(calibration(), "a16")[0]  # type: ignore[arg-type]
    plain, costly = estimate_latency(analysis, placement, chip, params), estimate_latency(grouped, placement, chip,
                                                                                         params)
    assert costly.total_ms > plain.total_ms and "grouped_palettization_costs_time" in costly.rules


def test_a_chip_without_rows_gets_the_leave_one_chip_out_band_and_names_it():
    fit = calibration()
    assert fit is not None and "a19pro" not in fit.per_chip
    _params, band = chip_parameters(fit, "a19pro")
    assert band is not None
    assert (band.median_ratio, band.worst_ratio) == (fit.uncalibrated_median_ratio, fit.uncalibrated_worst_ratio)
    assert band.basis.startswith("uncalibrated chip (a19pro): ") and "leave-one-chip-out over " in band.basis
    chips = builtin_chips()
    fixed = transfer_donor("a19pro", sorted(c for c, f in fit.per_chip.items() if f.fixed_ms is not None), chips)
    per_op = transfer_donor("a19pro", sorted(c for c, f in fit.per_chip.items() if f.dispatch_ms), chips)
    assert f"the fixed cost per prediction from {fixed} (" in band.basis
    assert f"the per-op cost from {per_op} (" in band.basis


def test_a_cost_carries_only_from_a_chip_whose_rows_decided_it():
    """A chip whose rows left its per-op cost at the prior has none of its own to give: the nearest chip that
    decided one gives it (carrying M1 Pro's prior per-op cost made every A14 estimate ×1.5 in leave-one-chip-out)."""
    fit = calibration()
    assert fit is not None and fit.per_chip["a16"].dispatch_ms and fit.per_chip["a14"].dispatch_ms
    chips = builtin_chips()
    without = fit.model_copy(update={"per_chip": {**fit.per_chip, "a16": fit.per_chip["a16"].model_copy(
        update={"dispatch_ms": {}})}})
    params, band = chip_parameters(without, "a19pro")
    assert band is not None and "the fixed cost per prediction from a16 (" in band.basis
    assert "the per-op cost from a14 (scaled by the two generations' published peaks)" in band.basis
    scale = cost_scale("a14", "a19pro", chips)
    assert scale < 1  # a newer engine: the older chip's per-op cost shrinks by the generations' peaks
    assert params.dispatch_ms["neural_engine"] == fit.per_chip["a14"].dispatch_ms["neural_engine"] * scale
    assert params.fixed_ms == fit.per_chip["a16"].fixed_ms * cost_scale("a16", "a19pro", chips)


def test_the_costs_carry_from_the_nearest_generation():
    chips = builtin_chips()
    assert transfer_donor("m3", ["a14", "a16", "m1pro"], chips) == "a16"  # same generation (A16/M3)
    assert transfer_donor("a15", ["a14", "a16", "m1pro"], chips) == "a14"  # a tie goes to the older one
    assert transfer_donor("m1max", ["a14", "a16", "m1pro"], chips) == "m1pro"  # same generation, a Mac
    assert transfer_donor("unknown", ["a14"], chips) is None


def test_estimate_on_a19pro_and_m4max_validates_and_estimates(write_pipeline):
    text = f"""\
version: 1
name: est
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: coreml
    precision: [float16]
    estimate_on: [a19pro, m4max]
report: {{dir: out}}
"""
    pipeline = load_pipeline(write_pipeline(text))
    assert pipeline.config.targets[0].estimate_on == ["a19pro", "m4max"]
    metrics, parts = latency_metrics(*program("float16"), ["a19pro", "m4max"])
    for chip in ("a19pro", "m4max"):
        metric = metrics[f"latency.estimated.{chip}"]
        assert metric.source == "estimated" and metric.value and metric.value > 0
        assert metric.band is not None and metric.band.basis.startswith(f"uncalibrated chip ({chip})")
        assert parts[chip]["chip"] == builtin_chips()[chip].name


def test_mlbench_rules_lists_every_compression_rule_with_its_source():
    rows = {row["id"]: row for row in apple_rule_table()}
    for rule_id in load_compression_rules():
        row = rows[rule_id]
        assert row["kind"] == "latency" and row["source"] and row["confidence"] in ("high", "medium", "low")


def test_a_compressed_variant_carries_the_compressed_rows_band_and_its_kind():
    fit = calibration()
    assert fit is not None and fit.compressed_median_ratio is not None and fit.compressed_worst_ratio is not None
    metrics, parts = latency_metrics(*program("palettize4"), ["a16", "a19pro"])
    calibrated = metrics["latency.estimated.a16"].band
    assert calibrated is not None
    assert (calibrated.median_ratio, calibrated.worst_ratio) == (fit.compressed_median_ratio,
                                                                  fit.compressed_worst_ratio)
    assert calibrated.basis.startswith("palettized variant: the compressed calibration rows, each predicted by a fit "
                                       "without it")
    uncalibrated = metrics["latency.estimated.a19pro"].band
    assert uncalibrated is not None and uncalibrated.basis.startswith("uncalibrated chip (a19pro)")
    assert fit.uncalibrated_compute_bound is not None  # eight 256-channel convs: mostly compute
    assert uncalibrated.worst_ratio == max(fit.uncalibrated_compute_bound.worst_ratio, fit.compressed_worst_ratio)
    assert parts["a16"]["kind"] == "palettized" and parts["a16"]["order_evidence"] == fit.order_evidence
    plain, _ = latency_metrics(*program("float16"), ["a16"])
    assert plain["latency.estimated.a16"].band != calibrated  # float16 keeps the chip's own band


def test_block_quantized_weights_on_the_gpu_are_read_packed_and_named():
    analysis, _ = program("float16", blocks=1)
    packed = analysis.model_copy(deep=True)
    conv = packed.layers[0]
    conv.weight_storage = "blockwise_shift_scale(int4 data, fp16 scale)"
    conv.weight_bytes = CONV["params"] // 2 + CONV["params"] // 32 * 2  # int4 and one float16 scale per 32
    conv.bytes = 2 * 2 * 256 * 784 + conv.weight_bytes
    gpu = Placement(source="estimated", method="test", preferred="gpu", compute_ops=1, constants=0,
                    by_count={"gpu": 1.0}, switches=0, ops=[OpPlacement(name="conv_0", op_type="conv", device="gpu")])
    chip, params = builtin_chips()["m1max"], chip_parameters(calibration(), "m1max")[0]  # type: ignore[arg-type]
    plain, int4 = estimate_latency(analysis, gpu, chip, params), estimate_latency(packed, gpu, chip, params)
    assert "block_quantized_weights_read_packed_on_gpu" in int4.rules
    assert "block_quantized_weights_read_packed_on_gpu" not in plain.rules
    assert int4.total_ms <= plain.total_ms
    assert any(r["id"] == "block_quantized_weights_read_packed_on_gpu" for r in apple_rule_table())


def sparse_program(zeros: float, opset_os: str | None = "iOS17") -> tuple[ProgramAnalysis, Placement]:
    """`program("float16")` with every conv's weights pruned to `zeros` (stored as coremltools stores them: the
    non-zero float16 values and a one-bit mask), in a program for `opset_os`."""
    analysis, placement = program("float16")
    pruned = analysis.model_copy(deep=True, update={"opset_os": opset_os})
    for layer in pruned.layers:
        params = CONV["params"]
        layer.weight_storage = "sparse_to_dense(uint8 mask, fp16 nonzero_data)"
        layer.weight_bytes = params // 8 + round(2 * params * (1 - zeros))
        layer.bytes = 2 * 2 * 256 * 784 + layer.weight_bytes
    return pruned, placement


def sparse_ms(zeros: float, chip_id: str = "a16", opset_os: str | None = "iOS17") -> tuple[float, list[str]]:
    fit = calibration()
    assert fit is not None
    estimate = estimate_latency(*sparse_program(zeros, opset_os), builtin_chips()[chip_id],
                                chip_parameters(fit, chip_id)[0])
    return estimate.total_ms, estimate.rules


def test_high_sparsity_gains_on_the_neural_engine_of_recent_oss_and_says_so():
    dense = ms("float16", "a16")
    half, half_rules = sparse_ms(0.5)
    most, most_rules = sparse_ms(0.75)
    assert most < half <= dense  # 75% skips arithmetic on these compute-bound convs; 50% saves only bytes
    assert most_rules == ["compressed_weights_read_at_stored_size", "high_sparsity_skips_neural_engine_compute"]
    assert half_rules == ["compressed_weights_read_at_stored_size", "sparse_weights_skip_no_compute"]
    older, older_rules = sparse_ms(0.75, opset_os="iOS16")  # before iOS17 / macOS14: no skipping
    assert older > most and "high_sparsity_skips_neural_engine_compute" not in older_rules
    _mac, mac_rules = sparse_ms(0.75, "m1pro", opset_os="macOS14")  # macOS14 pairs with iOS17
    assert "high_sparsity_skips_neural_engine_compute" in mac_rules


def test_high_sparsity_does_not_skip_on_the_gpu():
    analysis, _ = sparse_program(0.75)
    gpu = Placement(source="estimated", method="test", preferred="gpu", compute_ops=len(analysis.layers),
                    constants=0, by_count={"gpu": 1.0}, switches=0,
                    ops=[OpPlacement(name=x.name, op_type=x.op_type, device="gpu") for x in analysis.layers])
    chip, params = builtin_chips()["m1max"], chip_parameters(calibration(), "m1max")[0]  # type: ignore[arg-type]
    assert "high_sparsity_skips_neural_engine_compute" not in estimate_latency(analysis, gpu, chip, params).rules


def test_the_sparsity_is_read_from_the_stored_bytes():
    from mlbench.backends.apple.compression_rules import ios_release, sparsity

    analysis, _ = sparse_program(0.75)
    assert abs((sparsity(analysis.layers[0]) or 0) - 0.75) < 1e-3
    assert sparsity(program("palettize4")[0].layers[0]) is None
    assert (ios_release("iOS17"), ios_release("macOS15"), ios_release("watchOS10"), ios_release(None)) == (
        17, 18, None, None)


def test_an_estimate_mostly_fixed_and_per_op_cost_takes_the_band_of_such_rows_on_a_chip_without_rows():
    """A 0.13 ms model's estimate on a chip without rows is as unsure as the calibration rows whose estimate was
    mostly fixed and per-op cost (×2.4-2.7 without their chip), a compute-heavy one's as the others: two bands,
    each named, not one pooled band that understates the first and overstates the second."""
    fit = calibration()
    assert fit is not None and fit.uncalibrated_overhead_bound is not None and fit.uncalibrated_compute_bound is not None
    assert fit.uncalibrated_overhead_bound.worst_ratio > fit.uncalibrated_compute_bound.worst_ratio
    heavy, placement = program("float16")
    tiny = heavy.model_copy(deep=True)
    for layer in tiny.layers:  # the same eight ops, each a few thousand FLOPs and bytes
        layer.flops, layer.bytes, layer.weight_bytes = 4096, 4096, 1024
    for analysis, side, which, over in ((tiny, fit.uncalibrated_overhead_bound, "at least", True),
                                        (heavy, fit.uncalibrated_compute_bound, "under", False)):
        metrics, parts = latency_metrics(analysis, placement, ["a19pro", "a16"])
        band = metrics["latency.estimated.a19pro"].band
        assert band is not None and (band.median_ratio, band.worst_ratio) == (side.median_ratio, side.worst_ratio)
        assert band.basis.startswith("uncalibrated chip (a19pro): ")
        rows = (f"{side.rows} rows ({side.models} model{'s' if side.models != 1 else ''} on {side.chips} "
                f"chip{'s' if side.chips != 1 else ''})")
        assert band.basis.endswith(f"; an estimate {which} 50% fixed and per-op cost takes the band of the {rows} "
                                   "whose estimate without their chip was so")
        assert (parts["a19pro"]["overhead_share"] >= 0.5) is over  # the estimate's own share, in its parts
        calibrated = metrics["latency.estimated.a16"].band  # a chip with rows keeps its own band
        assert calibrated is not None and "takes the band of" not in calibrated.basis
    tiny_parts = latency_metrics(tiny, placement, ["a19pro"])[1]["a19pro"]
    assert tiny_parts["fixed_ms"] + tiny_parts["dispatch_ms"] > sum(tiny_parts["compute_ms"].values())
