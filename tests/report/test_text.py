"""What a report quotes can never break it: table shapes hold, no raw HTML, no stray code span."""

from __future__ import annotations

from mlbench.records import OpPlacement, Placement
from mlbench.report.markdown.run_report import render_markdown
from mlbench.report.placement import render_placement_markdown
from mlbench.report.text import md_cell, md_code, one_line
from tests.report.test_report import record, report

HOSTILE = "bad | cell `tick` <img src=x onerror=alert(1)>\nsecond \\ line"


def test_md_cell_escapes_pipes_backticks_backslashes_and_tags_on_one_line():
    assert one_line("a\n\tb  c\r\n") == "a b c"
    assert md_cell(HOSTILE) == "bad \\| cell \\`tick\\` &lt;img src=x onerror=alert(1)> second \\\\ line"
    assert md_cell("plain_name-1.0") == "plain_name-1.0"


def test_md_code_fences_past_any_backticks_and_escapes_pipes():
    assert md_code("m/torch/cpu") == "`m/torch/cpu`"
    assert md_code("a|b") == "`a\\|b`"
    assert md_code("x`y") == "``x`y``"
    assert md_code("`edge`") == "`` `edge` ``"
    assert md_code("two\nlines") == "`two lines`"


def cells(row: str) -> int:
    """Cells of a Markdown table row, as GitHub splits them (unescaped pipes)."""
    count, escaped = 0, False
    for char in row.strip()[1:]:
        if char == "|" and not escaped:
            count += 1
        escaped = char == "\\" and not escaped
    return count


def test_run_report_keeps_its_table_shape_whatever_an_error_says():
    text = render_markdown(report([record("m/torch/cpu/float32"),
                                   record("m/torch/cpu/float16", status="failed", median=None, error=HOSTILE)]))
    model_table = text[text.index("### m"):]  # below the summary of candidates, a table of its own
    rows = [line for line in model_table.splitlines() if line.startswith("|")]
    assert len({cells(row) for row in rows}) == 1  # every row, header included, has the same cells
    failed = next(row for row in rows if "float16" in row)
    assert failed.endswith("| bad \\| cell \\`tick\\` &lt;img src=x onerror=alert(1)> second \\\\ line |")
    assert "<img" not in text


def test_placement_quotes_op_names_and_reasons():
    placement = Placement(source="estimated", method="mlbench rules", compute_ops=1, constants=0,
                          by_count={"cpu": 1.0}, switches=0, note="a <script> note\nover lines",
                          ops=[OpPlacement(name="op|1", op_type="conv`", device="cpu", reason="why <b>|</b>")])
    text = render_placement_markdown(placement, title="T | <i>", max_ops=None)
    assert text.startswith("### T \\| &lt;i> (estimated: mlbench rules)")
    assert "a &lt;script> note over lines" in text
    assert "| 1 | op\\|1 | conv\\` | cpu |  | – | why &lt;b>\\|&lt;/b> |" in text
    none = render_placement_markdown(placement, title="T", max_ops=0)  # `inspect --max-layers 0`
    assert none.endswith("\n1 operation, not listed (at most 0 asked for).\n") and "| # | Op |" not in none


def test_a_comparison_quotes_paths_machines_and_labels():
    from mlbench.compare.comparison import compare
    from mlbench.report.markdown.compare import render_comparison_markdown
    from tests.compare.test_comparison import rec, run_of

    base, head = run_of([rec("m/torch/cpu")], "b"), run_of([rec("m/torch/cpu")], "h")
    result = compare(base, head)
    hostile = result.head.model_copy(update={"label": "runs/a|b`c.json", "machine": "Linux <b>x</b>\nCPU | 2"})
    text = render_comparison_markdown(result.model_copy(update={"head": hostile}))
    head_line = next(line for line in text.splitlines() if line.startswith("- **Head**"))
    assert head_line.endswith("Linux &lt;b>x&lt;/b> CPU \\| 2) from ``runs/a\\|b`c.json``")
    assert "<b>" not in text
