"""The HTML report's memory chart: per model and deployment target, each variant's memory against its latency.

The trade-off compression makes: a palettized or float16 variant moves down (less memory) and, where it pays,
left (faster). Memory is `memory.peak` where it was measured, else `memory.estimated`. Latency is the one figure
the target's variants share (`report.advice.latency_basis`: the measured median, else one chip's estimate), so a
chip's estimates and this machine's measurements never share an axis: each target is a chart of its own, titled
with what its axes are. A point with an estimated coordinate is drawn hollow and its label carries `≈`; a variant
without both figures is listed under the chart, not drawn at zero. Both axes start at zero, so distances read
as ratios.

Labels never print over each other: each goes where it overlaps no other label, point or edge (right of its
point, else left, above, below); one that fits nowhere is folded into a number beside its point, and the
numbered list under the chart names it (the point's tooltip says it all too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from mlbench.metrics import ESTIMATE_MARK, format_ms, format_value, source_mark
from mlbench.records import Metric, RunRecord
from mlbench.report.advice import deployment_of, latency_basis
from mlbench.report.html.charts import nice_max
from mlbench.report.html.ticks import byte_labels, linear_time_labels
from mlbench.report.lead import lead_memory
from mlbench.report.text import html_text as escape

MEMORY_COLOR = "#2e7d32"
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 620, 266, 70, 40, 14, 200
CHAR_W, TEXT_H, POINT_R = 7.3, 14, 5
"""12 px monospace: at most 7.3 px a character (as `charts.label_width` counts), a line 14 px high."""


class Box(NamedTuple):
    left: float
    top: float
    right: float
    bottom: float

    def overlaps(self, other: Box) -> bool:
        return self.left < other.right and other.left < self.right and self.top < other.bottom and other.top < self.bottom


class Placed(NamedTuple):
    x: float
    y: float
    anchor: str
    text: str


def _candidates(x: float, y: float, text: str) -> list[tuple[Placed, Box]]:
    """Where a label may go around the point (x, y), best first: right, left, above, below."""
    w = CHAR_W * len(text)
    gap = POINT_R + 3
    spots = [(x + gap, y + 4, "start", x + gap), (x - gap, y + 4, "end", x - gap - w),
             (x, y - gap - 2, "middle", x - w / 2), (x, y + gap + 11, "middle", x - w / 2)]
    return [(Placed(tx, ty, anchor, text), Box(left, ty - 11, left + w, ty + 3)) for tx, ty, anchor, left in spots]


def _number_spots(x: float, y: float, text: str) -> list[tuple[Placed, Box]]:
    """Where a folded label's number may go: around the point, on rings further and further out."""
    w = CHAR_W * len(text)
    spots = []
    for ring in (1, 2, 3, 4):
        reach = POINT_R + 2 + (ring - 1) * (TEXT_H + 1)
        for dx, dy in ((1, 0), (-1, 0), (0, -1), (0, 1), (1, -1), (-1, -1), (1, 1), (-1, 1)):
            cx, cy = x + dx * (reach + w / 2), y + dy * (reach + TEXT_H / 2)
            spots.append((Placed(cx, cy + 4, "middle", text), Box(cx - w / 2, cy - 7, cx + w / 2, cy + 7)))
    return spots


def place_labels(points: Sequence[tuple[float, float, str]], number_from: int = 1,
                 bounds: Box = Box(0, 0, WIDTH, HEIGHT)) -> tuple[list[Placed | None], list[int]]:
    """A spot for each point's label where it overlaps no other label or point and stays inside `bounds`; a
    label that fits nowhere becomes its number (`number_from`, counting up). Returns, per point, the placed text
    (None: no room even for the number; its tooltip and the list still name it), and the indexes of the
    points whose label was folded into a number."""
    taken = [Box(x - POINT_R - 1, y - POINT_R - 1, x + POINT_R + 1, y + POINT_R + 1) for x, y, _ in points]
    placed: list[Placed | None] = []
    folded: list[int] = []
    number = number_from
    for i, (x, y, text) in enumerate(points):
        others = [b for k, b in enumerate(taken) if k != i]
        spot = next(((p, b) for p, b in _candidates(x, y, text)
                     if b.left >= bounds.left and b.right <= bounds.right and b.top >= bounds.top
                     and b.bottom <= bounds.bottom and not any(b.overlaps(o) for o in others)), None)
        if spot is None:
            folded.append(i)
            spot = next(((p, b) for p, b in _number_spots(x, y, str(number))
                         if b.left >= bounds.left and b.right <= bounds.right and b.top >= bounds.top
                         and b.bottom <= bounds.bottom and not any(b.overlaps(o) for o in others)), None)
            number += 1
        placed.append(spot[0] if spot is not None else None)
        if spot is not None:
            taken.append(spot[1])
    return placed, folded


def _label(record: RunRecord) -> str:
    return "/".join(record.variant_id.split("/")[1:]) or record.variant_id


