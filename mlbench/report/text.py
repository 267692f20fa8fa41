"""Quoting outside text: what a report or the terminal shows from a model or a file (error messages, paths,
names, notes) can never break a table's shape, put raw HTML or a live link into a pull-request comment, or
drive the terminal.

Every Markdown renderer quotes through `md_cell` and `md_code`, the HTML report through `html_text`, and
what mlbench prints through `printable`; nowhere else.
"""

from __future__ import annotations

import re
from html import escape

_SPECIAL = re.compile(r"([\\`|*\[\]~&]|(?<![^\W_])_|_(?![^\W_]))")
"""Backslash-escaped in Markdown text: `\\`, a backtick (code spans), `|` (table cells), `*` and `_` (emphasis; a
`_` between two letters or digits opens nothing and is left alone), `[` `]` (links and images), `~`
(strikethrough), `&` (character references)."""
_BLOCK_START = re.compile(r"(#{1,6}|[-+])(\s|$)|>|[=-]+\s*$")
"""What makes a line a heading, list item, quote or rule when the text starts one (escaped: its first character)."""
_ORDERED_START = re.compile(r"\d{1,9}(?=[.)](\s|$))")
"""`1.` or `1)` and a space start an ordered list (escaped: the `.` or `)`)."""
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls but tab and newline (ESC starts terminal sequences, CR rewrites a line, U+009B is an
8-bit CSI) and the bidirectional overrides that reorder what a reader sees."""


def _escape_control(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`text` with each control character shown as its escape (`\\x1b`, `\\u202e`) instead of acting on the
    terminal or the page; tab and newline are kept."""
    return _CONTROL.sub(_escape_control, str(text))


def one_line(text: object) -> str:
    """Any text on one line: each run of whitespace (newlines included) becomes one space."""
    return re.sub(r"\s+", " ", str(text)).strip()


def md_cell(text: object) -> str:
    """`text` as plain Markdown inline text, safe in a table cell and at the start of a line: on one line;
    controls shown as escapes; Markdown's inline syntax backslash-escaped (`\\`, `|`, backticks, `*`, `_`, `[`,
    `]`, `~`, `&`), so no cell splits, no code span, emphasis, strikethrough or link opens; `<` as `&lt;`, so no
    HTML tag opens; a leading `#`, `>`, `-`, `+`, `=` or `1.` escaped, so no heading, quote or list starts."""
    body = _SPECIAL.sub(r"\\\1", printable(one_line(text))).replace("<", "&lt;")
    if _BLOCK_START.match(body):
        return "\\" + body
    if number := _ORDERED_START.match(body):
        return f"{body[:number.end()]}\\{body[number.end():]}"
    return body


def md_code(text: object) -> str:
    """`text` as an inline code span, safe in a table cell: fenced by more backticks than it holds,
    on one line, controls shown as escapes, `|` escaped (GitHub splits table cells before it reads code spans)."""
    body = printable(one_line(text)).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def json_text(text: str) -> str:
    """JSON text with the controls it may hold raw (C1 and bidirectional ones: JSON escapes only C0) as `\\uXXXX`
    escapes, which JSON reads back as the same characters."""
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def html_text(text: object) -> str:
    """`text` for HTML (and the SVG in it): `&`, `<`, `>` and quotes escaped, controls shown as escapes."""
    return escape(printable(text))


def counted(count: float, word: str, plural: str | None = None) -> str:
    """`1 switch`, `2 switches`, `0 constants`: a count with its noun in the right number."""
    return f"{count:g} {word if count == 1 else plural or word + 's'}"


def md_inline(text: object) -> str:
    """`text` as md_cell writes it, except that each pair of backticks becomes a code span (md_code): what mlbench
    writes as `precision: float16` reads as code on GitHub, not as escaped backticks shown literally. A code span
    opens no link, emphasis or HTML, so text from a model or a file stays as inert as md_cell keeps it; an
    unpaired backtick stays escaped."""
    parts = re.split(r"`([^`]+)`", printable(one_line(text)))
    out = [md_cell(parts[0]) + (" " if parts[0].endswith(" ") else "")]
    for i, part in enumerate(parts[1:], 1):
        out.append(md_code(part) if i % 2 else _SPECIAL.sub(r"\\\1", part).replace("<", "&lt;"))
    return "".join(out)
