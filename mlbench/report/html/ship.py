""""Which variant should I ship?": one chart per model setting each variant's latency beside its size and
its output error, fastest first, with a star on the variants no other variant beats on all three at once.

- Latency: one figure for every row, so the bars compare like with like: the one most of the model's
  variants have (the measured median, else an estimate for one chip, hatched and marked `≈`); a variant
  without it shows – and gets no star.
- Size: the artifact's size on disk (measured).
- Error: the verification's max_rel on a log scale (a dot; `†` emulated, `‡` reference), with the
  precision's tolerance as a red tick; a variant that failed its tolerance is marked ✗ and gets no star.

A star means: among the variants with all three figures, none is at least as fast, as small and as close
to the reference, and better in one. Those are the candidates; which of them to ship is the reader's
trade.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from mlbench.metrics import ESTIMATE_MARK, estimate_mark, source_mark
from mlbench.metrics import format_ms as fmt_ms
from mlbench.records import RunRecord
from mlbench.report.html.charts import LATENCY_COLOR, hatch_id, nice_max, value_of
from mlbench.report.html.latency import estimate_columns
from mlbench.report.text import html_text as escape
from mlbench.units import human_bytes

SIZE_COLOR = "#546e7a"
ERROR_COLOR = "#6a1b9a"
TOLERANCE_COLOR = "#c62828"
PANEL_W, TEXT_W, STAR_W = 170, 84, 22
ROW_H, HEAD = 22, 40


class Row(NamedTuple):
    record: RunRecord
    latency: float | None
    latency_source: str | None
    size: int | None
    error: float | None
    error_source: str | None
    tolerance: float | None
    passed: bool


def latency_basis(records: Sequence[RunRecord]) -> tuple[str, str] | None:
    """(metric name, words) of the latency figure most ok variants have: the median first, then each estimate."""
    ok = [r for r in records if r.status == "ok"]
    options = [("latency.median", "median")] + [(c.name, f"{ESTIMATE_MARK} estimate on {c.name.rsplit('.', 1)[-1]}")
                                                for c in estimate_columns(ok)]
    counts = [(sum(value_of(r, name) is not None for r in ok), -i, name, words)
              for i, (name, words) in enumerate(options)]
    best = max(counts, default=None)
    return (best[2], best[3]) if best is not None and best[0] > 0 else None


def rows_of(records: Sequence[RunRecord]) -> tuple[list[Row], str]:
    """The chart's rows (ok variants with any figure), fastest first, and the latency basis in words."""
    basis = latency_basis(records)
    rows = []
    for record in records:
        if record.status != "ok":
            continue
        latency = value_of(record, basis[0]) if basis else None
        verify = record.verify
        error = verify.max_rel if verify is not None and verify.max_rel is not None else None
        row = Row(record, latency.value if latency else None, latency.source if latency else None,
                  record.artifact.size_bytes if record.artifact else None, error,
                  verify.source if verify else None, verify.tolerance if verify else None,
                  verify.passed if verify else True)
        if row.latency is not None or row.size is not None or row.error is not None:
            rows.append(row)
    rows.sort(key=lambda r: (r.latency is None, r.latency or 0.0))
    return rows, basis[1] if basis else "no latency"


def front(rows: Sequence[Row]) -> set[str]:
    """Variant ids no other row dominates (at least as good on latency, size and error, better on one)."""
    full = [r for r in rows if r.latency is not None and r.size is not None and r.error is not None and r.passed]
    keys = {r.record.variant_id: (r.latency, r.size, r.error) for r in full}

    def beats(a: tuple, b: tuple) -> bool:
        return all(x <= y for x, y in zip(a, b)) and a != b

    return {v for v, k in keys.items() if not any(beats(other, k) for o, other in keys.items() if o != v)}


def wanted(records: Sequence[RunRecord]) -> bool:
    """Whether a ship chart says anything: two variants or more with a latency and a size or an error."""
    rows, _ = rows_of(records)
    return sum(r.latency is not None and (r.size is not None or r.error is not None) for r in rows) >= 2


