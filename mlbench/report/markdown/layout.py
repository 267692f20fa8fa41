"""Markdown laid out for a GitHub pull-request comment: tables that fit its width, a body that fits its size.

A comment is about 900 px wide: past ~8 columns GitHub squeezes every cell into a wrapped sliver. So a
table shows its most useful columns and folds the rest into a collapsed `<details>` table keyed by the
same first column; a column no row fills is dropped; a note every row repeats is said once above the
table, and a note several rows share becomes a numbered footnote. A comment holds at most 65,536
characters: `fit_comment` keeps the tables and folds, then cuts, the rest — pointing to the full file.
Pure functions over text, no report types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_COLUMNS = 8
FOLDED_COLUMNS = 8
"""Columns of a folded table besides its key: a fold wider than that is split into tables of at most 9 columns."""
COMMENT_LIMIT = 65_536
"""GitHub's limit on the body of an issue or pull-request comment, in characters."""
EMPTY = ("", "–")
MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


@dataclass(frozen=True)
class Column:
    header: str
    cells: list[str]
    right: bool = False  # numbers align right
    priority: float = 50  # lower: kept in the main table first
    note: bool = False  # free text: said once above the table when every row says the same


@dataclass
class Layout:
    above: list[str] = field(default_factory=list)
    main: list[Column] = field(default_factory=list)
    folded: list[Column] = field(default_factory=list)


def _mark(n: int) -> str:
    return MARKS[n - 1] if n <= len(MARKS) else f"[{n}]"


def _hoist_notes(column: Column, rows: int) -> tuple[Column | None, list[str]]:
    """A note column without its repeats: (the column or None, lines for above the table)."""
    filled = [c for c in column.cells if c not in EMPTY]
    if not filled:
        return None, []
    if len(filled) == rows and len(set(filled)) == 1 and rows > 1:
        return None, [f"{column.header} for every variant: {filled[0]}", ""]
    shared = [text for text in dict.fromkeys(filled) if filled.count(text) > 1]
    if not shared:
        return column, []
    numbers = {text: i for i, text in enumerate(shared, 1)}
    cells = [_mark(numbers[c]) if c in numbers else c for c in column.cells]
    legend = [f"- {_mark(n)} {text}" for text, n in numbers.items()]
    return Column(column.header, cells, column.right, column.priority, column.note), [*legend, ""]


def layout(columns: list[Column], max_columns: int = MAX_COLUMNS) -> Layout:
    """Which columns show, which fold, what is said above. The first column is the key of both tables."""
    rows = len(columns[0].cells) if columns else 0
    result = Layout()
    kept: list[Column] = []
    for column in columns:
        if column.note:
            hoisted, lines = _hoist_notes(column, rows)
            result.above += lines
            if hoisted is not None:
                kept.append(hoisted)
        elif any(c not in EMPTY for c in column.cells) or column is columns[0]:
            kept.append(column)
    ranked = sorted(kept[1:], key=lambda c: c.priority)
    shown = {id(c) for c in ranked[: max_columns - 1]}
    result.main = [kept[0], *(c for c in kept[1:] if id(c) in shown)]
    result.folded = [c for c in kept[1:] if id(c) not in shown]
    return result


def table(columns: list[Column]) -> list[str]:
    lines = ["| " + " | ".join(c.header for c in columns) + " |",
             "|" + "|".join("---:" if c.right else "---" for c in columns) + "|"]
    for i in range(len(columns[0].cells)):
        lines.append("| " + " | ".join(c.cells[i] for c in columns) + " |")
    return lines


def render_table(columns: list[Column], max_columns: int = MAX_COLUMNS) -> list[str]:
    """Notes said once, the main table, and the folded columns in a collapsed table of their own."""
    plan = layout(columns, max_columns)
    lines = [*plan.above, *table(plan.main), ""]
    if plan.folded:
        names = ", ".join(c.header for c in plan.folded)
        lines += [f"<details><summary>More columns: {names}</summary>", ""]
        for start in range(0, len(plan.folded), FOLDED_COLUMNS):  # a wider fold is squeezed as the main table was
            lines += [*table([plan.main[0], *plan.folded[start:start + FOLDED_COLUMNS]]), ""]
        lines += ["</details>", ""]
    return lines


@dataclass(frozen=True)
class Section:
    """One part of a comment: `core` is kept as long as anything is; `extra` goes first when space runs out."""

    title: str
    core: list[str]
    extra: list[str] = field(default_factory=list)


def _join(lines: list[str]) -> str:
    return "\n".join(lines).rstrip() + "\n"


def fit_comment(head: list[str], sections: list[Section], full_name: str, limit: int = COMMENT_LIMIT) -> str:
    """All of it when it fits. Else every section folded into a <details> of its own: first each one's
    core, as many as fit in order; then, with the room left, the extras of as many as fit. Whatever is
    left out is named, with where to read it (`full_name`)."""
    full = _join([*head, *(line for s in sections for line in [*s.core, *s.extra])])
    if len(full) <= limit:
        return full
    pointer = [f"> This report is cut to fit a pull-request comment ({limit:,} characters); the full report "
               f"({len(full):,} characters) is `{full_name}` beside it.", ""]
    size = lambda lines: sum(len(line) + 1 for line in lines)  # noqa: E731
    fold = lambda s, body: ["<details><summary><b>" + s.title + "</b></summary>", "", *body, "</details>", ""]  # noqa: E731
    room = limit - size([*head, *pointer]) - 600  # the closing lines below
    cores: list[Section] = []
    for section in sections:
        cost = size(fold(section, section.core))
        if cost > room:
            break
        cores.append(section)
        room -= cost
    with_extra: set[int] = set()
    for i, section in enumerate(cores):
        cost = size(section.extra)
        if section.extra and cost <= room:
            with_extra.add(i)
            room -= cost
    lines = [*head, *pointer]
    for i, section in enumerate(cores):
        lines += fold(section, [*section.core, *(section.extra if i in with_extra else [])])
    short = [s.title for i, s in enumerate(cores) if s.extra and i not in with_extra]
    if short:
        lines.append(_capped(f"Only the tables of {len(short)} sections are here; their details are in the full "
                             f"report: {', '.join(short)}."))
    if len(cores) < len(sections):
        rest = [s.title for s in sections[len(cores):]]
        lines.append(_capped(f"{len(rest)} more sections are only in the full report: {', '.join(rest)}."))
    return _join(lines)


def _capped(text: str, width: int = 280) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
