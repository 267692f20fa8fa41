"""Reports are pure functions of a RunReport: Markdown tables, schema-checked JSON."""

from __future__ import annotations

import json

import pytest

from mlbench.records import Metric, PipelineInfo, RunRecord, RunReport
from mlbench.report.json_report import ReportSchemaError, render_json
from mlbench.report.markdown.run_report import render_markdown


def record(variant_id: str, status: str = "ok", median: float | None = 10.0, source: str = "measured",
           error: str | None = None) -> RunRecord:
    model, backend, *axes = variant_id.split("/")
    names = ["device", "precision"] if backend == "torch" else ["precision", "compute_units"]
    metrics = {}
    if median is not None:
        metrics["latency.median"] = Metric(value=median, unit="ms", source=source)
        metrics["latency.best"] = Metric(value=median * 0.9, unit="ms", source=source)
    return RunRecord(variant_id=variant_id, model=model, backend=backend, axes=dict(zip(names, axes)),
                     artifact_id=variant_id, status=status, error=error, metrics=metrics,
                     started="2026-01-01T00:00:00+00:00", seconds=1.0)


def report(records: list[RunRecord]) -> RunReport:
    return RunReport(
        mlbench_version="0.1.0", run_id="abc", created="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:01:00+00:00", pipeline=PipelineInfo(name="p", path="p.yaml", sha256="0" * 64),
        machine={"os": "Linux", "cpu": "x", "cpu_count": 2, "packages": {"torch": "2.14.1"}},
        settings={"latency": {"warmup": 5, "repeats": 30, "min_time_s": 1.0}},
        records=records, summary={"ok": 2, "failed": 1, "skipped": 0},
    )


def test_markdown_table_per_model_with_speedup_and_labels():
    text = render_markdown(report([
        record("m/torch/cpu/float32", median=10.0),
        record("m/torch/cpu/float16", median=5.0),
        record("m/coreml/float16/all", median=2.0, source="estimated"),
        record("n/torch/cpu/float32", status="failed", median=None, error="model: cannot import 'x' | y"),
    ]))
    assert "### m" in text and "### n" in text
    # columns no row fills (p90, verify, placement, size, export) are left out
    assert "| Variant | Status | Median ms | Best ms | vs eager |\n|---|---|---:|---:|---:|\n" in text
    assert "| `torch/cpu/float16` | ok | 5.00 | 4.50 | 2.00× |" in text
    assert "| `coreml/float16/all` | ok | ≈2.00 | ≈1.80 | ≈5.00× |" in text
    assert "| `torch/cpu/float32` | **failed** | model: cannot import 'x' \\| y |" in text
    assert "no torch/cpu/float32 baseline ran for this model" in text
    assert "**measured**" in text and "**estimated**" in text


def test_partial_report_says_so():
    partial = report([record("m/torch/cpu/float32")]).model_copy(update={"finished": None})
    assert "partial: the run was interrupted" in render_markdown(partial)


def test_json_round_trips_and_is_schema_checked():
    original = report([record("m/torch/cpu/float32")])
    text = render_json(original)
    assert text.startswith('{\n  "') and text.endswith("}\n")  # indented for people reading a diff
    data = json.loads(text)
    assert data["schema_version"] == 2
    assert data["records"][0]["metrics"]["latency.median"] == {"value": 10.0, "unit": "ms", "source": "measured",
                                                              "reason": None}
    assert RunReport.model_validate(data) == original


def test_json_refuses_a_report_that_breaks_its_schema():
    broken = report([record("m/torch/cpu/float32")])
    broken.records[0].metrics["latency.median"].__dict__["source"] = "guessed"  # bypass pydantic on purpose
    with pytest.raises(ReportSchemaError, match="report does not match its schema at /records/0/metrics"):
        render_json(broken)


def test_absent_metric_needs_a_reason():
    with pytest.raises(ValueError, match="must say why"):
        Metric(value=None, unit="ms", source=None)
    with pytest.raises(ValueError, match="must say whether it was measured, emulated, reference or estimated"):
        Metric(value=1.0, unit="ms", source=None)
    assert Metric.absent("ms", "Core ML runs only on macOS").reason == "Core ML runs only on macOS"