def memory_chart(records: Sequence[RunRecord], title: str = "", number_from: int = 1) -> str:
    """One deployment target's variants of one model as points: latency across (the figure they share), memory
    up; '' when none has both figures."""
    basis = latency_basis(records)
    points = [(r, lead_memory(r), r.metrics.get(basis[0]) if basis else None) for r in records]
    drawn = [(r, m, t) for r, m, t in points if m is not None and t is not None and t.value is not None]
    if not drawn or basis is None:
        return ""
    lat_name = basis[0]
    x_max = nice_max(max(t.value or 0.0 for _, _, t in drawn))
    y_max = nice_max(max(m.value or 0.0 for _, m, _ in drawn))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<svg class="chart memory" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="memory against latency{": " + escape(title) if title else ""}">',
             f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#9e9e9e"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#9e9e9e"/>']
    quarters = [i / 4 for i in range(5)]
    for q, x_text, y_text in zip(quarters, linear_time_labels([x_max * q for q in quarters]),
                                 byte_labels([y_max * q for q in quarters]), strict=True):
        x, y = LEFT + plot_w * q, TOP + plot_h * (1 - q)
        parts.append(f'<text class="muted tick x" x="{x:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">'
                     f"{escape(x_text)}</text>")
        parts.append(f'<text class="muted tick y" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{escape(y_text)}</text>")
    axis = "latency: the median" if lat_name == "latency.median" else \
        f"latency: {ESTIMATE_MARK} estimate on {lat_name.rsplit('.', 1)[-1]}"
    parts.append(f'<text class="muted" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
                 f"{escape(axis)}</text>")
    spots: dict[tuple[float, float], list[tuple[RunRecord, Metric, Metric]]] = {}
    for record, mem, lat in drawn:  # variants with the same two figures (e.g. compute units an estimate cannot tell
        x = LEFT + plot_w * (lat.value or 0.0) / x_max  # apart) are one point, not a pile of labels
        y = TOP + plot_h * (1 - (mem.value or 0.0) / y_max)
        spots.setdefault((round(x, 1), round(y, 1)), []).append((record, mem, lat))
    coords, texts, tips = [], [], []
    for (x, y), same in spots.items():
        record, mem, lat = same[0]
        estimated = "estimated" in (mem.source, lat.source)
        figures = (f"{source_mark(mem.source)}{format_value(mem.value, 'bytes')}, "
                   f"{source_mark(lat.source)}{format_ms(lat.value)} ms")
        names = ", ".join(r.variant_id for r, _, _ in same)
        tip = f"{names}: {figures} ({_memory_name(mem, record)}, {lat_name})"
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{POINT_R}" fill="{"white" if estimated else MEMORY_COLOR}" '
                     f'stroke="{MEMORY_COLOR}" stroke-width="2"><title>{escape(tip)}</title></circle>')
        coords.append((x, y))
        texts.append(("≈ " if estimated else "") + _label(record) + (f" +{len(same) - 1}" if len(same) > 1 else ""))
        tips.append((tip, ", ".join(_label(r) for r, _, _ in same) + f": {figures}"))
    bounds = Box(LEFT + 2, 0, WIDTH, TOP + plot_h - 1)  # never over the axes or their tick labels
    placed, folded = place_labels([(x, y, t) for (x, y), t in zip(coords, texts)], number_from, bounds)
    for spot, (tip, _) in zip(placed, tips):
        if spot is not None:
            parts.append(f'<text class="label point-label" x="{spot.x:.1f}" y="{spot.y:.1f}" '
                         f'text-anchor="{spot.anchor}">{escape(spot.text)}<title>{escape(tip)}</title></text>')
    parts.append("</svg>")
    if folded:
        items = "".join(f'<li value="{number_from + k}">{escape(tips[i][1])}</li>' for k, i in enumerate(folded))
        parts.append(f'<ol class="point-legend">{items}</ol>')
    missing = [r for r, m, t in points if m is None or t is None or t.value is None]
    if missing:
        parts.append('<p class="meta">Not drawn (no memory or no latency figure): '
                     + ", ".join(f"<code>{escape(r.variant_id)}</code>" for r in missing) + "</p>")
    return "".join(parts)


def _memory_name(metric: Metric, record: RunRecord) -> str:
    return next((name for name, m in record.metrics.items() if m is metric), "memory")


def memory_section(records: Sequence[RunRecord]) -> list[str]:
    """Per model, one chart per deployment target that has a variant with both figures, under one note."""
    by_model: dict[str, list[RunRecord]] = {}
    for record in records:
        by_model.setdefault(record.model, []).append(record)
    parts: list[str] = []
    for model, rows in by_model.items():
        targets: dict[str, list[RunRecord]] = {}
        labels = {}
        for record in rows:
            target = deployment_of(record)
            targets.setdefault(target.name, []).append(record)
            labels[target.name] = target
        charts = []
        for name in sorted(targets, key=lambda n: labels[n].rank):
            chart = memory_chart(targets[name], labels[name].label)
            if chart:
                charts.append(f'<div class="target-chart"><p class="target">{escape(labels[name].label)} '
                              f'<span class="meta">({escape(labels[name].basis)})</span></p>{chart}</div>')
        if charts:
            parts += [f'<h3 class="model">{escape(model)}</h3>', '<div class="targets">' + "".join(charts) + "</div>"]
    if not parts:
        return ['<p class="meta">No variant has both a memory figure (memory.peak, memory.estimated) and a '
                "latency.</p>"]
    return ['<p class="meta">Memory (up: memory.peak measured, else memory.estimated) against latency (across: the '
            "figure the deployment target's variants share, named under each chart), one chart per model and "
            f"target, each on its own scale from zero; hollow points and <b>{ESTIMATE_MARK}</b> mark an estimated "
            "coordinate. A label with no room beside its point is a number, named in the list under the chart.</p>",
            *parts]
