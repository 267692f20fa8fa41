"""A new metric is one catalog line: with a test-only `MetricInfo` (and nothing else touched), the metric
reaches a model's Markdown table, the HTML report and `mlbench compare`."""

from __future__ import annotations

import json

import pytest

from mlbench import metrics
from mlbench.cli.main import main
from mlbench.metrics import ColumnPlace, MetricInfo
from mlbench.records import Metric
from mlbench.report.html.page import render_html
from mlbench.report.markdown.run_report import render_markdown
from tests.compare.test_comparison import rec, run_of

NEW = MetricInfo("energy.per_call", "ms", "energy proxy ms", "lower", compared=True,
                 column=ColumnPlace(order=4.2, keep=2.2), describe="a test-only metric")


@pytest.fixture
def catalog_with_new_metric(monkeypatch):
    monkeypatch.setattr(metrics, "_CORE", (*metrics._CORE, NEW))
    metrics.catalog.cache_clear()
    yield
    metrics.catalog.cache_clear()


def _runs(head_value: float):
    base = run_of([rec("m/torch/cpu", samples=[1.0] * 9, energy__per_call=Metric.measured(3.0, "ms"))], "b1")
    head = run_of([rec("m/torch/cpu", samples=[1.0] * 9, energy__per_call=Metric.measured(head_value, "ms"))], "h1")
    return base, head


def test_a_catalog_line_gives_the_metric_its_column_in_markdown_and_html(catalog_with_new_metric):
    _, head = _runs(4.5)
    markdown = render_markdown(head)
    assert "| Variant | Status | Median ms | Best ms | energy proxy ms |" in markdown  # placed by its order
    assert "| `torch/cpu` | ok | 1.00 | 1.00 | 4.50 |" in markdown
    html = render_html(head)
    assert '<th class="num">energy proxy ms</th>' in html  # the headline table reads the catalog too
    assert '<td class="num">4.50</td>' in html


def test_without_the_catalog_line_no_report_shows_it():
    _, head = _runs(4.5)
    assert "energy proxy ms" not in render_markdown(head)
    assert "energy proxy ms" not in render_html(head)


def _report_files(tmp_path, head_value: float) -> list[str]:
    paths = []
    for name, run in zip(("base", "head"), _runs(head_value), strict=True):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(run.model_dump(mode="json")))
        paths.append(str(path))
    return paths


def test_mlbench_compare_finds_the_new_metric(catalog_with_new_metric, tmp_path, capsys):
    code = main(["compare", *_report_files(tmp_path, 6.0), "--fail-on", "energy.per_call:+10%"])
    out = capsys.readouterr().out
    assert code == 1
    assert "| `m/torch/cpu` | `energy.per_call:+10%` | 3.00 ms → 6.00 ms (+100.0%) | – |" in out


def test_without_the_catalog_line_compare_does_not_know_the_metric(tmp_path, capsys):
    code = main(["compare", *_report_files(tmp_path, 6.0), "--fail-on", "energy.per_call:+10%"])
    assert code == 2
    assert "unknown metric 'energy.per_call'" in capsys.readouterr().err
