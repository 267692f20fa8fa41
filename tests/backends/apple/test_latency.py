"""The Core ML latency estimate per Apple chip: its arithmetic, its profiles, its place in a run, its
reports and gates. An estimate is never shown as a measurement."""

from __future__ import annotations

import pytest

from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, Totals
from mlbench.backends.apple.chips import DEVICES, ChipFile, ChipProfile, Parameters, calibration, load_chip_file
from mlbench.backends.apple.latency import estimate_latency
from mlbench.compare.comparison import RuleError, compare, parse_rule
from mlbench.records import Band, Metric, OpPlacement, Placement
from mlbench.report.markdown.run_report import render_markdown
from mlbench.validate import load_pipeline
from tests.conftest import ROOT
from tests.report.test_report import record, report

CHIP = ChipProfile.model_validate({
    "name": "Round", "neural_engine": {"flops_fp16": 10e12, "source": "test", "confidence": "low"},
    "gpu": {"flops_fp32": 2e12, "flops_fp16": 2e12, "source": "test", "confidence": "low"},
    "cpu": {"flops_fp32": 1e11, "flops_fp16": 2e11, "source": "test", "confidence": "low"},
    "memory": {"bandwidth": 1e11, "source": "test", "confidence": "low"},
})
PARAMS = Parameters(efficiency={"neural_engine": 0.5, "gpu": 0.5, "cpu": 0.25},
                    bandwidth_factor={"neural_engine": 2.0, "gpu": 1.0, "cpu": 1.0},
                    dispatch_ms={"neural_engine": 0.001, "gpu": 0.002, "cpu": 0.01},
                    switch_overhead_ms=0.05, fixed_ms=0.2)


def two_op_program() -> tuple[ProgramAnalysis, Placement]:
    layers = [
        LayerInfo(name="conv_0", op_type="conv", output_dtype="fp16", output_shape=[1, 1000], flops=2_000_000_000,
                  bytes=4_000_000),
        LayerInfo(name="softmax_0", op_type="softmax", output_dtype="fp32", output_shape=[1, 1000], flops=5_000,
                  bytes=4_000),
    ]
    analysis = ProgramAnalysis(
        path="x.mlpackage", model_type="mlProgram", spec_version=7, precision="MIXED", op_counts={"conv": 1, "softmax": 1},
        const_count=0, layers=layers, package_size_bytes=1, inputs=[], outputs=[],
        totals=Totals(compute_ops=2, const_ops=0, weight_ops=0, params=0, weight_bytes=0, macs=10**9, flops=None,
                      macs_complete=True))
    placement = Placement(source="estimated", method="test", preferred="neural_engine", compute_ops=2, constants=0,
                          by_count={"neural_engine": 0.5, "cpu": 0.5}, switches=1, ops=[
                              OpPlacement(name="conv_0", op_type="conv", device="neural_engine"),
                              OpPlacement(name="softmax_0", op_type="softmax", device="cpu")])
    return analysis, placement


def test_two_op_program_by_hand():
    analysis, placement = two_op_program()
    estimate = estimate_latency(analysis, placement, CHIP, PARAMS)
    # conv on the ANE: max(2e9 / (10e12 × 0.5), 4e6 / (1e11 × 2)) = max(0.4 ms, 0.02 ms) = 0.4 ms, + 0.001 dispatch
    assert estimate.compute_ms["neural_engine"] == pytest.approx(0.4)
    # softmax on the CPU, fp32: max(5e3 / (1e11 × 0.25), 4e3 / 1e11) = max(0.2 µs, 0.04 µs), + 0.01 dispatch
    assert estimate.compute_ms["cpu"] == pytest.approx(0.0002)
    # one switch: the conv's 1000 fp16 outputs (2000 bytes) / 1e11 = 0.02 µs, + 0.05 overhead
    assert (estimate.switches, estimate.switch_ms) == (1, pytest.approx(0.05002))
    assert estimate.dispatch_ms == pytest.approx(0.011)
    assert estimate.total_ms == pytest.approx(0.4 + 0.001 + 0.0002 + 0.01 + 0.05002 + 0.2)


def test_placement_decides_the_device_and_float32_pays_the_cpu_rate():
    analysis, placement = two_op_program()
    on_cpu = placement.model_copy(update={"ops": [op.model_copy(update={"device": "cpu"}) for op in placement.ops]})
    estimate = estimate_latency(analysis, on_cpu, CHIP, PARAMS)
    assert estimate.switches == 0
    assert estimate.compute_ms["cpu"] == pytest.approx(2e9 / (2e11 * 0.25) * 1e3 + 0.0002)  # fp16 conv, fp32 softmax


