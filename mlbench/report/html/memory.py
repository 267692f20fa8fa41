"""The HTML report's memory chart: per model, each variant's memory against its latency (inline SVG).

The trade-off compression makes: a palettized or float16 variant moves down (less memory) and, where it pays,
left (faster). Memory is `memory.peak` where it was measured, else `memory.estimated`; latency is
`latency.median` where it was measured, else the first `latency.estimated.<chip>`. A point with an estimated
coordinate is drawn hollow and its label carries `≈`; a variant with neither figure is listed under the chart,
not drawn at zero. Both axes start at zero, so distances read as ratios.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench.metrics import ESTIMATE_MARK, format_ms, format_value, source_mark
from mlbench.records import Metric, RunRecord
from mlbench.report.html.charts import nice_max
from mlbench.report.text import html_text as escape

MEMORY_COLOR = "#2e7d32"
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 620, 260, 70, 34, 14, 200


def memory_of(record: RunRecord) -> tuple[str, Metric] | None:
    for name in ("memory.peak", "memory.estimated"):
        metric = record.metrics.get(name)
        if metric is not None and metric.value is not None:
            return name, metric
    return None


def latency_of(record: RunRecord) -> tuple[str, Metric] | None:
    metric = record.metrics.get("latency.median")
    if metric is not None and metric.value is not None:
        return "latency.median", metric
    estimated = sorted(name for name, m in record.metrics.items()
                       if name.startswith("latency.estimated.") and m.value is not None)
    return (estimated[0], record.metrics[estimated[0]]) if estimated else None


def _label(record: RunRecord) -> str:
    return "/".join(record.variant_id.split("/")[1:]) or record.variant_id


def memory_chart(records: Sequence[RunRecord]) -> str:
    """One model's variants as points: latency across, memory up; '' when none has both figures."""
    points = [(r, memory_of(r), latency_of(r)) for r in records]
    drawn = [(r, m, t) for r, m, t in points if m is not None and t is not None]
    if not drawn:
        return ""
    x_max = nice_max(max(t[1].value or 0.0 for _, _, t in drawn))
    y_max = nice_max(max(m[1].value or 0.0 for _, m, _ in drawn))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<svg width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="memory against latency">',
             f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#9e9e9e"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#9e9e9e"/>']
    for quarter in range(5):
        x = LEFT + plot_w * quarter / 4
        y = TOP + plot_h * (1 - quarter / 4)
        parts.append(f'<text class="muted" x="{x:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                     f"{format_ms(x_max * quarter / 4)}</text>")
        parts.append(f'<text class="muted" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{escape(format_value(y_max * quarter / 4, 'bytes'))}</text>")
    parts.append(f'<text class="muted" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
                 "latency, ms</text>")
    for record, (mem_name, mem), (lat_name, lat) in drawn:
        x = LEFT + plot_w * (lat.value or 0.0) / x_max
        y = TOP + plot_h * (1 - (mem.value or 0.0) / y_max)
        estimated = "estimated" in (mem.source, lat.source)
        fill = "white" if estimated else MEMORY_COLOR
        mark_m, mark_t = source_mark(mem.source), source_mark(lat.source)
        tip = (f"{record.variant_id}: {mark_m}{format_value(mem.value, 'bytes')} ({mem_name}), "
               f"{mark_t}{format_ms(lat.value)} ms ({lat_name})")
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="{MEMORY_COLOR}" '
                     f'stroke-width="2"><title>{escape(tip)}</title></circle>')
        text = ("≈ " if estimated else "") + _label(record)
        parts.append(f'<text class="label" x="{x + 8:.1f}" y="{y + 4:.1f}">{escape(text)}</text>')
    parts.append("</svg>")
    missing = [r for r, m, t in points if m is None or t is None]
    if missing:
        parts.append('<p class="meta">Not drawn (no memory or no latency figure): '
                     + ", ".join(f"<code>{escape(r.variant_id)}</code>" for r in missing) + "</p>")
    return "".join(parts)


def memory_section(records: Sequence[RunRecord]) -> list[str]:
    """The section's charts, one per model that has a variant with both figures, under one note."""
    by_model: dict[str, list[RunRecord]] = {}
    for record in records:
        by_model.setdefault(record.model, []).append(record)
    charts = [(model, memory_chart(rows)) for model, rows in by_model.items()]
    charts = [(model, chart) for model, chart in charts if chart]
    if not charts:
        return ['<p class="meta">No variant has both a memory figure (memory.peak, memory.estimated) and a '
                "latency.</p>"]
    parts = ['<p class="meta">Memory (up: memory.peak measured, else memory.estimated) against latency (across: '
             f"the median, else the first chip's estimate), each model on its own scale from zero; hollow points and "
             f"<b>{ESTIMATE_MARK}</b> mark an estimated coordinate.</p>"]
    for model, chart in charts:
        parts += [f'<h3 class="model">{escape(model)}</h3>', chart]
    return parts
