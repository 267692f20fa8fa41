""""Which variant should I ship?": one chart per model and deployment target (`report.advice`: Apple devices,
Android, a server's CPU) setting each variant's latency beside its size and its output error, fastest first,
with a star on the variants no other variant of the same target beats on all three at once.

- Latency: one figure for every row, so the bars compare like with like: the one most of the target's
  variants have (the measured median, else an estimate for one chip, hatched and marked `≈`); a variant
  without it shows – and gets no star.
- Size: the artifact's size on disk (measured).
- Error: the verification's max_rel on a log scale (a dot; `†` emulated, `‡` reference), with the
  precision's tolerance as a red tick; a variant that failed its tolerance is marked ✗ and gets no star.

A star means: among the target's variants with all three figures, none is at least as fast, as small and as close
to the reference, and better in one. Those are the candidates; which of them to ship is the reader's
trade.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mlbench.metrics import ESTIMATE_MARK, estimate_mark, source_mark
from mlbench.metrics import format_ms as fmt_ms
from mlbench.records import RunRecord
from mlbench.report.advice import Row, front, rows_of
from mlbench.report.html.charts import LATENCY_COLOR, hatch_id, nice_max
from mlbench.report.text import html_text as escape
from mlbench.units import human_bytes

SIZE_COLOR = "#546e7a"
ERROR_COLOR = "#6a1b9a"
TOLERANCE_COLOR = "#c62828"
PANEL_W, TEXT_W, STAR_W = 170, 84, 22
ROW_H, HEAD = 22, 40


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


def ship_legend(records: Sequence[RunRecord] = ()) -> str:
    """What the ship charts show; each mark (`≈`, `✗`, `†`, `‡`) explained only where a chart shows one."""
    verified = [r.verify for r in records if r.status == "ok" and r.verify is not None]
    marks = ["<b>✗</b>: over it" if any(not v.passed for v in verified) else "",
             "<b>†</b> emulated" if any(v.source == "emulated" for v in verified) else "",
             "<b>‡</b> reference" if any(v.source == "reference" for v in verified) else ""]
    said = "; ".join(m for m in marks if m)
    estimated = any(m.source == "estimated" for r in records for n, m in r.metrics.items() if n.startswith("latency."))
    return ('<p class="meta">One chart per deployment target (where the variants run), fastest first. <b>★</b>: no '
            "other variant for the same target is at least as fast, as small and as close to the reference, and "
            "better in one: the candidates to ship (a star is never given across targets). Latency bars share one "
            "figure (named above them" + (f"; hatched and <b>{ESTIMATE_MARK}</b> when estimated" if estimated else "")
            + "); max_rel is a dot on a log scale, the red tick is its precision's tolerance"
            + (f" ({said})" if said else "") + ".</p>")
