"""Text from a model or a file is shown, never obeyed: terminal escape sequences reach neither the terminal
(progress lines, CLI output) nor report.md / report.html, and Markdown in an error stays text (no link, no
strikethrough, no emphasis), as GitHub's own renderer reads it."""

from __future__ import annotations

import io
import json
import re

import pytest

from mlbench.cli.main import main
from mlbench.compare.comparison import compare
from mlbench.records import Metric
from mlbench.report.html.page import render_html
from mlbench.report.markdown.compare import render_comparison_markdown
from mlbench.report.markdown.run_report import render_markdown
from mlbench.report.text import json_text, md_cell, md_code, printable
from mlbench.run.progress import LiveProgress, PlainProgress
from tests.compare.test_comparison import rec, run_of
from tests.report.markdown.test_github import gfm
from tests.report.test_report import record, report

ESC = "\x1b[2J\x1b[H\r\x1b[32mok\x1b[0m"  # clear the screen, home, back to the line start, a fake green "ok"
SHOWN = "\\x1b[2J\\x1b[H\\x0d\\x1b[32mok\\x1b[0m"
MARKDOWN = "see [a](javascript:alert(1)) and ~~x~~ or ~y~, **bold** _em_ ![i](x.png) &#x202e; <u>u</u>"


def test_printable_shows_controls_as_escapes_and_keeps_text():
    assert printable(ESC) == SHOWN
    assert printable("tab\tnew\nline é ✓ ≈") == "tab\tnew\nline é ✓ ≈"
    assert printable("8-bit CSI \x9b2J, bidi \u202eevil\u202c, DEL \x7f") == (
        "8-bit CSI \\x9b2J, bidi \\u202eevil\\u202c, DEL \\x7f")
    assert json.loads(json_text(json.dumps({"a": "\x9b\u202e"}, ensure_ascii=False))) == {"a": "\x9b\u202e"}
    assert "\x9b" not in json_text(json.dumps({"a": "\x9b"}, ensure_ascii=False))


def test_progress_lines_never_carry_a_model_s_escape_sequences():
    failed = record("m/torch/cpu/float32", status="failed", median=None, error=f"measure: {ESC}")
    stream = io.StringIO()
    PlainProgress(stream).record(failed, 1, 2)
    assert stream.getvalue() == f"[1/2] m/torch/cpu/float32  failed  measure: {SHOWN}\n"

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    live = LiveProgress(console)
    live.start(2)
    live.stage(f"m{ESC}[green]ok[/green]", "measure")  # neither escapes nor rich markup act
    assert live.bar.tasks[0].description == f"measure m{SHOWN}[green]ok[/green]"
    live.record(failed, 1, 2)
    live.stop()
    assert "\x1b" not in console.file.getvalue() and SHOWN in console.file.getvalue()


def test_report_md_and_html_show_escapes_as_text():
    hostile = record(f"m{ESC}/torch/cpu/float32", status="failed", median=None, error=f"measure: {ESC}")
    run = report([record("m/torch/cpu/float32"), hostile])
    markdown, html = render_markdown(run), render_html(run)
    for text in (markdown, html):
        assert "\x1b" not in text and "\r" not in text
    assert md_cell(f"measure: {ESC}") in markdown and SHOWN in html  # Markdown: the CR as a space, on one line
    comparison = render_comparison_markdown(compare(run_of([rec("m/torch/cpu")], "b"),
                                                    run_of([rec("m/torch/cpu", status="failed").model_copy(
                                                        update={"error": ESC})], "h")))
    assert "\x1b" not in comparison and md_cell(ESC) in comparison


def _links_and_marks(html: str) -> list[str]:
    """Tags and characters Markdown made from the hostile text: in the table cell, list item or paragraph that quotes it."""
    quoting = [part for part in re.split(r"</?(?:td|li|p)>", html) if "javascript" in part]
    assert quoting, html
    return [tag for part in quoting for tag in ("<a ", "<a>", "<del>", "<s>", "<strong>", "<em>", "<img", "<u>",
                                                "\u202e") if tag in part]