def test_every_chip_has_every_number_with_a_source():
    chips = load_chip_file()
    assert set(chips.chips) == {"a14", "a15", "a16", "a17pro", "a18", "a18pro", "a19", "a19pro", "m1", "m1pro", "m1max",
                                "m1ultra", "m2", "m2pro", "m2max", "m2ultra", "m3", "m3pro", "m3max", "m3ultra", "m4",
                                "m4pro", "m4max", "m5"}
    assert all(p.neural_engine.generation for p in chips.chips.values())
    for chip in chips.chips.values():
        for group in (chip.neural_engine, chip.gpu, chip.cpu, chip.memory):
            assert group.source.strip() and group.confidence in ("high", "medium", "low")
    # int8 activations are faster only from A17 Pro / M4 on (Apple's coremltools guide)
    assert {c for c, p in chips.chips.items() if p.neural_engine.flops_int8} == {
        "a17pro", "a18", "a18pro", "a19", "a19pro", "m4", "m4pro", "m4max", "m5"}
    fit = calibration()
    assert fit is not None and set(fit.parameters.efficiency) == set(DEVICES)
    assert 1 <= fit.median_ratio <= fit.worst_ratio and fit.rows
    bad = chips.model_dump()
    del bad["chips"]["m1"]["memory"]["source"]
    with pytest.raises(ValueError, match="source"):
        ChipFile.model_validate(bad)


PIPELINE = f"""\
version: 1
name: est
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, all]
    estimate_on: [a17pro, m1]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out}}
"""