def ship_chart(records: Sequence[RunRecord], label: Callable[[RunRecord], str], label_w: int) -> str:
    rows, basis = rows_of(records)
    stars = front(rows)
    lat_max = nice_max(max([r.latency for r in rows if r.latency is not None] + [0.0]) * 1.02)
    size_max = nice_max(max([r.size for r in rows if r.size is not None] + [0]) * 1.02)
    errors = [e for r in rows for e in (r.error, r.tolerance) if e]
    lo = 10 ** math.floor(math.log10(min(errors))) if errors else 1e-6
    hi = max(10 ** math.ceil(math.log10(max(errors))) if errors else 1.0, lo * 10)
    left = STAR_W + label_w
    panels = [left + k * (PANEL_W + TEXT_W) for k in range(3)]
    width, height = left + 3 * (PANEL_W + TEXT_W), HEAD + ROW_H * len(rows) + 8
    ex = lambda v: panels[2] + PANEL_W * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))  # noqa: E731
    parts = [f'<svg class="chart ship" role="img" aria-label="Latency, size and error per variant" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}">']
    titles = (f"latency: {basis} (0–{fmt_ms(lat_max)} ms)", f"size (0–{human_bytes(int(size_max))})",
              "max_rel (log scale)")
    for x0, title in zip(panels, titles):
        parts.append(f'<text class="muted head" x="{x0}" y="14">{escape(title)}</text>')
        parts.append(f'<line x1="{x0}" y1="{HEAD - 8}" x2="{x0}" y2="{height - 6}" stroke="#bdbdbd"/>')
    decades = round(math.log10(hi / lo))
    every = math.ceil(decades * 44 / PANEL_W)  # tick labels at least 44 px apart
    for k in range(decades + 1):
        decade = lo * 10 ** k
        parts.append(f'<line x1="{ex(decade):.1f}" y1="{HEAD - 8}" x2="{ex(decade):.1f}" y2="{height - 6}" stroke="#eee"/>')
        if k % every == 0:
            parts.append(f'<text class="muted tick" x="{ex(decade):.1f}" y="{HEAD - 12}" text-anchor="middle">'
                         f'{decade:.0e}</text>')
    for i, row in enumerate(rows):
        y = HEAD + i * ROW_H
        mid = y + ROW_H / 2
        vid = row.record.variant_id
        if vid in stars:
            parts.append(f'<text class="star" x="4" y="{mid + 5:.1f}">★<title>{escape(vid)}: no other '
                         "variant is at least as fast, as small and as accurate</title></text>")
        parts.append(f'<text class="label" x="{left - 8}" y="{mid + 4:.1f}" text-anchor="end">'
                     f'{escape(label(row.record))}<title>{escape(vid)}</title></text>')
        parts += _latency(row, panels[0], lat_max, y, mid)
        parts += _size(row, panels[1], size_max, y, mid)
        parts += _error(row, panels[2], ex, y, mid)
    parts.append("</svg>")
    return "".join(parts)


def _value_text(x: float, mid: float, text: str, cls: str = "value") -> str:
    return f'<text class="{cls}" x="{x + PANEL_W + 6}" y="{mid + 4:.1f}">{escape(text)}</text>'


def _latency(row: Row, x0: int, top: float, y: float, mid: float) -> list[str]:
    if row.latency is None:
        return [_value_text(x0, mid, "–", "muted")]
    fill = f"url(#{hatch_id('latency')})" if row.latency_source == "estimated" else LATENCY_COLOR
    text = f"{estimate_mark(row.latency_source)}{fmt_ms(row.latency)} ms"
    return [f'<rect class="ship-latency {row.latency_source}" x="{x0}" y="{y + 5}" '
            f'width="{max(PANEL_W * row.latency / top, 1):.1f}" height="{ROW_H - 10}" fill="{fill}">'
            f"<title>{escape(f'{row.record.variant_id}: {text} ({row.latency_source})')}</title></rect>",
            _value_text(x0, mid, text)]


def _size(row: Row, x0: int, top: float, y: float, mid: float) -> list[str]:
    if row.size is None:
        return [_value_text(x0, mid, "–", "muted")]
    text = human_bytes(row.size)
    return [f'<rect class="ship-size" x="{x0}" y="{y + 5}" width="{max(PANEL_W * row.size / top, 1):.1f}" '
            f'height="{ROW_H - 10}" fill="{SIZE_COLOR}" fill-opacity="0.75"><title>{escape(f"{row.record.variant_id}: {text}")}'
            "</title></rect>", _value_text(x0, mid, text)]


def _error(row: Row, x0: int, ex, y: float, mid: float) -> list[str]:
    parts = []
    if row.tolerance:
        tx = ex(row.tolerance)
        parts.append(f'<line class="tolerance" x1="{tx:.1f}" y1="{y + 3}" x2="{tx:.1f}" y2="{y + ROW_H - 3}" '
                     f'stroke="{TOLERANCE_COLOR}" stroke-width="2"><title>tolerance {row.tolerance:.0e}</title></line>')
    if row.error is None:
        return [*parts, _value_text(x0, mid, "reference" if "verify" in row.record.details else "–", "muted")]
    text = f"{source_mark(row.error_source)}{row.error:.2e}" + ("" if row.passed else " ✗")
    parts.append(f'<circle class="ship-error {row.error_source}" cx="{ex(row.error):.1f}" cy="{mid:.1f}" r="4.5" '
                 f'fill="{ERROR_COLOR if row.passed else TOLERANCE_COLOR}"><title>'
                 f"{escape(f'{row.record.variant_id}: max_rel {text} ({row.error_source})')}</title></circle>")
    return [*parts, _value_text(x0, mid, text)]


def ship_legend() -> str:
    return ('<p class="meta">Fastest first. <b>★</b>: no other variant is at least as fast, as small and as close '
            "to the reference, and better in one: the candidates to ship. Latency bars share one figure (named "
            f"above them; hatched and <b>{ESTIMATE_MARK}</b> when estimated); max_rel is a dot on a log scale, the "
            f'red tick is its precision\'s tolerance (<b>✗</b>: over it; <b>†</b> emulated, <b>‡</b> reference).</p>')
