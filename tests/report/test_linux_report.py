"""What a Linux CI job's reports say, read from a real run (the tiny CNN through Core ML, estimated on two chips,
beside eager PyTorch): every Core ML row leads with its estimate, no table carries an empty column or more than
9, and the legends explain only the marks the page shows."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from mlbench.report.markdown.layout import EMPTY
from tests.report.markdown.test_github import gfm

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # the shared Core ML run: ~20 s quiet


class CellTables(HTMLParser):
    """Each <table> as rows of cell texts (the header row first)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self._skip = 0  # inside an SVG <title> (a tooltip, no cell text)
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None and self.tables:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _pages(core_ml_tiny_run) -> tuple[str, str]:
    _, root = core_ml_tiny_run
    return (root / "out" / "report.md").read_text(encoding="utf-8"), (root / "out" / "report.html").read_text(
        encoding="utf-8")


def test_every_core_ml_row_of_the_main_table_leads_with_its_estimate(core_ml_tiny_run):
    markdown, html = _pages(core_ml_tiny_run)
    tables = CellTables(gfm(markdown)).tables
    main = next(t for t in tables if t[0][0] == "Variant")
    median = next(i for i, h in enumerate(main[0]) if h.startswith("Median ms"))
    assert main[0][median] == "Median ms (else ≈a17pro)"  # the header names the chip
    coreml = [row for row in main[1:] if row[0].startswith("coreml/")]
    assert len(coreml) == 8
    for row in coreml:
        assert re.fullmatch(r"≈\d+\.\d+( \(×\d\.\d\d\))?", row[median]), row  # the a17pro estimate, its band
    eager = next(row for row in main[1:] if row[0].startswith("torch/"))
    assert re.fullmatch(r"\d+(\.\d+)?( [⚠?])?", eager[median])  # measured: leads unmarked
    figures = CellTables(html).tables
    headline = next(t for t in figures if t[0][0] == "variant")
    column = headline[0].index("median ms (else ≈a17pro)")
    assert all(row[column].startswith("≈") for row in headline[1:] if "/coreml/" in row[0])


def test_no_rendered_table_has_an_empty_column_or_more_than_nine(core_ml_tiny_run):
    markdown, html = _pages(core_ml_tiny_run)
    rendered = CellTables(gfm(markdown)).tables
    assert len(rendered) >= 3  # the candidates, the model's table and its folded columns, the backend's
    for table in rendered:
        assert len(table[0]) <= 9, table[0]
    for table in [*rendered, *CellTables(html).tables]:
        for k, header in enumerate(table[0]):
            cells = [row[k] for row in table[1:] if k < len(row)]
            assert any(cell not in EMPTY for cell in cells), f"column {header!r} is empty in every row"


def test_the_legends_explain_only_the_marks_the_pages_show(core_ml_tiny_run):
    markdown, html = _pages(core_ml_tiny_run)
    for page, tables in ((markdown, CellTables(gfm(markdown)).tables), (html, CellTables(html).tables)):
        cells = " ".join(cell for table in tables for row in table[1:] for cell in row)
        assert "≈" in cells and "†" in cells  # estimated latency, emulated verification: both explained
        assert "‡" not in cells and "‡" not in page  # no reference figure: its mark is never explained
        assert "✗" not in cells and "✗" not in page
    assert "`†` (**emulated**" in markdown and "≈ (**estimated** by mlbench's rules" in markdown