def test_unknown_chip_is_a_one_line_error_with_its_place(write_pipeline):
    path = write_pipeline(PIPELINE.replace("[a17pro, m1]", "[a17pro, a17]"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == (
        f"{path}:11:27: targets[0].estimate_on[1]: unknown chip 'a17'; did you mean 'a19'? (known: a14, a15, "
        "a16, a17pro, a18pro, m1, m1pro, m1max, m2, m3, m3max, m4, a18, a19, a19pro, m3pro, m3ultra, m4pro, m4max, m5, "
        "m1ultra, m2pro, m2max, m2ultra; add your own under chip_profiles)")


def test_own_chip_profiles_are_validated_like_the_rest(write_pipeline):
    own = ("\n    chip_profiles:\n      mine: {name: Mine, neural_engine: {flops_fp16: 1.0e+12, source: spec sheet, "
           "confidence: low}, gpu: {flops_fp32: 1.0e+12, flops_fp16: 1.0e+12, source: s, confidence: low}, "
           "cpu: {flops_fp32: 1.0e+11, flops_fp16: 2.0e+11, source: s, confidence: low}, "
           "memory: {bandwidth: 5.0e+10, confidence: low}}")
    text = PIPELINE.replace("[a17pro, m1]", "[mine]" + own)
    with pytest.raises(Exception) as info:
        load_pipeline(write_pipeline(text))
    assert "targets[0].chip_profiles.mine.memory: missing required key 'source'" in str(info.value)
    assert "\n" not in str(info.value)
    config = load_pipeline(write_pipeline(text.replace("{bandwidth: 5.0e+10,", "{bandwidth: 5.0e+10, source: s,")))
    assert config.config.targets[0].estimate_on == ["mine"]


@pytest.mark.torch
@pytest.mark.slow
def test_a_run_estimates_every_core_ml_variant_and_never_calls_it_measured(core_ml_tiny_run):
    result, folder = core_ml_tiny_run  # float32/float16 × 4 compute units, estimate_on [a17pro, m1], beside eager
    coreml = [r for r in result.records if r.backend == "coreml"]
    assert len(coreml) == 8
    for r in coreml:
        for chip in ("a17pro", "m1"):
            metric = r.metrics[f"latency.estimated.{chip}"]
            assert (metric.unit, metric.source) == ("ms", "estimated") and metric.value > 0
            assert metric.band is not None and metric.band.worst_ratio >= metric.band.median_ratio >= 1
        assert set(r.details["latency_estimate"]) == {"a17pro", "m1"}
    assert not any(name.startswith("latency.estimated.") for r in result.records if r.backend == "torch"
                   for name in r.metrics)
    by_id = {r.variant_id: r.metrics["latency.estimated.m1"].value for r in coreml}
    # a 32x32 CNN: the fixed cost per prediction dominates every variant (the Neural Engine's per-op cost, from
    # A14's rows, is a tenth of the CPU's prior), so they lie close and no order is claimed between them
    assert max(by_id.values()) / min(by_id.values()) < 1.25, by_id
    markdown = (folder / "out" / "report.md").read_text()
    assert "_Estimated order_" in markdown and " on m1 (all): too close to call (≈" in markdown
    assert "| ≈ms a17pro |" in markdown and "≈ms m1" in markdown
    cells: dict[str, str] = {}  # the row's cells by column, in the main table and the folded one
    for line in markdown.splitlines():
        if line.startswith("| Variant"):
            names = [c.strip() for c in line.split("|")]
        elif line.startswith("| `coreml/float16/all/none`"):
            cells.update(zip(names, (c.strip() for c in line.split("|"))))
    assert cells["≈ms a17pro"].startswith("≈") and cells["≈ms m1"].startswith("≈")
    # each chip's band on its own line: m1 has calibration rows (Stable Diffusion's), a17pro has none
    assert "_≈ms a17pro_: Core ML latency estimated for that Apple chip" in markdown and "at worst" in markdown
    assert "_≈ms m1_: Core ML latency estimated for that Apple chip" in markdown
    assert "(uncalibrated chip (a17pro): no calibration row on the chip" in markdown
    from mlbench.report.html.page import render_html
    from tests.report.html.test_parity import missing_from_html

    assert missing_from_html(result) == []  # the HTML report shows all of it too, estimates per chip included
    html = (folder / "out" / "report.html").read_text()
    assert html == render_html(result)
    assert html.count('class="bar estimate estimated chip-a17pro"') == 8


def test_markdown_shows_measured_over_estimated_where_the_machine_measured_it():
    mine = record("m/coreml/float16/all", median=2.0)
    band = Band(median_ratio=1.2, worst_ratio=2.0, basis="9 rows")
    mine.metrics["latency.estimated.m1"] = Metric(value=1.6, unit="ms", source="estimated", band=band,
                                                  measured_as="latency.median")
    mine.metrics["latency.estimated.a17pro"] = Metric(value=1.0, unit="ms", source="estimated", band=band)
    text = render_markdown(report([mine]))
    assert "| ≈ms m1 | ≈ms a17pro |" in text
    assert "| ≈1.60 (measured ×1.25) | ≈1.00 |" in text
    assert "off by ×1.20 typically, ×2.00 at worst (9 rows)" in text


def test_compare_gates_on_an_estimated_chip_latency():
    rule = parse_rule("latency.estimated.a17pro:+10%")
    assert (rule.metric, rule.kind, rule.threshold) == ("latency.estimated.a17pro", "relative", 10.0)
    with pytest.raises(RuleError, match=r"unknown metric 'latency.estimated.A17'.*latency.estimated.<chip>"):
        parse_rule("latency.estimated.A17:+10%")

    def run(value: float):
        r = record("m/coreml/float16/all", median=None)
        r.metrics["latency.estimated.a17pro"] = Metric(value=value, unit="ms", source="estimated")
        return report([r])

    result = compare(run(1.0), run(1.3), [rule])
    assert result.regressed
    assert result.variants[0].findings[0].message.startswith("≈1.00 ms → ≈1.30 ms (+30.0%)")
    assert not compare(run(1.0), run(1.05), [rule]).regressed


def test_calibration_fit_recovers_what_it_was_given():
    import importlib.util

    from mlbench.backends.apple.chips import builtin_chips

    spec = importlib.util.spec_from_file_location("calibrate_latency", ROOT / "benchmarks" / "calibrate_latency.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    analysis, placement = two_op_program()
    truth = estimate_latency(analysis, placement, builtin_chips()["m1"], PARAMS).total_ms
    row = bench.Row(model="two", build="-", input_shape=(1,), chip="m1", compute_units="all", precision="float16",
                    latency_ms=truth, source="test", os="macOS")
    cases = [bench.case_for(row, analysis, placement)] * 2  # two runs: one parameter, one run left for LOO
    free = bench.decidable(cases)
    assert free == ["fixed_ms@m1 macOS"]  # per chip and OS; the rest cannot be told apart by these runs
    values = bench.fit(cases, free)
    fitted = estimate_latency(analysis, placement, builtin_chips()["m1"],
                              bench.parameters(values, "m1 macOS")).total_ms
    assert fitted == pytest.approx(truth, rel=0.05)
    assert values["efficiency.gpu"] == bench.PRIORS["efficiency.gpu"][0]  # no row on the GPU: the prior stays
