"""The Markdown report as GitHub renders it in a pull-request comment: GitHub's own cmark-gfm (`cmarkgfm`),
else markdown-it-py's GFM-like preset. Tables of at most 8 columns, the rest folded; empty columns
dropped; a repeated note said once; no strikethrough from estimate marks; the comment size limit kept."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from mlbench.compare.comparison import compare
from mlbench.metrics import ESTIMATE_MARK
from mlbench.records import ArtifactInfo, Metric, OpPlacement, Placement
from mlbench.report.html.page import render_html
from mlbench.report.markdown.compare import render_comparison_markdown
from mlbench.report.markdown.layout import COMMENT_LIMIT
from mlbench.report.markdown.run_report import FULL_NAME, render_markdown
from tests.compare.test_comparison import rec, run_of

MACOS_ONLY = "Core ML runs only on macOS; this machine runs Linux"


def gfm(text: str) -> str:
    """HTML as GitHub makes it from Markdown (single-tilde strikethrough included, as on github.com)."""
    try:
        import cmarkgfm
    except ImportError:
        from markdown_it import MarkdownIt

        return MarkdownIt("gfm-like", {"linkify": False}).enable("strikethrough").render(text)
    from cmarkgfm.cmark import Options

    # GitHub passes raw HTML through its sanitizer, which keeps <details> and <summary>
    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


class Tables(HTMLParser):
    """Each <table>: its header cells and its rows' cell counts, and whether it sits inside <details>."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.depth = 0
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            self.depth += 1
        elif tag == "table":
            self.tables.append({"head": [], "rows": [], "folded": self.depth > 0})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append(0)
        elif tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "details":
            self.depth -= 1
        elif tag in ("th", "td") and self._cell is not None:
            if tag == "th":
                self.tables[-1]["head"].append("".join(self._cell).strip())
            self.tables[-1]["rows"][-1] += 1
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _placement(ne: float, source: str = "estimated") -> Placement:
    return Placement(source=source, method="mlbench rules", compute_ops=10, constants=2,
                     by_count={"neural_engine": ne, "cpu": 1 - ne}, switches=2, note=None,
                     by_cost={"neural_engine": 0.99, "cpu": 0.01} if ne else {"cpu": 1.0}, cost_basis="roofline",
                     ops=[OpPlacement(name="conv", op_type="conv", device="neural_engine")])


def coreml_like_report():
    """A torch baseline and Core ML variants measured nowhere (Linux): estimated placements and latency."""
    est = lambda v, unit="ms": Metric.estimated(v, unit)  # noqa: E731
    baseline = rec("m/torch/cpu", [10.0, 10.5, 11.0, 11.5, 12.0])
    baseline.axes, baseline.details = {"device": "cpu", "precision": "float32"}, {"verify": "the reference"}
    records = [baseline]
    for units in ("cpu_only", "all", "cpu_and_ne"):
        r = rec(f"m/coreml/{units}", latency__median=est(0.4), latency__best=est(0.38), latency__p90=est(0.5),
                placement__switches=Metric.estimated(2, "count"))
        r.metrics["latency.median"] = Metric.absent("ms", MACOS_ONLY) if units != "all" else est(0.4)
        r.placement = _placement(0.95 if units != "cpu_only" else 0.0)
        r.artifact = ArtifactInfo(key="k" * 64, cache_hit=False, export_seconds=3.2, path="x", size_bytes=2_000_000)
        records.append(r)
    records[1].axes = {"device": "cpu_only"}
    return run_of(records, "run00000001")


def test_a_pull_request_comment_table_fits_and_renders_without_strikethrough():
    text = render_markdown(coreml_like_report())
    html = gfm(text)
    assert "<del>" not in html and "<s>" not in html and "~" not in text
    tables = Tables(html).tables
    assert tables[0]["head"] == ["Model", "Runs on", "Candidate", "Latency", "Size", "Verify max_rel"]  # what to ship
    main, folded = tables[1], tables[2]
    assert not main["folded"] and folded["folded"]
    assert len(main["head"]) <= 8
    assert main["head"] == ["Variant", "Status", "Median ms", "vs eager", "Verify max_rel",
                            main["head"][5], "Size", "Note"]
    assert main["head"][5] == "ANE / GPU / CPU % of cost"  # the shares by cost, and the header says so
    assert folded["head"] == ["Variant", "Best ms", "p90 ms", "ANE / GPU / CPU % of ops", "Switches", "Export"]
    assert f"| {ESTIMATE_MARK}99 / 0 / 1 |" in text and f"| {ESTIMATE_MARK}95 / 0 / 5 |" in text
    assert "_% of cost_: each device's share of the work" in text
    for table in (main, folded):
        assert set(table["rows"]) == {len(table["head"])} and len(table["rows"]) == 5  # header + 4 variants
    assert text.count(MACOS_ONLY) == 1  # two rows share it: a footnote
    assert f"- ¹ not timed: {MACOS_ONLY}" in text and "| ¹ |" in text
    assert f"| {ESTIMATE_MARK}0.400 | {ESTIMATE_MARK}" in text  # estimated latency and speed-up, marked alike


