"""A trend chart: one variant's latency median over runs, drawn against the runs' dates.

The y-axis starts at zero, so a 0.5% wobble is a 0.5% wobble, not a cliff; the change from the first run
to the last is written out beside the title. Dates sit below the axis, the title and the change above
the plot: no label can land on a point.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from mlbench.metrics import estimate_mark
from mlbench.metrics import format_ms as fmt_ms
from mlbench.report.html.charts import TREND_COLOR, TrendPoint, nice_max
from mlbench.report.html.ticks import linear_time_labels
from mlbench.report.text import html_text as escape  # controls shown as escapes, never raw

W, H = 360, 180
PAD_L, PAD_R, PAD_T, PAD_B = 58, 16, 34, 38


def _when(text: str) -> datetime | None:
    """The run's time (a date without a zone is taken as UTC, as mlbench writes them), or None."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _positions(points: Sequence[TrendPoint]) -> list[float]:
    """0..1 along the x-axis: by date when every run has one (and they differ), else evenly by run."""
    n = len(points)
    times = [_when(p.created) for p in points]
    if all(t is not None for t in times) and n > 1:
        stamps = [t.timestamp() for t in times if t is not None]
        span = max(stamps) - min(stamps)
        if span > 0:
            return [(s - min(stamps)) / span for s in stamps]
    return [i / (n - 1) if n > 1 else 0.5 for i in range(n)]


def _date_label(points: Sequence[TrendPoint], i: int) -> str:
    when = _when(points[i].created)
    if when is None:
        return points[i].created[:10]
    same_day = len({(_when(p.created) or when).date() for p in points}) == 1
    return when.strftime("%H:%M") if same_day else when.strftime("%Y-%m-%d")


def trend_chart(variant_id: str, points: Sequence[TrendPoint], current_run: str) -> str:
    """A small line chart of one variant's latency median over runs, oldest left, from zero up."""
    values = [p for p in points if p.value is not None]
    if all(_when(p.created) for p in values):  # oldest left, whatever order the points came in
        values.sort(key=lambda p: _when(p.created) or datetime.min.replace(tzinfo=timezone.utc))
    figures = [p.value for p in values if p.value is not None]
    top = nice_max(max(figures) * 1.1)
    plot_w, plot_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    xs = [PAD_L + plot_w * f for f in _positions(values)]
    py = lambda v: PAD_T + plot_h * (1 - v / top)  # noqa: E731
    change = f"{(figures[-1] / figures[0] - 1) * 100:+.1f}%" if figures[0] else ""
    title = variant_id if len(variant_id) <= 36 else variant_id[:35] + "…"
    parts = [f'<svg class="chart trend" role="img" aria-label="Latency trend of {escape(variant_id)}" width="{W}" '
             f'height="{H}" viewBox="0 0 {W} {H}">',
             f'<rect x="0.5" y="0.5" width="{W - 1}" height="{H - 1}" fill="none" stroke="#e0e0e0"/>',
             f'<text class="label" x="8" y="18">{escape(title)}</text>',
             f'<text class="muted change" x="{W - 8}" y="18" text-anchor="end">{escape(change)}</text>']
    ticks = [top * fraction for fraction in (0.0, 0.5, 1.0)]
    for tick, text in zip(ticks, linear_time_labels(ticks), strict=True):
        parts.append(f'<line x1="{PAD_L}" y1="{py(tick):.1f}" x2="{W - PAD_R}" y2="{py(tick):.1f}" stroke="#eee"/>')
        parts.append(f'<text class="muted tick" x="{PAD_L - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">'
                     f'{text}</text>')
    parts.append(f'<line x1="{PAD_L}" y1="{PAD_T + plot_h}" x2="{W - PAD_R}" y2="{PAD_T + plot_h}" stroke="#9e9e9e"/>')
    below = PAD_T + plot_h + 16
    parts.append(f'<text class="muted date" x="{xs[0]:.1f}" y="{below}" text-anchor="start">'
                 f'{escape(_date_label(values, 0))}</text>')
    if len(values) > 1:
        parts.append(f'<text class="muted date" x="{xs[-1]:.1f}" y="{below}" text-anchor="end">'
                     f'{escape(_date_label(values, len(values) - 1))}</text>')
    parts.append(f'<text class="muted" x="{PAD_L + plot_w / 2:.0f}" y="{below + 15}" text-anchor="middle">'
                 f'{len(values)} runs, median ms</text>')
    coords = " ".join(f"{x:.1f},{py(p.value):.1f}" for x, p in zip(xs, values) if p.value is not None)
    parts.append(f'<polyline class="trend-line" points="{coords}" fill="none" stroke="{TREND_COLOR}" stroke-width="2"/>')
    for x, p in zip(xs, values):
        if p.value is None:
            continue
        current = p.run_id == current_run
        tip = (f"run {p.run_id} ({p.created}): {estimate_mark(p.source)}{fmt_ms(p.value)} ms ({p.source})"
               + (" — this run" if current else ""))
        parts.append(f'<circle cx="{x:.1f}" cy="{py(p.value):.1f}" r="{4.5 if current else 3}" '
                     f'fill="{"#ffffff" if current else TREND_COLOR}" stroke="{TREND_COLOR}" stroke-width="2">'
                     f'<title>{escape(tip)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)
