"""The estimated order of a model's variants per chip, with the calibration's order evidence as its confidence."""

from __future__ import annotations

from mlbench.records import Band, Metric, RunRecord
from mlbench.report.estimate_order import order_statements
from mlbench.report.html.page import render_html
from mlbench.report.markdown.run_report import render_markdown
from tests.report.test_report import report

BAND = Band(median_ratio=1.2, worst_ratio=2.0, basis="test")
EVIDENCE = {"float16 vs palettized": [9, 10], "W8A8 vs float16": [1, 1], "float16 vs float32": [3, 5]}


def estimated(variant: str, kind: str, units: str = "all", **per_chip: float) -> RunRecord:
    model, backend, precision, optimization = variant.split("/")
    return RunRecord(
        variant_id=variant, model=model, backend=backend,
        axes={"precision": precision, "optimization": optimization, "compute_units": units},
        artifact_id=variant if units == "all" else f"{variant}/{units}", status="ok", started="2026-01-01T00:00:00+00:00", seconds=1.0,
        metrics={f"latency.estimated.{chip}": Metric(value=ms, unit="ms", source="estimated", band=BAND)
                 for chip, ms in per_chip.items()},
        details={"latency_estimate": {chip: {"kind": kind, "order_evidence": EVIDENCE} for chip in per_chip}})


RECORDS = [
    estimated("m/coreml/float16/none", "float16", a17pro=1.38, a14=2.0),
    estimated("m/coreml/float16/pal4", "palettized", a17pro=1.12, a14=1.95),
    estimated("m/coreml/float16/w8a8", "W8A8", a17pro=0.80),
    estimated("m/coreml/float32/none", "float32", a14=6.0),
]


def test_each_variant_is_set_against_the_next_slower_one_with_the_evidence_of_its_kinds():
    lines = [s.text() for s in order_statements(RECORDS)]
    assert lines == [
        "float16/pal4 and float16/none on a14 (all): too close to call (≈1.95 vs ≈2.00 ms; within 10%, where the "
        "calibration counts published pairs as ties)",
        "float16/none faster than float32/none on a14 (all): uncertain (≈2.00 vs ≈6.00 ms; order held in 3 of 5 "
        "calibration pairs of these kinds)",
        "float16/w8a8 faster than float16/pal4 on a17pro (all): unknown (≈0.800 vs ≈1.12 ms; no calibration pair of "
        "these kinds whose published figures differ by 10% or more)",
        "float16/pal4 faster than float16/none on a17pro (all): likely (≈1.12 vs ≈1.38 ms; order held in 9 of 10 "
        "calibration pairs of these kinds)",
    ]


def test_variants_are_ordered_within_one_compute_units_choice():
    on_cpu = estimated("m/coreml/float16/none", "float16", units="cpu_only", a17pro=0.5)
    on_cpu = on_cpu.model_copy(update={"variant_id": "m/coreml/float16/none/cpu"})
    lines = [s.text() for s in order_statements([*RECORDS, on_cpu])]
    assert lines == [s.text() for s in order_statements(RECORDS)]  # one cpu_only variant: nothing to order it with


def test_one_pair_of_a_kind_is_never_called_likely():
    records = [estimated("m/coreml/float16/none", "float16", a17pro=1.5),
               estimated("m/coreml/float16/w8a8", "W8A8", a17pro=0.8)]
    (statement,) = order_statements(records)
    assert statement.confidence == "uncertain" and "1 of 1" in statement.evidence


def test_records_without_an_estimate_or_its_kind_state_no_order():
    bare = RECORDS[0].model_copy(update={"details": {}})
    assert order_statements([bare, RECORDS[1].model_copy(update={"details": {}})]) == []
    assert order_statements([RECORDS[0]]) == []  # one variant: nothing to order


def test_the_markdown_and_the_html_report_state_the_order():
    md = render_markdown(report(RECORDS))
    assert "_Estimated order_" in md
    assert ("- float16/pal4 faster than float16/none on a17pro (all): likely (≈1.12 vs ≈1.38 ms; order held in 9 of 10 "
            "calibration pairs of these kinds)") in md
    html = render_html(report(RECORDS))
    assert '<ul class="estimated-order">' in html
    assert "float16/pal4 faster than float16/none on a17pro (all): likely" in html
