"""The HTML report's inline SVG charts: latency per model, placement per variant, trends over runs.

- Latency (`latency`): one chart per model, each on its own linear scale, so a 0.02 ms model is not
  a 1-px sliver beside a 30 ms one; a bar to the median, a whisker from best to p90, a bar per estimate.
- Placement: one 100% bar per variant, split by device.
- Trend: one variant's median over runs against their dates, on an axis that starts at zero, so a
  0.5% wobble looks like one.

Estimated figures are hatched (one pattern per colour, defined once in `hatch_defs`) and carry `≈`;
absent ones say why. Tooltips are SVG `<title>`s, which browsers show without JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from mlbench.metrics import ESTIMATE_MARK
from mlbench.plugins.registry import devices
from mlbench.records import COUNT_SHARE, Metric, RunRecord, Source
from mlbench.report.text import counted
from mlbench.report.text import html_text as escape  # controls shown as escapes, never raw

UNKNOWN_COLOR = "#bdbdbd"
LATENCY_COLOR = "#5e35b1"
WHISKER_COLOR = "#212121"
TREND_COLOR = "#00838f"
CHIP_COLORS = ("#ef6c00", "#2e7d32", "#ad1457", "#0277bd")
"""One colour per chip a latency is estimated on, in the order the records name them (`est-chip<i>` hatches)."""

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


class _Figure(NamedTuple):
    """A metric that has a value."""

    value: float
    source: Source | None
    metric: Metric


def value_of(record: RunRecord, name: str) -> _Figure | None:
    metric = record.metrics.get(name)
    if metric is None or metric.value is None:
        return None
    return _Figure(metric.value, metric.source, metric)


def _num(value: float) -> str:
    return f"{value:.4g}" if value else "0"


def nice_max(value: float) -> float:
    """A round axis end at or above `value` (1, 2, 4, 5, 8 × 10^k): its quarters and halves are round too."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 4, 5, 8, 10):
        if value <= step * exp * (1 + 1e-9):
            return step * exp
    return 10 * exp


def label_width(labels: Sequence[str]) -> int:
    """Room for the longest label in 12 px monospace (about 7.3 px a character), within 140–400 px."""
    return int(max(140, min(LABEL_W, 16 + 7.3 * max((len(t) for t in labels), default=0))))


def fit_label(text: str, width: int) -> str:
    """`text` cut to fit `width` px of 12 px monospace (as `label_width` counts), keeping its end, where
    variant labels differ: `…float16/cpu_and_gpu/palettize4`. The whole text goes in the label's tooltip."""
    room = int((width - 15) / 7.3)  # label_width's own sum, rounded down to a whole px
    return text if len(text) <= room else "…" + text[len(text) - room + 1:]


def hatch_id(name: str) -> str:
    return f"est-{name}"