def test_markdown_in_an_error_is_text_on_github():
    """`[a](javascript:alert(1))` was a link in report.md and `~~x~~` struck through (read by cmark-gfm)."""
    pytest.importorskip("cmarkgfm")
    failed = record("m/torch/cpu/float16", status="failed", median=None, error=MARKDOWN)
    html = gfm(render_markdown(report([record("m/torch/cpu/float32"), failed])))
    assert _links_and_marks(html) == []
    assert "see [a](javascript:alert(1)) and ~~x~~ or ~y~, **bold** _em_ ![i](x.png) &amp;#x202e; &lt;u&gt;u&lt;/u&gt;" in html

    comparison = compare(run_of([rec("m/torch/cpu")], "b"),
                         run_of([rec("m/torch/cpu", status="failed").model_copy(update={"error": MARKDOWN})], "h"))
    assert _links_and_marks(gfm(render_comparison_markdown(comparison))) == []


@pytest.mark.parametrize("text", ["[r]: javascript:alert(1)", "# big", "> quoted", "- item", "1. first", "---"])
def test_quoted_text_starting_a_line_starts_no_block(text):
    pytest.importorskip("cmarkgfm")
    html = gfm(f"{md_cell(text)}\n\n[r]\n")
    assert html.startswith("<p>") and "<a" not in html and "<h" not in html and "<blockquote" not in html
    assert "<li" not in html and "<hr" not in html


def test_cli_output_shows_escapes_from_files_as_text(tmp_path, capsys):
    base = run_of([rec(f"m{ESC}/torch/cpu", [10.0 + i * 0.01 for i in range(30)])], "b")
    head = run_of([rec(f"m{ESC}/torch/cpu", [10.0 + i * 0.01 for i in range(30)],
                       load_time=Metric.measured(-1.0, "ms"))], "h")
    (tmp_path / "base.json").write_text(base.model_dump_json())
    (tmp_path / "head.json").write_text(head.model_dump_json())
    (tmp_path / "ok.json").write_text(base.model_copy(update={"run_id": "h"}).model_dump_json())
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "ok.json")]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and md_code(f"m{ESC}/torch/cpu") in out
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "ok.json"), "--format", "json"]) == 0
    out, _ = capsys.readouterr()
    assert "\x1b" not in out and json.loads(out)["variants"][0]["variant_id"] == f"m{ESC}/torch/cpu"
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "head.json")]) == 2  # an impossible figure
    assert main(["compare", str(tmp_path / f"no{ESC}such.json"), str(tmp_path / "ok.json")]) == 2
    _, err = capsys.readouterr()
    assert "\x1b" not in err and err.count("\n") == 2
    assert err.splitlines()[1] == (f"{tmp_path}/no{SHOWN}such.json: no such report file, and not a history "
                                   "reference (last, last-on-this-machine or a run id)")


HOSTILE_MODEL = '''
import torch


class Hostile(torch.nn.Module):
    """Computes like a small linear model for the eager reference, then raises text made to fool a reader."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError({text!r})
        return self.linear(x)
'''


@pytest.mark.torch
def test_a_model_s_error_is_shown_not_obeyed_in_a_real_run(write_pipeline, tmp_path, capsys):
    (tmp_path / "hostile.py").write_text(HOSTILE_MODEL.format(text=f"{MARKDOWN} {ESC}"))
    path = write_pipeline(f"""\
        version: 1
        name: hostile
        models:
          - name: hostile
            source: {tmp_path}/hostile.py:Hostile
            inputs: [{{name: x, shape: [1, 8]}}]
        targets:
          - backend: torch
        latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
        limits: {{export_s: 60, measure_s: 30}}
        cache: {{dir: cache}}
        report: {{dir: out, formats: [json, markdown, html]}}
        history: {{enabled: false}}
        """)
    assert main(["run", "--jobs", "1", str(path)]) == 1
    err = capsys.readouterr().err
    # the error's first line (a CR ends a line): shown, not obeyed
    assert "\x1b" not in err and f"failed  measure: hostile.py:16 in forward: RuntimeError: {MARKDOWN} \\x1b[2J\\x1b[H\n" in err
    markdown = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "\x1b" not in markdown and "\x1b" not in html and "\\x1b[2J\\x1b[H" in html
    assert _links_and_marks(gfm(markdown)) == []


def test_a_model_name_is_quoted_where_a_cut_report_folds_or_names_its_section():
    models = [f"m{i}<img src=x onerror=alert({i})>" for i in range(40)]
    records = [record(f"{model}/torch/cpu/float32", status="failed", median=None, error="x" * 200) for model in models]
    text = render_markdown(report(records), limit=3000)
    assert "more sections are only in the full report" in text or "<details><summary><b>" in text
    assert "<img" not in text and "\x1b" not in text
