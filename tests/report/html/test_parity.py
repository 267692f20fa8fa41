"""The HTML report shows at least what the Markdown report shows: every figure of every variant (the folded
columns included), every note under a table, the run's machine and settings; estimated latency per chip in
the charts, hatched, with its band; labels that fit their chart."""

from __future__ import annotations

import html as html_module
import re
from html.parser import HTMLParser

from mlbench.records import (
    ArtifactInfo,
    Band,
    Metric,
    OpPlacement,
    OutputError,
    Placement,
    RunReport,
    Verification,
)
from mlbench.report.html.charts import label_width
from mlbench.report.html.from_markdown import cells, plain
from mlbench.report.html.page import render_html
from mlbench.report.markdown.run_report import render_markdown
from tests.compare.test_comparison import rec, run_of

BAND = Band(median_ratio=1.13, worst_ratio=2.01, basis="9 published Core ML latencies")
LONG = "mobilenet_v3_small"


def _verification(source: str, max_rel: float, *, passed: bool = True, note: str | None = None,
                  samples: int = 1) -> Verification:
    return Verification(source=source, reference="torch/cpu/float32", max_abs=max_rel, max_rel=max_rel,
                        tolerance=1e-2, passed=passed, note=note, samples=samples, snr_db=32.0,
                        outputs=[OutputError(name="y", max_abs=max_rel, max_rel=max_rel, shape=[1, 10])])


def _coreml(variant: str, a17: float, m1: float, size: int, ne: float, verify: Verification, *,
            median: float | None = None):
    metrics: dict = {"latency.estimated.a17pro": Metric(value=a17, unit="ms", source="estimated", band=BAND),
                     "latency.estimated.m1": Metric(value=m1, unit="ms", source="estimated", band=BAND,
                                                    measured_as="latency.median"),
                     "placement.neural_engine": Metric.estimated(ne, "ratio"),
                     "placement.cpu": Metric.estimated(1 - ne, "ratio"),
                     "placement.count.neural_engine": Metric.estimated(ne, "ratio"),
                     "placement.count.cpu": Metric.estimated(1 - ne, "ratio"),
                     "placement.switches": Metric.estimated(1, "count")}
    record = rec(variant, None if median is None else [median] * 5, **{k.replace(".", "__"): v for k, v in metrics.items()})
    if median is None:
        record.metrics["latency.median"] = Metric.absent("ms", "Core ML runs only on macOS; this machine runs Linux")
    precision, units, optimize = variant.split("/")[2:]
    record.axes = {"precision": precision, "compute_units": units, "optimize": optimize}
    record.verify = verify
    record.artifact = ArtifactInfo(key=f"{precision}{optimize}".ljust(40, "0"), cache_hit=False, export_seconds=7.7,
                                   path="/tmp/x.mlpackage", size_bytes=size)
    record.placement = Placement(source="estimated", method="mlbench rules", preferred="neural_engine", compute_ops=162,
                                 constants=10, by_count={"neural_engine": ne, "cpu": 1 - ne},
                                 by_cost={"neural_engine": ne, "cpu": 1 - ne}, cost_basis="roofline", switches=1,
                                 note=None if ne else "No operation reached the Neural Engine: the program is float32.",
                                 ops=[OpPlacement(name="conv_0", op_type="conv", device="cpu")])
    return record


