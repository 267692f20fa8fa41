"""The HTML report's headline table (mlbench/report/html/headline.py): the best figure first, no empty column,
words left and figures right."""

from __future__ import annotations

from mlbench.records import Band, Metric
from mlbench.report.html.headline import headline_columns, headline_table
from tests.compare.test_comparison import rec

BAND = Band(median_ratio=1.3, worst_ratio=1.5, basis="calibration")


def _headers(records) -> list[str]:
    return [c.header for c in headline_columns(records)]


def test_a_torch_only_report_has_no_column_that_carries_nothing():
    records = [rec("m/torch/cpu", [1.0, 1.1, 1.2]), rec("m/torch/fast", [0.5, 0.6, 0.7])]
    assert _headers(records) == ["variant", "status", "median ms", "best ms"]  # no load ms, no % of cost, no note


def test_an_unmeasured_row_leads_with_its_first_chip_estimate_and_its_band():
    coreml = rec("m/coreml/all", latency__estimated__a17pro=Metric(value=2.0, unit="ms", source="estimated", band=BAND),
                 latency__estimated__m1=Metric.estimated(3.0, "ms"))
    coreml.metrics["latency.median"] = Metric.absent("ms", "Core ML runs only on macOS")
    records = [rec("m/torch/cpu", [8.0, 8.0, 8.0]), coreml]
    columns = {c.header: c.cells for c in headline_columns(records)}
    assert columns["median ms (else ≈a17pro)"] == ["8.00", "≈2.00 (×1.50)"]
    assert "≈ms a17pro" not in columns  # nothing measured has it: the median column already shows it
    table = headline_table(records)
    assert '<th class="text">variant</th>' in table and '<td class="num">≈2.00 (×1.50)</td>' in table


def test_on_a_mac_the_estimate_stays_beside_the_measured_median():
    coreml = rec("m/coreml/all", [1.0, 1.0, 1.0], latency__estimated__a17pro=Metric.estimated(0.8, "ms"))
    columns = {c.header: c.cells for c in headline_columns([coreml])}
    assert columns["median ms"] == ["1.00"] and columns["≈ms a17pro"] == ["≈0.800"]


def test_the_note_column_is_words_left_aligned():
    broken = rec("m/torch/cpu", status="failed")
    table = headline_table([rec("m/torch/ok", [1.0, 1.0, 1.0]), broken])
    assert '<th class="text">note</th>' in table and '<td class="text">measure: boom</td>' in table
