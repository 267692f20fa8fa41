"""Ship advice per deployment target (mlbench/report/advice.py): a star never crosses targets, in the HTML's charts
or the Markdown's table of candidates."""

from __future__ import annotations

import re

from mlbench.plugins.registry import specs
from mlbench.plugins.spec import ANDROID, APPLE_DEVICES, SERVER_CPU
from mlbench.records import ArtifactInfo, Metric, RunRecord, Verification
from mlbench.report.advice import deployment_of, ship_groups
from mlbench.report.html.page import render_html
from mlbench.report.markdown.run_report import render_markdown
from tests.compare.test_comparison import rec, run_of

MB = 1_000_000


def _full(record: RunRecord, size: float, error: float, source: str = "measured") -> RunRecord:
    """The record with a package of `size` MB and a passing verification of max_rel `error`."""
    record.artifact = ArtifactInfo(key="k" * 64, cache_hit=True, export_seconds=0.0, path="x", size_bytes=int(size * MB))
    record.verify = Verification(source=source, reference="torch/cpu/float32", passed=True, max_abs=error,
                                 max_rel=error, tolerance=1e-2, outputs=[])
    return record


def mixed_records() -> list[RunRecord]:
    """A user's mixed pipeline on Linux: Core ML estimated on an A17 Pro (far faster, smaller and closer than
    anything here), ONNX Runtime and LiteRT measured on this x86 CPU, ExecuTorch with both delegates, eager."""
    est = lambda v: Metric.estimated(v, "ms")  # noqa: E731
    records = [
        rec("m/torch/cpu", [8.0] * 5),
        _full(rec("m/coreml/all", latency__estimated__a17pro=est(0.4)), 2.0, 1e-5, "emulated"),
        _full(rec("m/coreml/cpu_only", latency__estimated__a17pro=est(3.0)), 2.0, 1e-5, "emulated"),
        _full(rec("m/onnxruntime/float32", [6.0] * 5), 9.0, 1e-4),
        _full(rec("m/onnxruntime/float16", [7.0] * 5), 5.0, 1e-3),
        _full(rec("m/litert/float32", [5.0] * 5), 9.0, 1e-4),
        _full(rec("m/litert/dyn8", [4.0] * 5), 3.0, 1e-3),
        _full(rec("m/executorch/xnnpack", [4.5] * 5), 8.0, 1e-4),
        _full(rec("m/executorch/coreml", latency__estimated__a17pro=est(0.5)), 2.5, 1e-5, "emulated"),
    ]
    for record in records:
        if record.backend == "executorch":
            record.axes = {"delegate": record.axes["device"], "precision": "float32", "optimize": "none"}
    return records


def test_each_backend_says_where_its_variants_ship():
    assert {name: spec.deployment.name for name, spec in specs().items() if name != "toy"} == {
        "torch": "server", "coreml": "apple", "onnxruntime": "server", "coreai": "apple", "litert": "android",
        "executorch": "android"}
    targets = {r.variant_id: deployment_of(r) for r in mixed_records()}
    assert targets["m/executorch/coreml"] == APPLE_DEVICES  # by its delegate
    assert targets["m/executorch/xnnpack"] == ANDROID and targets["m/litert/dyn8"] == ANDROID
    assert targets["m/onnxruntime/float32"] == SERVER_CPU and targets["m/torch/cpu"] == SERVER_CPU


def test_no_star_crosses_deployment_targets():
    groups = {g.deployment.name: g for g in ship_groups(mixed_records())}
    assert list(groups) == ["apple", "android", "server"]
    assert groups["apple"].stars == {"m/coreml/all"}  # compared by the A17 Pro estimate
    assert groups["apple"].basis == "≈ estimate on a17pro" and groups["android"].basis == "median"
    # float32 LiteRT is beaten by ExecuTorch's XNNPACK on speed and size at the same error: no star
    assert groups["android"].stars == {"m/litert/dyn8", "m/executorch/xnnpack"}
    # Judged across targets, the A17 Pro estimate (faster, smaller, closer) would have beaten every x86 figure
    assert groups["server"].stars == {"m/onnxruntime/float32", "m/onnxruntime/float16"}
    for group in groups.values():
        assert {deployment_of(r.record) for r in group.rows} == {group.deployment}


def test_the_html_draws_one_ship_chart_per_target_with_its_own_stars():
    page = render_html(run_of(mixed_records(), "mixed001"))
    ship = page[page.index("<h2>Which variant to ship</h2>"):page.index("<h2>Placement per variant</h2>")]
    charts = re.findall(r'<h4 class="target">([^<]+) <span.*?(<svg class="chart ship".*?</svg>)', ship)
    assert [name for name, _ in charts] == ["Apple devices", "Android", "server or desktop CPU"]
    for name, svg in charts:
        target = {"Apple devices": APPLE_DEVICES, "Android": ANDROID, "server or desktop CPU": SERVER_CPU}[name]
        drawn = re.findall(r'<text class="label"[^>]*>[^<]*<title>([^<]+)</title>', svg)
        starred = re.findall(r'<text class="star"[^>]*>★<title>([^:]+):', svg)
        assert drawn and starred and set(starred) <= set(drawn)
        assert {deployment_of(r).name for r in mixed_records() if r.variant_id in drawn} == {target.name}
    assert "latency: ≈ estimate on a17pro" in charts[0][1] and "latency: median" in charts[2][1]


def test_the_markdown_opens_with_the_candidates_per_target():
    text = render_markdown(run_of(mixed_records(), "mixed001"))
    summary = text[text.index("## Which variant to ship"):text.index("### m")]
    rows = [line for line in summary.splitlines() if line.startswith("| m |")]
    assert rows == [
        "| m | Apple devices | ★ `coreml/all` | ≈0.400 ms on a17pro | 2.0 MB | †1.00e-05 |",
        "| m | Android | ★ `litert/dyn8` | 4.00 ms | 3.0 MB | 1.00e-03 |",
        "| m | Android | ★ `executorch/xnnpack/float32/none` | 4.50 ms | 8.0 MB | 1.00e-04 |",
        "| m | server or desktop CPU | ★ `onnxruntime/float32` | 6.00 ms | 9.0 MB | 1.00e-04 |",
        "| m | server or desktop CPU | ★ `onnxruntime/float16` | 7.00 ms | 5.0 MB | 1.00e-03 |",
    ]
    assert text.index("## Which variant to ship") < text.index("### m")  # the first table
    assert "_Android_: measured on this machine's CPU: a stand-in for a phone's CPU, not a phone's latency." in summary
    assert "(fastest)" not in summary  # every target has a candidate: the note on unstarred rows is left out


def test_candidates_with_the_very_same_figures_share_a_row():
    est = lambda v: Metric.estimated(v, "ms")  # noqa: E731
    twins = [_full(rec(f"m/coreml/{units}", latency__estimated__a17pro=est(0.4)), 2.0, 1e-5, "emulated")
             for units in ("cpu_and_ne", "all")]
    text = render_markdown(run_of(twins, "twins01"))
    rows = [line for line in text.splitlines() if line.startswith("| m |")]
    assert rows == ["| m | Apple devices | ★ `coreml/cpu_and_ne`, `coreml/all` | ≈0.400 ms on a17pro | 2.0 MB | †1.00e-05 |"]