def coreml_like_report() -> RunReport:
    """What a Core ML sweep on Linux reports: a measured eager baseline, estimates per chip with their band,
    emulated (†) and reference (‡) verification, placement, sizes, a failed variant."""
    base = rec(f"{LONG}/torch/cpu/float32", [10.0, 11.0, 12.0, 13.0, 20.0])
    base.axes = {"device": "cpu", "precision": "float32"}
    base.details["verify"] = "reference"
    records = [
        base,
        _coreml(f"{LONG}/coreml/float32/cpu_and_gpu/none", 3.0, 2.7, 10_200_000, 0.0, _verification("emulated", 3.7e-9)),
        _coreml(f"{LONG}/coreml/float16/cpu_and_gpu/palettize4", 2.3, 2.2, 1_400_000, 0.0,
                _verification("emulated", 1.6e-3, note="outputs near 0", samples=3)),
        _coreml(f"{LONG}/coreml/float16/all/none", 0.77, 0.74, 5_200_000, 1.0, _verification("reference", 2.5e-5)),
        _coreml(f"{LONG}/coreml/float16/all/palettize4", 0.69, 0.67, 1_400_000, 1.0,
                _verification("emulated", 0.2, passed=False), median=0.8),
        rec(f"{LONG}/coreml/float16/cpu_only/none", status="failed"),
    ]
    records[-1].axes = {"precision": "float16", "compute_units": "cpu_only", "optimize": "none"}
    return run_of(records, "parity0001").model_copy(update={
        "machine": {"os": "Linux", "os_release": "6.18", "arch": "x86_64", "cpu": "Xeon", "cpu_count": 2,
                    "python": "3.11.7", "packages": {"torch": "2.14.1", "coremltools": "9.0"}},
        "settings": {"latency": {"warmup": 5, "repeats": 30, "min_time_s": 1.0}}})


