"""A Linux run's main Markdown table leads with estimates where nothing was measured (issue 41)."""

from __future__ import annotations

from mlbench.records import Metric
from mlbench.report.markdown.run_report import render_markdown
from tests.compare.test_comparison import rec, run_of

MB = 1_000_000


def test_every_unmeasured_core_ml_row_shows_its_first_chip_estimate_marked():
    eager = rec("m/torch/cpu", memory__peak=Metric.measured(40 * MB, "bytes"), latency__median=8.0)
    coreml = rec("m/coreml/all", memory__estimated=Metric.estimated(10 * MB, "bytes"),
                 latency__estimated__a17pro=Metric.estimated(2.0, "ms"), latency__estimated__m1=Metric.estimated(3.0, "ms"))
    text = render_markdown(run_of([eager, coreml], "r1"))
    header = next(line for line in text.splitlines() if line.startswith("| Variant"))
    assert "Median ms (else ≈a17pro)" in header and "peak memory (else ≈estimated)" in header
    row = next(line for line in text.splitlines() if line.startswith("| `coreml/all`"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[3] == "≈2.00" and cells[4] == "≈10.0 MB"
    assert "| `torch/cpu` | ok | 8.00 | 40.0 MB |" in text  # measured leads, unmarked


def test_with_a_base_run_the_first_table_is_what_changed():
    from mlbench.compare.comparison import compare

    base = run_of([rec("m/torch/cpu", [8.0] * 9), rec("m/onnxruntime/cpu", [4.0] * 9)], "base01")
    head = run_of([rec("m/torch/cpu", [8.0] * 9), rec("m/onnxruntime/cpu", [6.0] * 9)], "head01")
    text = render_markdown(head, comparison=compare(base, head))
    changed, ship = text.index("## What changed against the base run"), text.index("## Which variant to ship")
    assert changed < ship < text.index("### m")
    first_table = next(line for line in text[changed:].splitlines() if line.startswith("| "))
    assert first_table == "| variant | rule | change | noise test |"  # the regression, before anything else
    assert "**Regression**: `m/onnxruntime/cpu`" in text[changed:ship]
    assert "## mlbench compare" not in text  # the comparison's own title gives way to the report's


def test_a_long_comparison_is_cut_to_keep_the_comment_within_its_limit():
    from mlbench.compare.comparison import compare
    from mlbench.report.markdown.layout import COMMENT_LIMIT

    base = run_of([rec(f"m{i}/torch/cpu", [8.0] * 9) for i in range(900)], "base01")
    head = run_of([rec(f"m{i}/torch/cpu", [9.5] * 9) for i in range(900)], "head01")
    text = render_markdown(head, comparison=compare(base, head))
    assert len(text) <= COMMENT_LIMIT
    changed = text[text.index("## What changed"):text.index("## Which variant to ship")]
    assert len(changed) <= COMMENT_LIMIT // 3 + 400 and "more lines of the comparison are in the full report" in changed
    assert changed.count("<details>") == changed.count("</details>")  # a cut never leaves a fold open


def test_on_a_mac_the_measured_median_leads_and_the_estimate_stays_beside_it():
    est = lambda v: Metric.estimated(v, "ms")  # noqa: E731
    mac = [rec("m/torch/cpu", [8.0] * 5),
           rec("m/coreml/all", [1.0] * 5, latency__estimated__a17pro=est(0.8), latency__estimated__m1=est(1.1))]
    text = render_markdown(run_of(mac, "mac001"))
    header = next(line for line in text.splitlines() if line.startswith("| Variant"))
    assert "Median ms |" in header and "(else" not in header  # every row measured: nothing stands in
    assert "≈ms a17pro" in header
    from mlbench.report.markdown.run_report import model_columns

    keep = {c.header: c.priority for c in model_columns(mac)}
    assert keep["≈ms a17pro"] < keep["vs eager"] < keep["≈ms m1"]  # the first chip's estimate stays beside it
    row = next(line for line in text.splitlines() if line.startswith("| `coreml/all`"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[3] == "1.00" and cells[header.split("|").index(" ≈ms a17pro ")] == "≈0.800"
    linux = [rec("m/coreml/all", latency__estimated__a17pro=est(0.8))]
    header = next(line for line in render_markdown(run_of(linux, "lin001")).splitlines() if line.startswith("| Variant"))
    assert "(else ≈a17pro)" in header
    assert {c.header: c.priority for c in model_columns(linux)}["≈ms a17pro"] > 9  # the median column shows it
