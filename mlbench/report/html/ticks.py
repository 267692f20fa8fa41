"""Tick labels in one style per axis: a time axis reads `1 ms, 10 ms, 100 ms, 1 s, 10 s` (a log axis) or
`0 s, 0.5 s, 1 s, 1.5 s, 2 s` (a linear one), never `1000 ms` beside `1e+04 ms`; a memory axis names one unit
for all its ticks (`0 MB, 25 MB, 50 MB`)."""

from __future__ import annotations

from collections.abc import Sequence


def _plain(value: float) -> str:
    """A tick value without exponent notation or trailing zeros: 0.001, 0.25, 10, 25000."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def log_time_label(ms: float) -> str:
    """A decade of a log time axis: `0.01 ms` … `100 ms`, then `1 s`, `10 s`, `100 s`."""
    return f"{_plain(ms / 1000)} s" if ms >= 1000 else f"{_plain(ms)} ms"


def linear_time_labels(ticks: Sequence[float]) -> list[str]:
    """The ticks of a linear time axis (ms), all in seconds when the axis reaches 1 s, else all in ms."""
    if max(ticks, default=0.0) >= 1000:
        return [f"{_plain(t / 1000)} s" for t in ticks]
    return [f"{_plain(t)} ms" for t in ticks]


BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))
"""Decimal units, as `mlbench.units.human_bytes` writes sizes elsewhere in the report."""


def byte_labels(ticks: Sequence[float]) -> list[str]:
    """The ticks of a memory axis, all in the unit of the largest (`0 MB, 12.5 MB, 25 MB`)."""
    top = max(ticks, default=0.0)
    scale, unit = next(((s, u) for s, u in BYTE_UNITS if top >= s), (1.0, "B"))
    return [f"{_plain(round(t / scale, 3))} {unit}" for t in ticks]
