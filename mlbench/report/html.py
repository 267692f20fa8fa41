"""The HTML report: one self-contained file with inline SVG charts — no script, no network.

A pure function of a RunReport (and, optionally, earlier runs' figures from the history):

- latency per variant: a bar to the median, a whisker from best to p90;
- placement per variant: one bar split by device (each backend's devices, then unknown);
- trends: latency median per variant across runs, where the history has earlier ones.

Estimated figures are drawn hatched and carry `~`, like the Markdown report; absent ones say why.
Tooltips are SVG `<title>`s, which browsers show without JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import NamedTuple, Protocol

from mlbench.backends.registry import devices
from mlbench.metrics import format_ms as fmt_ms
from mlbench.metrics import headline
from mlbench.records import Metric, RunRecord, RunReport, Source
from mlbench.report.markdown import fmt_metric

UNKNOWN_COLOR = "#bdbdbd"
LATENCY_COLOR = "#5e35b1"
WHISKER_COLOR = "#212121"
TREND_COLOR = "#00838f"

LABEL_W = 400  # room for ids like mobilenet_v3_small/onnxruntime/float32/cpu in 12 px monospace
PLOT_W = 520
VALUE_W = 250
ROW_H = 26
TOP = 30


class TrendPoint(Protocol):
    run_id: str
    created: str
    value: float | None
    source: str | None


STYLE = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #212121;
       margin: 24px auto; max-width: 1120px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
.meta { color: #555; } .legend span { display: inline-block; margin-right: 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: -1px; margin-right: 4px; }
svg text { font: 12px -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #212121; }
svg .label { font-family: ui-monospace, Menlo, Consolas, monospace; }
svg .muted { fill: #757575; }
table { border-collapse: collapse; margin-top: 8px; } th, td { padding: 3px 10px; border-bottom: 1px solid #eee;
       text-align: right; } th:first-child, td:first-child { text-align: left; font-family: ui-monospace, Menlo, monospace; }
.failed { color: #c62828; font-weight: 600; } .skipped { color: #757575; }
.trends { display: flex; flex-wrap: wrap; gap: 12px; }
"""


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value else "0"


