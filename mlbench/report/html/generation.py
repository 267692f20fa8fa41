"""A generative model's charts in the HTML report: decode ms per token by variant, and prefill by prompt
length (one bar per variant and prompt, grouped by variant so the growth with the prompt reads down a group).
Estimated figures are hatched and carry `≈`, as in the latency charts; absent ones say why."""

from __future__ import annotations

from collections.abc import Sequence

from mlbench.config.generate import PROMPT_AXIS, prompt_length
from mlbench.generate.metrics import DECODE, PREFILL
from mlbench.metrics import estimate_mark
from mlbench.metrics import format_ms as fmt_ms
from mlbench.records import RunRecord
from mlbench.report.html.charts import LATENCY_COLOR, PLOT_W, ROW_H, TOP, VALUE_W, hatch_id, label_width, nice_max
from mlbench.report.html.charts import value_of as _value
from mlbench.report.html.ticks import linear_time_labels
from mlbench.report.markdown.generation import base_label
from mlbench.report.text import html_text as escape


def bar_chart(rows: Sequence[tuple[str, RunRecord]], metric: str, title: str, unit: str) -> str:
    """One bar per (label, record): the record's `metric`, or why it has none."""
    label_w = label_width([label for label, _ in rows])
    figures = [_value(record, metric) for _, record in rows]
    axis_max = nice_max(max([f.value for f in figures if f is not None] + [0.0]) * 1.05)
    width, height = label_w + PLOT_W + VALUE_W, TOP + ROW_H * len(rows) + 10
    x = lambda v: label_w + PLOT_W * v / axis_max  # noqa: E731
    parts = [f'<svg class="chart generate" role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">']
    ticks = [axis_max * i / 4 for i in range(5)]
    labels = linear_time_labels(ticks) if unit == "ms" else [f"{tick:.4g} {unit}" for tick in ticks]
    for tick, text in zip(ticks, labels, strict=True):
        parts.append(f'<line x1="{x(tick):.1f}" y1="{TOP - 6}" x2="{x(tick):.1f}" y2="{height - 10}" stroke="#eee"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{TOP - 10}" text-anchor="middle" class="muted tick">{text}</text>')
    for i, ((label, record), figure) in enumerate(zip(rows, figures)):
        y = TOP + i * ROW_H
        parts.append(f'<text class="label" x="{label_w - 8}" y="{y + 17}" text-anchor="end">{escape(label)}</text>')
        if figure is None:
            absent = record.metrics.get(metric)
            why = absent.reason if absent is not None and absent.reason else f"no {metric} in this record"
            parts.append(f'<text class="muted" x="{label_w + 4}" y="{y + 17}">{escape(why[:110])}</text>')
            continue
        fill = f"url(#{hatch_id('latency')})" if figure.source == "estimated" else LATENCY_COLOR
        tip = f"{record.variant_id}: {metric} {fmt_ms(figure.value)} {unit} ({figure.source})"
        parts.append(f'<rect class="bar {figure.source}" x="{label_w}" y="{y + 5}" '
                     f'width="{max(x(figure.value) - label_w, 1):.1f}" height="{ROW_H - 10}" fill="{fill}" '
                     f'fill-opacity="0.85"><title>{escape(tip)}</title></rect>')
        parts.append(f'<text x="{label_w + PLOT_W + 8}" y="{y + 17}">'
                     f'{escape(estimate_mark(figure.source) + fmt_ms(figure.value))} {unit}</text>')
    parts.append("</svg>")
    return "".join(parts)


def generation_html(records: Sequence[RunRecord]) -> list[str]:
    """The generation section (a heading and two charts per generative model), or nothing without one."""
    rows = [r for r in records if PROMPT_AXIS in r.axes and r.status == "ok"]
    if not rows:
        return []
    by_model: dict[str, list[RunRecord]] = {}
    for record in rows:
        by_model.setdefault(record.model, []).append(record)
    parts = ["<h2>Generation</h2>",
             '<p class="meta">Decode: ms per generated token (median of the timed steps). Prefill: the prompt to '
             "the first token's logits, per prompt length.</p>"]
    for model, mine in by_model.items():
        ordered = sorted(mine, key=lambda r: (base_label(r), prompt_length(r.axes[PROMPT_AXIS])))
        parts.append(f'<h3 class="model">{escape(model)}</h3>')
        parts.append("<p>Decode ms/token by variant</p>")
        parts.append(bar_chart([(f"{base_label(r)} @{r.axes[PROMPT_AXIS]}", r) for r in ordered], DECODE,
                               "Decode ms per token by variant", "ms"))
        parts.append("<p>Prefill by prompt length</p>")
        parts.append(bar_chart([(f"{base_label(r)} @{r.axes[PROMPT_AXIS]}", r) for r in ordered], PREFILL,
                               "Prefill ms by prompt length", "ms"))
    return parts