def _tint(color: str, amount: float = 0.7) -> str:
    """`color` mixed with white: the background between the hatch's stripes."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def hatch_defs() -> str:
    """One hidden SVG defining a hatch per colour (latency, each device), shared by every chart on the page."""
    colors = {"latency": LATENCY_COLOR, **{d.name: d.color for d in devices().values()},
              **{f"chip{i}": color for i, color in enumerate(CHIP_COLORS)}}
    patterns = "".join(
        f'<pattern id="{hatch_id(name)}" width="6" height="6" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{_tint(color)}"/>'
        f'<line x1="0" y1="0" x2="0" y2="6" stroke="{color}" stroke-width="3"/></pattern>'
        for name, color in colors.items())
    return (f'<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>{patterns}</defs>'
            "</svg>")


def swatch(fill: str) -> str:
    return f'<svg class="swatch" width="12" height="12"><rect width="12" height="12" fill="{fill}"/></svg>'


def _share_prefix(record: RunRecord) -> str | None:
    """Which shares a variant's bar shows: of the cost (`placement.`), else of the compute operations
    (`placement.count.`) where nothing said what each operation costs, else none."""
    for prefix in ("placement.", COUNT_SHARE):
        if any(value_of(record, f"{prefix}{d}") for d in devices()):
            return prefix
    return None


def placement_chart(records: Sequence[RunRecord], label=lambda r: r.variant_id, label_w: int = LABEL_W,
                    legend: bool = True) -> str:
    """One 100% bar per variant with a placement, split by device (hatched where estimated); the rest unknown.
    A bar is the share of the cost; a variant whose placement has no cost per operation shows its share of
    the operations instead, and its label says so."""
    known = devices().values()
    rows = [r for r in records if _share_prefix(r) is not None]
    if not rows:
        return '<p class="meta">No variant in this run reports where its operations run.</p>'
    width = label_w + PLOT_W + VALUE_W
    height = TOP + ROW_H * len(rows) + 10
    parts = [f'<svg class="chart placement" role="img" aria-label="Placement per variant" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}">']
    for pct in (0, 25, 50, 75, 100):
        px = label_w + PLOT_W * pct / 100
        parts.append(f'<line x1="{px:.1f}" y1="{TOP - 6}" x2="{px:.1f}" y2="{height - 10}" stroke="#eee"/>')
        parts.append(f'<text x="{px:.1f}" y="{TOP - 10}" text-anchor="middle" class="muted">{pct}%</text>')
    for i, record in enumerate(rows):
        y = TOP + i * ROW_H
        parts.append(f'<text class="label" x="{label_w - 8}" y="{y + 17}" text-anchor="end">'
                     f'{escape(label(record))}<title>{escape(record.variant_id)}</title></text>')
        left = 0.0
        sources = set()
        shares = []
        prefix = _share_prefix(record)
        of = "ops" if prefix == COUNT_SHARE else "cost"
        for device_info in known:
            device, name = device_info.name, device_info.label
            metric = value_of(record, f"{prefix}{device}")
            if metric is None:
                continue
            share = min(max(metric.value, 0.0), 1.0 - left)
            sources.add(metric.source)
            if metric.value > 0:
                shares.append(f"{device_info.short} {metric.value * 100:.0f}%")
            fill = f"url(#{hatch_id(device)})" if metric.source == "estimated" else device_info.color
            if share > 0:
                parts.append(f'<rect class="seg {device} {metric.source}" x="{label_w + PLOT_W * left:.1f}" '
                             f'y="{y + 5}" width="{PLOT_W * share:.1f}" height="{ROW_H - 10}" fill="{fill}">'
                             f'<title>{escape(f"{record.variant_id}: {name} {metric.value * 100:.1f}% of {of} ({metric.source})")}'
                             f'</title></rect>')
            left += share
        if left < 0.999:
            parts.append(f'<rect class="seg unknown" x="{label_w + PLOT_W * left:.1f}" y="{y + 5}" '
                         f'width="{PLOT_W * (1 - left):.1f}" height="{ROW_H - 10}" fill="{UNKNOWN_COLOR}">'
                         f'<title>{escape(f"{record.variant_id}: unknown {(1 - left) * 100:.1f}%")}</title></rect>')
        mark = ESTIMATE_MARK if "estimated" in sources else ""
        switches = value_of(record, "placement.switches")
        text = (f"{mark}{' '.join(shares)}" + (" of ops" if of == "ops" else "")
                + (f", {counted(switches.value, 'switch', 'switches')}" if switches else ""))
        parts.append(f'<text x="{label_w + PLOT_W + 8}" y="{y + 17}" class="muted">{escape(text[:44])}</text>')
    parts.append("</svg>")
    keys = "".join(f'<span>{swatch(d.color)}{d.label}</span>' for d in known)
    keys += f'<span>{swatch(UNKNOWN_COLOR)}unknown</span>'
    hatched = swatch(f"url(#{hatch_id(next(iter(known)).name)})")
    shown = [value_of(r, f"{_share_prefix(r)}{d.name}") for r in rows for d in known]
    if any(f is not None and f.source == "estimated" for f in shown):  # explained only where a bar is hatched
        keys += f'<span>{hatched}hatched: estimated ({ESTIMATE_MARK})</span>'
    keys += "<span>bars: share of the cost (of ops where the label says so)</span>"
    return (f'<p class="legend">{keys}</p>' if legend else "") + "".join(parts)