class _Tables(HTMLParser):
    """Every table row's cells as text; and all the page's text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(_norm("".join(self._cell)))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def missing_from_html(report: RunReport) -> list[str]:
    """What the whole Markdown report shows that the HTML report does not: each table cell (looked for in
    the HTML row of the same variant) and each line of text outside the tables."""
    markdown = render_markdown(report, limit=None).splitlines()
    page = render_html(report)
    tables = _Tables(page)
    rows: dict[str, list[list[str]]] = {}
    for row in tables.rows:
        if row:
            rows.setdefault(row[0], []).append(row)
    text = _norm(html_module.unescape("".join(tables.text)))
    missing: list[str] = []
    i = 0
    while i < len(markdown):
        line = markdown[i]
        if line.startswith("|") and i + 1 < len(markdown) and re.match(r"^\|[-:|]+\|$", markdown[i + 1]):
            header = [plain(c) for c in cells(line)]
            i += 2
            while i < len(markdown) and markdown[i].startswith("|"):
                values = [_norm(plain(c)) for c in cells(markdown[i])]
                same = rows.get(values[0], [])
                for name, value in zip(header[1:], values[1:]):
                    if value and not any(value in row for row in same):
                        missing.append(f"{values[0]} {name}: {value}")
                i += 1
            continue
        words = _norm(plain(line.removeprefix("- ").lstrip("#").strip()))
        head = line.startswith(("# ", "Run `", "Machine: ", "All figures", "<details>", "</details>"))
        if words and not head and words not in text:
            missing.append(words)
        i += 1
    machine, latency = report.machine, report.settings.get("latency", {})
    head_facts = [report.run_id, report.created, *(str(machine[k]) for k in ("os", "os_release", "arch", "cpu")
                                                   if machine.get(k)),
                  f"({machine.get('cpu_count')} cores)", f"Python {machine.get('python')}",
                  *(f"{k} {v}" for k, v in machine.get("packages", {}).items() if v),
                  f"{latency.get('warmup')} warmup calls thrown away",
                  f"at least {latency.get('repeats')} calls and {latency.get('min_time_s')} s"]
    missing += [fact for fact in head_facts if fact not in text]
    return missing


def test_every_figure_and_note_the_markdown_shows_is_in_the_html():
    report = coreml_like_report()
    markdown = render_markdown(report, limit=None)
    assert "≈ms a17pro" in markdown and "†3.70e-09" in markdown and "‡2.50e-05" in markdown  # the input covers them
    assert "(measured ×" in markdown and "More columns" in render_markdown(report)  # folds in the comment
    assert missing_from_html(report) == []


def test_the_latency_chart_draws_each_chips_estimate_hatched_with_its_band():
    page = render_html(coreml_like_report())
    latency = re.search(r'<svg class="chart latency".*?</svg>', page).group(0)
    estimates = re.findall(r'<rect class="bar estimate estimated chip-(\w+)"[^>]*fill="url\(#est-chip(\d)\)"', latency)
    assert sorted(set(estimates)) == [("a17pro", "0"), ("m1", "1")] and len(estimates) == 8  # 4 variants × 2 chips
    assert latency.count('<g class="band"') == 8 and "×2.01 at worst" in latency
    assert "not timed" not in latency  # the estimates stand in; the reason is said once above the chart
    assert page.count("3 variants not timed: Core ML runs only on macOS; this machine runs Linux") == 1
    assert "failed: measure: boom" in latency  # a variant without any figure still says why
    assert "≈ a17pro (estimated for that chip)" in page and "≈ m1 (estimated for that chip)" in page  # the legend names each chip


def test_the_ship_chart_puts_latency_size_and_error_side_by_side_and_stars_the_undominated():
    page = render_html(coreml_like_report())
    ship = re.search(r'<svg class="chart ship".*?</svg>', page).group(0)
    assert "latency: ≈ estimate on a17pro" in ship  # the figure most variants have: the estimate, not a median
    labels = re.findall(r'<text class="label"[^>]*>([^<]+)<title>([^<]+)</title>', ship)
    assert [v for _, v in labels] == [f"{LONG}/coreml/float16/all/palettize4", f"{LONG}/coreml/float16/all/none",
                                      f"{LONG}/coreml/float16/cpu_and_gpu/palettize4",
                                      f"{LONG}/coreml/float32/cpu_and_gpu/none"]  # fastest first; eager has no
    # figure to set beside them (no estimate, no package, it is the reference), the failed one none at all
    stars = re.findall(r'<text class="star"[^>]*>★<title>([^:]+):', ship)
    # all/palettize4 failed its tolerance (✗): no star, fastest as it is. Of those that passed, float16/all/none is
    # the fastest, cpu_and_gpu/palettize4 the smallest, float32 the closest to the reference: each a candidate
    assert stars == [f"{LONG}/coreml/float16/all/none", f"{LONG}/coreml/float16/cpu_and_gpu/palettize4",
                     f"{LONG}/coreml/float32/cpu_and_gpu/none"]
    from mlbench.report.advice import front, rows_of

    slower = coreml_like_report()
    slower.records[3].metrics["latency.estimated.a17pro"] = Metric(value=2.5, unit="ms", source="estimated")
    slower.records[3].artifact.size_bytes = 1_500_000
    slower.records[3].verify = _verification("reference", 2e-3)  # now beaten on all three by cpu_and_gpu/palettize4
    assert f"{LONG}/coreml/float16/all/none" not in front(rows_of(slower.records)[0])
    assert "†3.70e-09" in ship and "‡2.50e-05" in ship and "†2.00e-01 ✗" in ship
    assert "10.2 MB" in ship and "1.4 MB" in ship


def test_labels_fit_left_of_their_charts():
    """A right-aligned label at x needs x px: 12 px monospace is at most 7.3 px a character (DejaVu Sans Mono,
    Menlo: 7.2). Cut labels keep their end and carry the whole id as a tooltip."""
    page = render_html(coreml_like_report())
    found = re.findall(r'<text class="label" x="([\d.]+)"[^>]*text-anchor="end">([^<]*)<title>([^<]*)</title>', page)
    assert len(found) == 6 + 4 + 4  # latency (every variant), ship and placement (those with figures)
    for x, label, whole in found:
        shown = html_module.unescape(label)
        assert 7.3 * len(shown) <= float(x), (shown, x)
        assert whole.endswith(shown.removeprefix("…"))
    long = "m" * 60 + "/coreml/float16/cpu_and_gpu/palettize4"
    assert label_width([long]) <= 400
    report = coreml_like_report()
    for record in report.records:
        record.model = "m" * 60
        record.variant_id = record.variant_id.replace(LONG, "m" * 60)
    for x, label, _ in re.findall(r'<text class="label" x="([\d.]+)"[^>]*text-anchor="end">([^<]*)<title>([^<]*)</title>',
                                  render_html(report)):
        assert 7.3 * len(html_module.unescape(label)) <= float(x), (label, x)
    for width in re.findall(r'<svg class="chart \w+"[^>]* width="(\d+)"', page):
        assert int(width) <= 1280 - 32  # within the page's column: nothing cut at the right either
