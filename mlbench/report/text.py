"""Quoting outside text in Markdown: what a report quotes (error messages, paths, names, notes)
can never break a table's shape or put raw HTML into a pull-request comment.

Every Markdown renderer quotes through these two functions and nowhere else.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`|])")


def one_line(text: object) -> str:
    """Any text on one line: each run of whitespace (newlines included) becomes one space."""
    return re.sub(r"\s+", " ", str(text)).strip()


def md_cell(text: object) -> str:
    """`text` as plain Markdown inline text, safe in a table cell: on one line; `\\`, `|` and backticks
    backslash-escaped, so no cell splits and no code span opens; `<` as `&lt;`, so no HTML tag opens."""
    return _SPECIAL.sub(r"\\\1", one_line(text)).replace("<", "&lt;")


def md_code(text: object) -> str:
    """`text` as an inline code span, safe in a table cell: fenced by more backticks than it holds,
    on one line, `|` escaped (GitHub splits table cells before it reads code spans)."""
    body = one_line(text).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
