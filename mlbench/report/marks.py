"""What the source marks mean, said only for the marks a page shows: a Linux torch run's report never explains
`‡` to a reader who will not meet one."""

from __future__ import annotations

from collections.abc import Sequence

from mlbench.metrics import ESTIMATE_MARK, source_mark
from mlbench.records import RunRecord

MEANINGS = {
    ESTIMATE_MARK: ("estimated", "by mlbench's rules and cost model"),
    "†": ("emulated", "mlbench's interpreter ran the saved program on this machine; it checks what the program "
                      "computes, not what the device's own arithmetic adds"),
    "‡": ("reference", "a vendor's reference runtime ran the saved program on this machine's CPU: its numerics, "
                       "never a device's latency"),
}
"""Each source mark (`mlbench.metrics.SOURCE_MARKS`), with its source and what that means."""


def marks_in(text: str) -> list[str]:
    """The source marks `text` holds, in the legend's order."""
    return [mark for mark in MEANINGS if mark in text]


def marks_of(records: Sequence[RunRecord]) -> str:
    """The source marks of every figure the records hold (metrics, verification, placement), as one string for
    `sources_legend`."""
    sources = {m.source for r in records for m in r.metrics.values() if m.value is not None}
    sources |= {r.verify.source for r in records if r.verify is not None}
    sources |= {r.placement.source for r in records if r.placement is not None}
    return "".join(source_mark(s) for s in sources if s)


def sources_legend(text: str, *, code: bool) -> str:
    """`All figures are **measured** on this machine unless marked ≈ (**estimated** by …)`, naming only the marks
    in `text`. `code`: Markdown (marks in backticks, sources in bold); else plain words for HTML, escaped by the
    caller."""
    parts = []
    for mark in marks_in(text):
        source, meaning = MEANINGS[mark]
        shown = f"`{mark}`" if code and mark != ESTIMATE_MARK else mark
        name = f"**{source}**" if code else source
        parts.append(f"{shown} ({name}: {meaning})" if mark != ESTIMATE_MARK else f"{shown} ({name} {meaning})")
    measured = "**measured**" if code else "measured"
    if not parts:
        return f"All figures are {measured} on this machine"
    return f"All figures are {measured} on this machine unless marked " + " or ".join(parts)
