"""The Markdown mlbench writes, as HTML: so the HTML report carries every table, note and backend section
the Markdown report does, from the very same text, and cannot fall behind it.

Only the subset mlbench's renderers produce is read: headings, pipe tables, `- ` lists, paragraphs,
mlbench's own `<details><summary>…</summary>` folds, and inline code spans, `**bold**`, `_italic_`,
backslash escapes and `&lt;`. Everything else is text: every character that reaches the page goes through
`html_text`, so a model's name or an error message can never open a tag or a link here either.
"""

from __future__ import annotations

import re

from mlbench.report.text import html_text as escape

_INLINE = re.compile(r"(?P<code>(?P<fence>`+) ?(?P<body>.*?) ?(?P=fence)(?!`))|\\(?P<escaped>[^A-Za-z0-9\s])|(?P<lt>&lt;)"
                     r"|\*\*(?P<bold>(?:\\.|[^*\\])+?)\*\*|(?<![\w\\])_(?P<em>[^_\s](?:\\.|[^_\\])*?)_(?!\w)")
_DETAILS = re.compile(r"^<details><summary>(?P<summary>.*)</summary>$")
_ALIGN = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def inline(text: str) -> str:
    """One line of Markdown inline text as HTML."""
    out: list[str] = []
    pos = 0
    for match in _INLINE.finditer(text):
        out.append(escape(text[pos:match.start()]))
        if match.group("code") is not None:
            out.append(f"<code>{escape(match.group('body').replace(chr(92) + '|', '|'))}</code>")
        elif match.group("escaped") is not None:
            out.append(escape(match.group("escaped")))
        elif match.group("lt") is not None:
            out.append("&lt;")
        elif match.group("bold") is not None:
            out.append(f"<b>{inline(match.group('bold'))}</b>")
        else:
            out.append(f"<i>{inline(match.group('em'))}</i>")
        pos = match.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def plain(text: str) -> str:
    """What a reader sees of one line of Markdown inline text, as plain text (tests compare reports by it)."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", inline(text)))


def cells(row: str) -> list[str]:
    """A pipe-table row's cells: split at each `|` that is not backslash-escaped."""
    body = row.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _classes(cell: str, right: bool) -> str:
    """`num` for a right-aligned cell; `long` for one whose text wraps (the rest stay on one line)."""
    return " ".join(c for c, on in (("num", right), ("long", len(plain(cell)) > 28)) if on)


def _table(lines: list[str]) -> str:
    head, align, *rows = lines
    right = [c.endswith(":") for c in cells(align)]
    th = "".join(f"<th>{inline(c)}</th>" for c in cells(head))
    body = []
    for row in rows:
        tds = "".join(f'<td class="{_classes(c, i < len(right) and right[i])}">{inline(c)}</td>'
                      for i, c in enumerate(cells(row)))
        body.append(f"<tr>{tds}</tr>")
    return f'<div class="wide"><table class="md"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def to_html(lines: list[str] | str) -> str:
    """Block-level Markdown (a list of lines, or text) as HTML."""
    if isinstance(lines, str):
        lines = lines.split("\n")
    flat = [piece for line in lines for piece in line.split("\n")]
    out: list[str] = []
    i = 0
    while i < len(flat):
        line = flat[i]
        if not line.strip():
            i += 1
        elif line.startswith("|") and i + 1 < len(flat) and _ALIGN.match(flat[i + 1].strip()):
            end = i + 2
            while end < len(flat) and flat[end].startswith("|"):
                end += 1
            out.append(_table(flat[i:end]))
            i = end
        elif (heading := re.match(r"^(#{1,6}) (.*)$", line)) is not None:
            level = min(len(heading.group(1)) + 1, 6)  # the page's own h1/h2 stay above
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            i += 1
        elif (fold := _DETAILS.match(line)) is not None:
            out.append(f"<details><summary>{inline(fold.group('summary'))}</summary>")
            i += 1
        elif line == "</details>":
            out.append("</details>")
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(flat) and flat[i].startswith("- "):
                items.append(f"<li>{inline(flat[i][2:])}</li>")
                i += 1
            out.append(f"<ul>{''.join(items)}</ul>")
        else:
            para = [inline(line)]  # at least this line, whatever it starts with
            i += 1
            while i < len(flat) and flat[i].strip() and not flat[i].startswith(("|", "- ", "#", "<details>", "</details>")):
                para.append(inline(flat[i]))
                i += 1
            out.append(f"<p>{' '.join(para)}</p>")
    return "\n".join(out)
