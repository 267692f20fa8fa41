"""The HTML report's memory-against-latency chart (mlbench/report/html/memory.py)."""

from __future__ import annotations

import html as html_module
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
    server = [r for r in _records() if r.backend != "coreml"]
    svg = memory_chart(server)
    circles = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="5" fill="([^"]+)"', svg)
    assert len(circles) == 1 and circles[0][2] == MEMORY_COLOR  # the variant without a latency is listed, not drawn
    assert "<title>m/torch/cpu: 40.0 MB, 8.00 ms (memory.peak, latency.median)</title>" in svg
    assert "Not drawn (no memory or no latency figure): <code>m/onnxruntime/cpu</code>" in svg
    fast = rec("m/coreml/cpu_only", memory__estimated=Metric.estimated(30 * MB, "bytes"),
               latency__estimated__a17pro=Metric.estimated(6.0, "ms"))
    apple = memory_chart([_records()[1], fast])
    (x1, y1, fill1), (x2, y2, fill2) = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="5" fill="([^"]+)"', apple)
    assert fill1 == fill2 == "white"  # estimated: hollow
    assert float(x1) < float(x2) and float(y1) > float(y2)  # faster (left) and smaller (lower on screen: larger y)
    assert "<title>m/coreml/all: ≈10.0 MB, ≈2.00 ms (memory.estimated, latency.estimated.a17pro)</title>" in apple
    assert ">≈ coreml/all<title>" in apple and "latency: ≈ estimate on a17pro" in apple


def test_a_chip_s_estimates_and_this_machine_s_measurements_never_share_an_axis():
    section = "".join(memory_section(_records()))
    charts = re.findall(r'<p class="target">([^<]+) <span.*?</svg>', section)
    assert charts == ["Apple devices", "server or desktop CPU"]
    apple, server = re.findall(r'<svg class="chart memory".*?</svg>', section)
    assert "coreml/all" in apple and "torch/cpu" not in apple and "latency: ≈ estimate on a17pro" in apple
    assert "torch/cpu" in server and "coreml" not in server and "latency: the median" in server


def test_labels_that_would_overlap_are_folded_into_numbers_and_a_list():
    crowd = [rec(f"m/coreml/v{i}", memory__estimated=Metric.estimated((10 + 0.3 * i) * MB, "bytes"),
                 latency__estimated__a17pro=Metric.estimated(2.0 + 0.02 * i, "ms")) for i in range(6)]
    svg = memory_chart(crowd)
    labels = re.findall(r'<text class="label point-label" x="([\d.]+)" y="([\d.]+)" text-anchor="(\w+)">([^<]+)<', svg)
    boxes = []
    for x, y, anchor, text in labels:
        w = 7.3 * len(html_module.unescape(text))
        left = float(x) - {"start": 0, "end": w, "middle": w / 2}[anchor]
        boxes.append((left, float(y) - 11, left + w, float(y) + 3))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    listed = re.findall(r'<li value="(\d+)">([^:]+):', svg)
    assert listed and [int(n) for n, _ in listed] == list(range(1, len(listed) + 1))
    shown = [html_module.unescape(t) for *_, t in labels]
    named = [t.removeprefix("≈ ") for t in shown if not t.isdigit()] + [html_module.unescape(n) for _, n in listed]
    assert sorted(named) == sorted(f"coreml/v{i}" for i in range(6))  # each said once: on the chart or listed
    assert all(number in shown for number, _ in listed)  # each folded label's number beside its point
    assert len(re.findall(r"<circle ", svg)) == 6


def test_the_section_says_so_when_no_variant_has_both_figures_and_the_report_carries_it():
    lone = [rec("m/torch/cpu", latency__median=3.0)]
    assert memory_section(lone) == ['<p class="meta">No variant has both a memory figure (memory.peak, '
                                    'memory.estimated) and a latency.</p>']
    html = render_html(run_of(_records(), "r1"))
    assert "<h2>Memory and latency per model</h2>" in html and 'aria-label="memory against latency: server or desktop CPU"' in html


def test_the_markdown_table_has_a_memory_column_in_bytes_where_records_carry_it():
    from mlbench.report.markdown.run_report import render_markdown

    text = render_markdown(run_of(_records(), "r1"))
    header = next(line for line in text.splitlines() if line.startswith("| Variant"))
    assert "peak memory" in header
    assert "| 40.0 MB |" in text.replace("| `torch/cpu` |", "")
    assert "≈10.0 MB" in text
    assert "_peak memory_: resident memory at the predictions' peak, above the level before loading" in text


def test_variants_with_the_same_figures_are_one_point():
    twins = [rec(f"m/coreml/{units}", memory__estimated=Metric.estimated(10 * MB, "bytes"),
                 latency__estimated__a17pro=Metric.estimated(2.0, "ms")) for units in ("cpu_and_ne", "all")]
    svg = memory_chart(twins)
    assert len(re.findall(r"<circle ", svg)) == 1
    assert ">≈ coreml/cpu_and_ne +1<title>m/coreml/cpu_and_ne, m/coreml/all: ≈10.0 MB, ≈2.00 ms" in svg
