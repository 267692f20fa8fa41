"""The HTML report's memory-against-latency chart (mlbench/report/html/memory.py)."""

from __future__ import annotations

import re

from mlbench.records import Metric
from mlbench.report.html.memory import MEMORY_COLOR, memory_chart, memory_section
from mlbench.report.html.page import render_html
from tests.compare.test_comparison import rec, run_of

MB = 1_000_000


def _records():
    eager = rec("m/torch/cpu", memory__peak=Metric.measured(40 * MB, "bytes"), latency__median=8.0)
    palettized = rec("m/coreml/all", memory__estimated=Metric.estimated(10 * MB, "bytes"),
                     latency__estimated__a17pro=Metric.estimated(2.0, "ms"))
    timeless = rec("m/onnxruntime/cpu", memory__peak=Metric.measured(30 * MB, "bytes"))
    return [eager, palettized, timeless]


def test_each_variant_is_a_point_at_its_latency_and_memory_estimates_hollow():
    svg = memory_chart(_records())
    circles = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="5" fill="([^"]+)"', svg)
    assert len(circles) == 2  # the variant without a latency is listed, not drawn at zero
    (x1, y1, fill1), (x2, y2, fill2) = circles
    assert fill1 == MEMORY_COLOR and fill2 == "white"  # measured solid, estimated hollow
    assert float(x2) < float(x1) and float(y2) > float(y1)  # faster (left) and smaller (lower on screen: larger y)
    assert "<title>m/torch/cpu: 40.0 MB (memory.peak), 8.00 ms (latency.median)</title>" in svg
    assert "<title>m/coreml/all: ≈10.0 MB (memory.estimated), ≈2.00 ms (latency.estimated.a17pro)</title>" in svg
    assert ">≈ coreml/all</text>" in svg
    assert "Not drawn (no memory or no latency figure): <code>m/onnxruntime/cpu</code>" in svg


def test_the_section_says_so_when_no_variant_has_both_figures_and_the_report_carries_it():
    lone = [rec("m/torch/cpu", latency__median=3.0)]
    assert memory_section(lone) == ['<p class="meta">No variant has both a memory figure (memory.peak, '
                                    'memory.estimated) and a latency.</p>']
    html = render_html(run_of(_records(), "r1"))
    assert "<h2>Memory and latency per model</h2>" in html and 'aria-label="memory against latency"' in html


def test_the_markdown_table_has_a_memory_column_in_bytes_where_records_carry_it():
    from mlbench.report.markdown.run_report import render_markdown

    text = render_markdown(run_of(_records(), "r1"))
    header = next(line for line in text.splitlines() if line.startswith("| Variant"))
    assert "peak memory" in header
    assert "| 40.0 MB |" in text.replace("| `torch/cpu` |", "")
    assert "≈10.0 MB" in text
    assert "_peak memory_: resident memory at the predictions' peak, above the level before loading" in text
