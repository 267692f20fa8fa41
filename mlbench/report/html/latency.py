"""The latency chart of one model: every latency figure a variant has, on the model's own linear scale.

A variant's row holds one bar per figure: the measured (or estimated) median with a best–p90 whisker, then
one hatched bar per estimate a backend added (`latency.estimated.<chip>`: the catalog's extra columns),
each in its chip's colour with its error band drawn as a whisker (×worst either way, ticks at ×typical).
A variant with no figure at all says why in one muted line; a variant that was not timed here but has
estimates shows the estimates, and the reason it was not timed is said once above the chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mlbench.metrics import MetricInfo, columns, estimate_mark
from mlbench.metrics import format_ms as fmt_ms
from mlbench.records import Metric, RunRecord
from mlbench.report.html.charts import (
    CHIP_COLORS,
    LATENCY_COLOR,
    PLOT_W,
    ROW_H,
    TOP,
    VALUE_W,
    WHISKER_COLOR,
    hatch_id,
    nice_max,
    swatch,
    value_of,
)
from mlbench.report.html.ticks import linear_time_labels, log_time_label
from mlbench.report.lead import ESTIMATED_LATENCY, chips_of
from mlbench.report.text import html_text as escape
from mlbench.stability import mark, suffix

BAR_H = 10
BAR_GAP = 3


def estimate_columns(records: Sequence[RunRecord]) -> list[MetricInfo]:
    """The per-chip latency estimates these records carry (`latency.estimated.<chip>`), in catalog order: not
    every extra figure in ms (a cold or warm load, a generation's prefill estimate) is one call's latency."""
    chips = set(chips_of(records))
    return [c for c in columns([n for r in records for n in r.metrics])
            if c.unit == "ms" and c.name.removeprefix(ESTIMATED_LATENCY) in chips]


def chip_of(column: MetricInfo) -> str:
    """`a17pro` of `latency.estimated.a17pro`."""
    return column.name.rsplit(".", 1)[-1]


def _chip_fill(i: int) -> str:
    """The hatch of the i-th estimated chip's colour."""
    return "url(#" + hatch_id(f"chip{i % len(CHIP_COLORS)}") + ")"


def _not_timed(record: RunRecord) -> str:
    absent = record.metrics.get("latency.median")
    return f"not timed: {absent.reason if absent is not None and absent.reason else 'no latency in this record'}"


def _bars(record: RunRecord, extra: Sequence[MetricInfo]) -> list[tuple[str, Metric]]:
    """(which, figure) for each latency figure the record has: `median`, then `<i>` per estimate column."""
    found: list[tuple[str, Metric]] = []
    median = record.metrics.get("latency.median")
    if median is not None and median.value is not None:
        found.append(("median", median))
    for i, column in enumerate(extra):
        metric = record.metrics.get(column.name)
        if metric is not None and metric.value is not None:
            found.append((str(i), metric))
    return found


def not_timed_note(records: Sequence[RunRecord]) -> str:
    """Why the variants whose bars are only estimates were not timed, each distinct reason once."""
    extra = estimate_columns(records)
    reasons: dict[str, int] = {}
    for record in records:
        bars = _bars(record, extra)
        if record.status == "ok" and bars and bars[0][0] != "median":
            text = _not_timed(record)
            reasons[text] = reasons.get(text, 0) + 1
    if not reasons:
        return ""
    said = "; ".join(f"{n} variant{'s' if n > 1 else ''} {text}" for text, n in reasons.items())
    return f'<p class="meta">{escape(said)}: their bars are the estimates.</p>'


LOG_ABOVE = 20.0
"""A chart whose figures span more than this factor is drawn on a log scale: a 1 s CPU median beside a 0.7 ms
estimate would leave the estimate a 0-px sliver on a linear one."""


def scale(values: Sequence[float], label_w: int) -> tuple[Callable[[float], float], list[tuple[float, str]]]:
    """x of a figure, and the ticks (labelled in one style per axis: `html/ticks.py`): linear from zero;
    logarithmic (decades) when the figures span more than `LOG_ABOVE`."""
    positive = [v for v in values if v > 0]
    if is_log(values):
        lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
        span = max(hi - lo, 1)
        log_x = lambda v: label_w + PLOT_W * (math.log10(max(v, 10.0 ** lo)) - lo) / span  # noqa: E731
        return log_x, [(10.0 ** k, log_time_label(10.0 ** k)) for k in range(lo, lo + span + 1)]
    axis_max = nice_max(max(values, default=0.0) * 1.05)
    ticks = [axis_max * i / 4 for i in range(5)]
    return (lambda v: label_w + PLOT_W * v / axis_max), list(zip(ticks, linear_time_labels(ticks), strict=True))


def is_log(values: Sequence[float]) -> bool:
    """Whether `scale` draws these figures on a log axis."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_ABOVE


def latency_chart(records: Sequence[RunRecord], label: Callable[[RunRecord], str] = lambda r: r.variant_id,
                  label_w: int = 400) -> str:
    """Bars for every latency figure, one row per variant, on this chart's own scale."""
    extra = estimate_columns(records)
    rows = [(record, _bars(record, extra)) for record in records]
    ends = []
    for record, bars in rows:
        for _, metric in bars:
            band = metric.band.worst_ratio if metric.band is not None else 1.0
            ends += [(metric.value or 0.0) / band, (metric.value or 0.0) * band]
        p90, best = value_of(record, "latency.p90"), value_of(record, "latency.best")
        if p90 is not None and best is not None and bars and bars[0][0] == "median":
            ends += [best.value, p90.value]
    x, ticks = scale(ends, label_w)
    log = is_log(ends)
    heights = [max(ROW_H, 6 + len(bars) * (BAR_H + BAR_GAP)) for _, bars in rows]
    width = label_w + PLOT_W + VALUE_W
    height = TOP + sum(heights) + 10
    parts = [f'<svg class="chart latency" role="img" aria-label="Latency per variant" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}">']
    for tick, text in ticks:
        parts.append(f'<line x1="{x(tick):.1f}" y1="{TOP - 6}" x2="{x(tick):.1f}" y2="{height - 10}" stroke="#eee"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{TOP - 10}" text-anchor="middle" class="muted tick">{text}</text>')
    if log:  # said once, beside the axis, not glued to a tick label
        parts.append(f'<text x="{label_w + PLOT_W + 36}" y="{TOP - 10}" class="muted axis-note">log scale</text>')
    y = TOP
    for (record, bars), row_h in zip(rows, heights):
        parts.append(f'<text class="label" x="{label_w - 8}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end">'
                     f'{escape(label(record))}<title>{escape(record.variant_id)}</title></text>')
        if not bars:
            why = f"{record.status}: {record.error or ''}" if record.status != "ok" else _not_timed(record)
            parts.append(f'<text class="muted" x="{label_w + 4}" y="{y + row_h / 2 + 4:.1f}">{escape(why[:110])}</text>')
        top = y + (row_h - len(bars) * (BAR_H + BAR_GAP) + BAR_GAP) / 2
        for k, (which, metric) in enumerate(bars):
            by = top + k * (BAR_H + BAR_GAP)
            if which == "median":
                parts += _median_bar(record, metric, x, label_w, by)
            else:
                parts += _estimate_bar(record, metric, extra[int(which)], int(which), x, label_w, by)
        y += row_h
    parts.append("</svg>")
    return "".join(parts)


def _median_bar(record: RunRecord, median: Metric, x, label_w: int, by: float) -> list[str]:
    best, p90 = value_of(record, "latency.best"), value_of(record, "latency.p90")
    value = median.value or 0.0
    fill = f"url(#{hatch_id('latency')})" if median.source == "estimated" else LATENCY_COLOR
    tip = (f"{record.variant_id}: median {fmt_ms(value)} ms, best {fmt_ms(best.value if best else None)} ms, "
           f"p90 {fmt_ms(p90.value if p90 else None)} ms ({median.source})")
    if median.stability is not None and median.stability.grade != "stable":
        tip += f"; {mark(median.stability)} {median.stability.note()}"
    parts = [f'<rect class="bar median {median.source}" x="{label_w}" y="{by:.1f}" '
             f'width="{max(x(value) - label_w, 1):.1f}" height="{BAR_H}" fill="{fill}" '
             f'fill-opacity="0.85"><title>{escape(tip)}</title></rect>']
    text = f"{estimate_mark(median.source)}{fmt_ms(value)} ms"
    if best is not None and p90 is not None:
        x1, x2, ym = x(best.value), x(p90.value), by + BAR_H / 2
        parts.append(f'<g class="whisker" stroke="{WHISKER_COLOR}" stroke-width="1.5"><title>{escape(tip)}</title>'
                     f'<line x1="{x1:.1f}" y1="{ym}" x2="{x2:.1f}" y2="{ym}"/>'
                     f'<line x1="{x1:.1f}" y1="{ym - 5}" x2="{x1:.1f}" y2="{ym + 5}"/>'
                     f'<line x1="{x2:.1f}" y1="{ym - 5}" x2="{x2:.1f}" y2="{ym + 5}"/></g>')
        text += f"  ({fmt_ms(best.value)}–{fmt_ms(p90.value)})"
    text += suffix(median.stability)  # ⚠ unreliable, ? noisy: the tooltip and the table's note say why
    parts.append(f'<text class="value" x="{label_w + PLOT_W + 8}" y="{by + BAR_H - 1:.1f}">{escape(text)}</text>')
    return parts


def _estimate_bar(record: RunRecord, metric: Metric, column: MetricInfo, i: int, x, label_w: int,
                  by: float) -> list[str]:
    value = metric.value or 0.0
    chip = chip_of(column)
    color = CHIP_COLORS[i % len(CHIP_COLORS)]
    band = metric.band
    tip = f"{record.variant_id}: {estimate_mark(metric.source)}{fmt_ms(value)} ms on {chip} ({metric.source})"
    if band is not None:
        tip += (f"; off by ×{band.median_ratio:.2f} typically, ×{band.worst_ratio:.2f} at worst "
                f"({fmt_ms(value / band.worst_ratio)}–{fmt_ms(value * band.worst_ratio)} ms; {band.basis})")
    fill = _chip_fill(i) if metric.source == "estimated" else color
    parts = [f'<rect class="bar estimate {metric.source} chip-{escape(chip)}" x="{label_w}" y="{by:.1f}" '
             f'width="{max(x(value) - label_w, 1):.1f}" height="{BAR_H}" fill="{fill}"><title>{escape(tip)}</title>'
             "</rect>"]
    if band is not None:
        ym = by + BAR_H / 2
        lo, hi = x(value / band.worst_ratio), x(value * band.worst_ratio)
        tlo, thi = x(value / band.median_ratio), x(value * band.median_ratio)
        parts.append(f'<g class="band" stroke="{color}" stroke-width="1.2"><title>{escape(tip)}</title>'
                     f'<line x1="{lo:.1f}" y1="{ym}" x2="{hi:.1f}" y2="{ym}"/>'
                     f'<line x1="{lo:.1f}" y1="{ym - 4}" x2="{lo:.1f}" y2="{ym + 4}"/>'
                     f'<line x1="{hi:.1f}" y1="{ym - 4}" x2="{hi:.1f}" y2="{ym + 4}"/>'
                     f'<line x1="{tlo:.1f}" y1="{ym - 2.5}" x2="{tlo:.1f}" y2="{ym + 2.5}" stroke-width="2"/>'
                     f'<line x1="{thi:.1f}" y1="{ym - 2.5}" x2="{thi:.1f}" y2="{ym + 2.5}" stroke-width="2"/></g>')
    text = f"{estimate_mark(metric.source)}{fmt_ms(value)} ms {chip}"
    if band is not None:
        text += f" (×{band.worst_ratio:.2f})"
    parts.append(f'<text class="value" x="{label_w + PLOT_W + 8}" y="{by + BAR_H - 1:.1f}">{escape(text)}</text>')
    return parts


def latency_legend(records: Sequence[RunRecord] = (), machine: str = "") -> str:
    """Which machine or chip each bar is: measured medians (this machine, named), estimated medians, and each
    estimated chip's colour."""
    from mlbench.metrics import ESTIMATE_MARK

    hatched = swatch(f"url(#{hatch_id('latency')})")
    chips = "".join(f"<span>{swatch(_chip_fill(i))}{ESTIMATE_MARK} {escape(chip_of(c))} (estimated for that chip)</span>"
                    for i, c in enumerate(estimate_columns(records)))
    band = ('<span><svg class="swatch" width="18" height="12"><g stroke="#616161" stroke-width="1.2">'
            '<line x1="1" y1="6" x2="17" y2="6"/><line x1="1" y1="2" x2="1" y2="10"/><line x1="17" y1="2" '
            'x2="17" y2="10"/></g></svg>estimate band: ×worst either way, ticks at ×typical</span>' if chips else "")
    here = f"measured median on this machine ({escape(machine)})" if machine else "measured median on this machine"
    sources = {m.source for r in records if (m := r.metrics.get("latency.median")) is not None and m.value is not None}
    return ('<p class="legend">' + (f'<span>{swatch(LATENCY_COLOR)}{here}</span>' if "measured" in sources or not
                                    records else "")
            + (f'<span>{hatched}estimated median ({ESTIMATE_MARK})</span>' if "estimated" in sources or not records
               else "")
            + f'{chips}'
            '<span><svg class="swatch" width="18" height="12"><g stroke="#212121" stroke-width="1.5">'
            '<line x1="1" y1="6" x2="17" y2="6"/><line x1="1" y1="1" x2="1" y2="11"/><line x1="17" y1="1" x2="17" '
            f'y2="11"/></g></svg>best to p90</span>{band}</p>')