def _nice_max(value: float) -> float:
    """A round axis end at or above `value` (1, 2, 2.5, 5 × 10^k)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


class _Figure(NamedTuple):
    """A metric that has a value."""

    value: float
    source: Source | None
    metric: Metric


def _value(record: RunRecord, name: str) -> _Figure | None:
    metric = record.metrics.get(name)
    if metric is None or metric.value is None:
        return None
    return _Figure(metric.value, metric.source, metric)


def _hatch_defs() -> str:
    return ('<defs><pattern id="est" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="6" height="6" fill="#d1c4e9"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{LATENCY_COLOR}" stroke-width="3"/></pattern></defs>')


def latency_chart(records: Sequence[RunRecord]) -> str:
    """Bars to the median with a best–p90 whisker, one row per variant; absent ones say why."""
    rows = []
    for record in records:
        median = _value(record, "latency.median")
        rows.append((record, median, _value(record, "latency.best"), _value(record, "latency.p90")))
    top = max([m.value for _, m, _, p in rows if m] + [p.value for _, m, _, p in rows if p] + [0.0])
    axis_max = _nice_max(top * 1.05)
    width = LABEL_W + PLOT_W + VALUE_W
    height = TOP + ROW_H * len(rows) + 10
    x = lambda v: LABEL_W + PLOT_W * v / axis_max  # noqa: E731
    parts = [f'<svg class="chart latency" role="img" aria-label="Latency per variant" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}">', _hatch_defs()]
    for i in range(5):
        tick = axis_max * i / 4
        parts.append(f'<line x1="{x(tick):.1f}" y1="{TOP - 6}" x2="{x(tick):.1f}" y2="{height - 10}" stroke="#eee"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{TOP - 10}" text-anchor="middle" class="muted">{_num(tick)} ms</text>')
    for i, (record, median, best, p90) in enumerate(rows):
        y = TOP + i * ROW_H
        parts.append(f'<text class="label" x="{LABEL_W - 8}" y="{y + 17}" text-anchor="end">'
                     f'{escape(record.variant_id)}</text>')
        if median is None:
            if record.status != "ok":
                why = f"{record.status}: {record.error or ''}"
            else:
                absent = record.metrics.get("latency.median")
                why = f"not timed: {absent.reason if absent is not None else 'no latency in this record'}"
            parts.append(f'<text class="muted" x="{LABEL_W + 4}" y="{y + 17}">{escape(why[:110])}</text>')
            continue
        estimated = median.source == "estimated"
        fill = "url(#est)" if estimated else LATENCY_COLOR
        tip = (f"{record.variant_id}: median {fmt_ms(median.value)} ms, best {fmt_ms(best.value if best else None)} ms, "
               f"p90 {fmt_ms(p90.value if p90 else None)} ms ({median.source})")
        parts.append(f'<rect class="bar median" x="{LABEL_W}" y="{y + 5}" width="{max(x(median.value) - LABEL_W, 1):.1f}" '
                     f'height="{ROW_H - 10}" fill="{fill}" fill-opacity="0.85"><title>{escape(tip)}</title></rect>')
        if best is not None and p90 is not None:
            x1, x2, ym = x(best.value), x(p90.value), y + ROW_H / 2
            parts.append(f'<g class="whisker" stroke="{WHISKER_COLOR}" stroke-width="1.5"><title>{escape(tip)}</title>'
                         f'<line x1="{x1:.1f}" y1="{ym}" x2="{x2:.1f}" y2="{ym}"/>'
                         f'<line x1="{x1:.1f}" y1="{ym - 6}" x2="{x1:.1f}" y2="{ym + 6}"/>'
                         f'<line x1="{x2:.1f}" y1="{ym - 6}" x2="{x2:.1f}" y2="{ym + 6}"/></g>')
        label = f"{fmt_metric(median.metric)} ms"
        if best is not None and p90 is not None:
            label += f"  ({fmt_ms(best.value)}–{fmt_ms(p90.value)})"
        parts.append(f'<text x="{LABEL_W + PLOT_W + 8}" y="{y + 17}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def placement_chart(records: Sequence[RunRecord]) -> str:
    """One 100% bar per variant with a placement, split by device; the rest of the bar is unknown."""
    known = devices().values()
    rows = [r for r in records if any(_value(r, f"placement.{d.name}") for d in known)]
    if not rows:
        return '<p class="meta">No variant in this run reports where its operations run.</p>'
    width = LABEL_W + PLOT_W + VALUE_W
    height = TOP + ROW_H * len(rows) + 10
    parts = [f'<svg class="chart placement" role="img" aria-label="Placement per variant" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}">']
    for pct in (0, 25, 50, 75, 100):
        px = LABEL_W + PLOT_W * pct / 100
        parts.append(f'<line x1="{px:.1f}" y1="{TOP - 6}" x2="{px:.1f}" y2="{height - 10}" stroke="#eee"/>')
        parts.append(f'<text x="{px:.1f}" y="{TOP - 10}" text-anchor="middle" class="muted">{pct}%</text>')
    for i, record in enumerate(rows):
        y = TOP + i * ROW_H
        parts.append(f'<text class="label" x="{LABEL_W - 8}" y="{y + 17}" text-anchor="end">'
                     f'{escape(record.variant_id)}</text>')
        left = 0.0
        sources = set()
        shares = []
        for device_info in known:
            device, name, color = device_info.name, device_info.label, device_info.color
            metric = _value(record, f"placement.{device}")
            if metric is None:
                continue
            share = min(max(metric.value, 0.0), 1.0 - left)
            sources.add(metric.source)
            if metric.value > 0:
                shares.append(f"{device_info.short} {metric.value * 100:.0f}%")
            if share > 0:
                parts.append(f'<rect class="seg {device}" x="{LABEL_W + PLOT_W * left:.1f}" y="{y + 5}" '
                             f'width="{PLOT_W * share:.1f}" height="{ROW_H - 10}" fill="{color}">'
                             f'<title>{escape(f"{record.variant_id}: {name} {metric.value * 100:.1f}% ({metric.source})")}'
                             f'</title></rect>')
            left += share
        if left < 0.999:
            parts.append(f'<rect class="seg unknown" x="{LABEL_W + PLOT_W * left:.1f}" y="{y + 5}" '
                         f'width="{PLOT_W * (1 - left):.1f}" height="{ROW_H - 10}" fill="{UNKNOWN_COLOR}">'
                         f'<title>{escape(f"{record.variant_id}: unknown {(1 - left) * 100:.1f}%")}</title></rect>')
        mark = "~" if "estimated" in sources else ""
        switches = _value(record, "placement.switches")
        text = f"{mark}{' '.join(shares)}" + (f", {switches.value:g} switches" if switches else "")
        parts.append(f'<text x="{LABEL_W + PLOT_W + 8}" y="{y + 17}" class="muted">{escape(text[:44])}</text>')
    parts.append("</svg>")
    legend = "".join(f'<span><i class="swatch" style="background:{d.color}"></i>{d.label}</span>' for d in known)
    legend += f'<span><i class="swatch" style="background:{UNKNOWN_COLOR}"></i>unknown</span>'
    return f'<p class="legend">{legend}</p>' + "".join(parts)


def trend_chart(variant_id: str, points: Sequence[TrendPoint], current_run: str) -> str:
    """A small line chart of one variant's latency median over runs, oldest left."""
    values = [p for p in points if p.value is not None]
    w, h, pad_l, pad_r, pad_t, pad_b = 340, 150, 52, 12, 24, 26
    figures = [p.value for p in values if p.value is not None]
    lo, hi = min(figures), max(figures)
    span = (hi - lo) or max(hi * 0.1, 1e-9)
    lo, hi = lo - span * 0.15, hi + span * 0.15
    n = len(values)
    px = lambda i: pad_l + (w - pad_l - pad_r) * (i / (n - 1) if n > 1 else 0.5)  # noqa: E731
    py = lambda v: pad_t + (h - pad_t - pad_b) * (1 - (v - lo) / (hi - lo))  # noqa: E731
    digits = min(6, max(0, 1 - math.floor(math.log10(span))))
    tick = lambda v: f"{v:.{digits}f}"  # noqa: E731  (enough digits to tell the ends apart)
    coords = " ".join(f"{px(i):.1f},{py(p.value):.1f}" for i, p in enumerate(values))
    parts = [f'<svg class="chart trend" role="img" aria-label="Latency trend of {escape(variant_id)}" width="{w}" '
             f'height="{h}" viewBox="0 0 {w} {h}">',
             f'<rect x="0.5" y="0.5" width="{w - 1}" height="{h - 1}" fill="none" stroke="#e0e0e0"/>',
             f'<text class="label" x="{pad_l}" y="15">{escape(variant_id[:44])}</text>',
             f'<text class="muted" x="{pad_l - 4}" y="{py(hi - span * 0.15) + 4:.1f}" text-anchor="end">'
             f'{tick(hi - span * 0.15)}</text>',
             f'<text class="muted" x="{pad_l - 4}" y="{py(lo + span * 0.15) + 4:.1f}" text-anchor="end">'
             f'{tick(lo + span * 0.15)}</text>',
             f'<text class="muted" x="{w / 2:.0f}" y="{h - 8}" text-anchor="middle">{n} runs, median ms</text>',
             f'<polyline class="trend-line" points="{coords}" fill="none" stroke="{TREND_COLOR}" stroke-width="2"/>']
    for i, p in enumerate(values):
        current = p.run_id == current_run
        tip = f"run {p.run_id} ({p.created}): {fmt_ms(p.value)} ms ({p.source})" + (" — this run" if current else "")
        parts.append(f'<circle cx="{px(i):.1f}" cy="{py(p.value):.1f}" r="{4.5 if current else 3}" '
                     f'fill="{"#ffffff" if current else TREND_COLOR}" stroke="{TREND_COLOR}" stroke-width="2">'
                     f'<title>{escape(tip)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _table(records: Sequence[RunRecord]) -> str:
    share = next((name for name in headline() if name.startswith("placement.")), None)
    share_label = devices()[share.removeprefix("placement.")].label if share else "placement"
    head = ("variant", "status", "median ms", "best ms", "p90 ms", "load ms", "verify max_rel", share_label, "note")
    rows = []
    for r in records:
        ne = _value(r, share) if share else None
        cells = [
            escape(r.variant_id), f'<span class="{r.status}">{escape(r.status)}</span>',
            fmt_metric(r.metrics.get("latency.median")), fmt_metric(r.metrics.get("latency.best")),
            fmt_metric(r.metrics.get("latency.p90")),
            fmt_metric(r.metrics.get("load_time")),
            (("†" if r.verify.source == "emulated" else "") + f"{r.verify.max_rel:.2e}") if r.verify else "–",
            fmt_metric(ne.metric if ne else None, lambda v: f"{v * 100:.0f}%"),
            escape((r.error or "")[:160]),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def render_html(report: RunReport, trends: Mapping[str, Sequence[TrendPoint]] | None = None) -> str:
    """The whole report as one HTML document. `trends`: per variant, earlier runs' latency medians
    (oldest first); this run's own figure is added at the end when it is not there yet."""
    from types import SimpleNamespace

    machine = report.machine
    machine_text = " · ".join(str(machine[k]) for k in ("os", "arch", "cpu") if machine.get(k))
    summary = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    title = f"mlbench: {report.pipeline.name}"
    body = [f"<h1>{escape(title)}</h1>",
            f'<p class="meta">run <code>{escape(report.run_id)}</code> · {escape(report.created)} · '
            f"{escape(machine_text)} · {escape(summary)}</p>",
            '<p class="meta">Figures are measured unless marked <b>~</b> (estimated, drawn hatched) or <b>†</b> '
            "(emulated: mlbench's interpreter ran the saved program; it checks what the program computes, not what "
            "the device's arithmetic adds); a figure "
            "that could not be had is shown with its reason, never as zero.</p>"]
    if report.finished is None:
        body.append('<p class="failed">partial: the run was interrupted; only finished variants are here.</p>')

    body.append("<h2>Latency per variant</h2>")
    body.append('<p class="meta">Bar: median; whisker: best to p90 of the timed calls.</p>')
    body.append(latency_chart(report.records))
    body.append("<h2>Placement per variant</h2>")
    body.append(placement_chart(report.records))

    series: dict[str, list] = {}
    for variant_id, points in (trends or {}).items():
        series[variant_id] = [p for p in points if p.value is not None]
    for record in report.records:
        median = _value(record, "latency.median")
        if median is None or record.variant_id not in series:
            continue
        if not any(p.run_id == report.run_id for p in series[record.variant_id]):
            series[record.variant_id].append(SimpleNamespace(run_id=report.run_id, created=report.created,
                                                             value=median.value, source=median.source))
    charts = [trend_chart(v, pts, report.run_id) for v, pts in series.items() if len(pts) >= 2]
    body.append("<h2>Trends</h2>")
    if charts:
        body.append('<p class="meta">Latency median per variant over the runs in the history; the hollow '
                    "point is this run.</p>")
        body.append('<div class="trends">' + "".join(charts) + "</div>")
    else:
        body.append('<p class="meta">No earlier runs of this pipeline in the history yet.</p>')
    body.append("<h2>Figures</h2>")
    body.append(_table(report.records))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
