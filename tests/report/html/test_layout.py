"""The HTML report as a browser lays it out: headless Chromium runs a small script over the page (added here, never
part of a report) that prints each chart label's box, and no two labels of a chart overlap, nor a label a point.
Tick labels keep one style per axis."""

from __future__ import annotations

import html as html_module
import json
import re
import subprocess

import pytest

from mlbench.records import Metric
from mlbench.report.html.latency import latency_chart
from mlbench.report.html.page import render_html
from mlbench.report.html.ticks import byte_labels, linear_time_labels, log_time_label
from tests.compare.test_comparison import rec, run_of
from tests.report.html.test_page import _chromium

MB = 1_000_000

BOXES = """<script>
const found = [];
document.querySelectorAll("svg.chart").forEach((svg, chart) => {
  svg.querySelectorAll("text.point-label, text.tick, circle").forEach((e) => {
    const r = e.getBoundingClientRect();
    found.push({chart, kind: e.tagName === "circle" ? "point" : e.classList.contains("tick") ? "tick" : "label",
                axis: e.classList.contains("y") ? "y" : "x", text: e.firstChild ? e.firstChild.textContent : "",
                left: r.left, top: r.top, right: r.right, bottom: r.bottom});
  });
});
const out = document.createElement("pre"); out.id = "boxes"; out.textContent = JSON.stringify(found);
document.body.appendChild(out);
</script>"""


def crowded_report():
    """A model whose Core ML variants crowd one corner of the memory chart, beside a server CPU's."""
    est = lambda v, unit="ms": Metric.estimated(v, unit)  # noqa: E731
    records = [rec("m/torch/cpu", [1800.0, 1900.0, 2000.0], memory__peak=Metric.measured(40 * MB, "bytes")),
               rec("m/onnxruntime/cpu", [90.0, 95.0, 99.0], memory__peak=Metric.measured(180 * MB, "bytes"))]
    for i, (units, precision) in enumerate((u, p) for p in ("float32", "float16") for u in ("cpu_only", "cpu_and_gpu",
                                                                                          "cpu_and_ne", "all")):
        for optimize, scale in (("none", 1.0), ("palettize4", 0.25)):
            record = rec(f"m/coreml/{precision}/{units}/{optimize}",
                         latency__estimated__a17pro=est(0.6 + 0.05 * i + (0.01 if optimize == "none" else 0)),
                         memory__estimated=est((50 if precision == "float32" else 26) * scale * MB + i * 2e5, "bytes"))
            record.axes = {"precision": precision, "compute_units": units, "optimize": optimize}
            records.append(record)
    return run_of(records, "crowd0001")


def _overlap(a: dict, b: dict, slack: float = 0.5) -> bool:
    return (a["left"] + slack < b["right"] and b["left"] + slack < a["right"] and a["top"] + slack < b["bottom"]
            and b["top"] + slack < a["bottom"])


@pytest.mark.skipif(_chromium() is None, reason="needs a Chromium (apt-get install chromium)")
def test_no_chart_label_overlaps_another_or_a_point_in_chromium(tmp_path):
    page = render_html(crowded_report())
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", BOXES + "</body>"), encoding="utf-8")
    result = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
                             "--window-size=1400,2000", "--dump-dom", path.as_uri()],
                            capture_output=True, text=True, timeout=120, check=True)
    boxes = json.loads(html_module.unescape(re.search(r'<pre id="boxes">(.*?)</pre>', result.stdout, re.S).group(1)))
    labels = [b for b in boxes if b["kind"] == "label"]
    assert len(labels) >= 4 and any(b["kind"] == "point" for b in boxes)  # the crowded chart drew labels
    folded = re.findall(r'<li value="(\d+)">', page)
    assert folded  # some names had no room: numbered, and listed under the chart
    for i, a in enumerate(labels):
        assert a["right"] > a["left"] > 0 and a["bottom"] > a["top"]
        for b in labels[i + 1:]:
            assert not (a["chart"] == b["chart"] and _overlap(a, b)), (a["text"], b["text"])
        for point in (b for b in boxes if b["kind"] == "point" and b["chart"] == a["chart"]):
            assert not _overlap(a, point), (a["text"], point)
    ticks = [b for b in boxes if b["kind"] == "tick"]
    for i, a in enumerate(ticks):
        for b in ticks[i + 1:]:
            assert not (a["chart"] == b["chart"] and _overlap(a, b, slack=0)), (a["text"], b["text"])


def test_a_log_axis_labels_its_decades_in_one_style():
    assert [log_time_label(10.0 ** k) for k in range(-2, 5)] == ["0.01 ms", "0.1 ms", "1 ms", "10 ms", "100 ms",
                                                                 "1 s", "10 s"]
    records = [rec("m/torch/slow", [4000.0, 4200.0, 4500.0]), rec("m/torch/fast", [0.5, 0.55, 0.6])]
    svg = latency_chart(records)
    ticks = re.findall(r'class="muted tick">([^<]+)</text>', svg)
    assert ticks == ["0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s"]
    assert all(re.fullmatch(r"(0\.)?\d+ (ms|s)", t) for t in ticks)  # no 1e+04, no 1000 ms, no "(log)" glued on
    assert ">log scale</text>" in svg


def test_a_linear_axis_keeps_one_unit():
    assert linear_time_labels([0, 500, 1000, 1500, 2000]) == ["0 s", "0.5 s", "1 s", "1.5 s", "2 s"]
    assert linear_time_labels([0, 0.25, 0.5]) == ["0 ms", "0.25 ms", "0.5 ms"]
    assert byte_labels([0, 12.5 * MB, 25 * MB]) == ["0 MB", "12.5 MB", "25 MB"]
    assert byte_labels([0, 500_000, 1_000_000]) == ["0 MB", "0.5 MB", "1 MB"]
    svg = latency_chart([rec("m/torch/a", [800.0, 900.0, 1000.0]), rec("m/torch/b", [700.0, 750.0, 800.0])])
    assert re.findall(r'class="muted tick">([^<]+)</text>', svg) == ["0 s", "0.25 s", "0.5 s", "0.75 s", "1 s"]
