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