def test_columns_no_row_fills_are_dropped_and_a_note_on_every_row_is_said_once():
    records = [rec(f"m/torch/{d}", [1.0, 1.1, 1.2, 1.3, 1.4]) for d in ("cpu", "cuda", "mps")]
    for r in records:
        r.metrics["latency.median"] = Metric.absent("ms", "device not available")
    text = render_markdown(run_of(records, "r1"))
    tables = Tables(gfm(text)).tables
    assert len(tables) == 1  # nothing left to fold
    assert tables[0]["head"] == ["Variant", "Status", "Best ms"]
    assert text.count("device not available") == 1 and "Note for every variant: not timed: device not available" in text


def big_report(models: int = 40):
    """Many models, each variant with its own failure and placement note: far past a comment's size."""
    records = []
    for i in range(models):
        for j, units in enumerate(("cpu_only", "cpu_and_gpu", "cpu_and_ne", "all")):
            r = rec(f"model{i:02d}/coreml/{units}", status="failed")
            r.error = f"export {i}.{j}: " + "the converter gave up on this operation; " * 6
            r.placement = _placement(0.5).model_copy(update={"note": f"placement note {i}.{j}: " + "why " * 80})
            records.append(r)
    return run_of(records, "big0000001")


def test_a_report_too_big_for_a_comment_is_cut_with_a_pointer_and_still_renders():
    report = big_report()
    full = render_markdown(report, limit=None)
    assert len(full) > COMMENT_LIMIT
    text = render_markdown(report)
    assert len(text) <= COMMENT_LIMIT
    assert f"the full report ({len(full):,} characters) is `{FULL_NAME}` beside it" in text
    html = gfm(text)
    assert html.count("<details>") == html.count("</details>") > 0
    assert "<summary><b>model00 (4 variants)</b></summary>" in html
    cut = [line for line in text.splitlines() if "only in the full report" in line or "Only the tables" in line]
    assert cut, "what was left out is named"
    assert all(len(t["head"]) <= 8 for t in Tables(html).tables)


def test_write_reports_keeps_the_full_markdown_beside_a_cut_one(write_pipeline, tmp_path):
    from mlbench.report import write_reports
    from mlbench.validate import load_pipeline

    path = write_pipeline("version: 1\nname: p\nmodels:\n  - {name: m, source: 'torchvision:resnet18', inputs: "
                          "[{name: x, shape: [1]}]}\ntargets:\n  - backend: torch\nreport: {dir: out, formats: [markdown]}\n")
    pipeline = load_pipeline(path)
    written = write_reports(big_report(), pipeline)
    assert len(written["markdown"].read_text(encoding="utf-8")) <= COMMENT_LIMIT
    assert written["markdown-full"] == tmp_path / "out" / FULL_NAME
    assert written["markdown-full"].read_text(encoding="utf-8") == render_markdown(big_report(), limit=None)
    write_reports(coreml_like_report(), pipeline)
    assert not (tmp_path / "out" / FULL_NAME).exists()  # a small report fits: no stale full copy


def test_the_estimate_mark_is_the_same_everywhere_and_never_a_tilde():
    report = coreml_like_report()
    markdown, html = render_markdown(report), render_html(report)
    later = run_of([*report.records], "run00000002")
    comparison = render_comparison_markdown(compare(report, later))
    for text in (markdown, html, comparison):
        assert ESTIMATE_MARK in text
        assert not re.search(r"~\d", text), text[:200]
        assert "<del>" not in gfm(text)


def test_the_renderer_would_catch_a_strikethrough():
    assert "<del>" in gfm("| a |\n|---|\n| ~0.4~ |\n") or "<s>" in gfm("| a |\n|---|\n| ~~0.4~~ |\n")
