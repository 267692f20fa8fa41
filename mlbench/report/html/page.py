"""The HTML report: one self-contained file with inline SVG charts — no script, no network.

A pure function of a RunReport (and, optionally, earlier runs' figures from the history): latency per
model with each chip's estimate (`latency`), which variant to ship (`ship`), placement per model
(`charts`), trends over runs (`trend`), a table of the headline figures, then every model's
Markdown table, notes and backend sections as HTML (`from_markdown`): the HTML never shows less than the
Markdown. Estimated figures are drawn hatched and carry `≈`, like the Markdown report; absent ones say why.
Each section is one `*_section` function called from `render_html`: add a chart the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from mlbench.metrics import ESTIMATE_MARK
from mlbench.plugins.registry import devices
from mlbench.plugins.spec import Deployment
from mlbench.records import RunRecord, RunReport
from mlbench.report.html.charts import (  # noqa: F401  (LABEL_W, PLOT_W and the colours: what tests measure)
    LABEL_W,
    LATENCY_COLOR,
    PLOT_W,
    TREND_COLOR,
    TrendPoint,
    fit_label,
    hatch_defs,
    label_width,
    placement_chart,
)
from mlbench.report.html.charts import value_of as _value
from mlbench.report.html.from_markdown import to_html
from mlbench.report.html.headline import headline_table
from mlbench.report.html.latency import latency_chart, latency_legend, not_timed_note
from mlbench.report.html.memory import memory_section
from mlbench.report.html.ship import ship_chart, ship_legend
from mlbench.report.html.trend import trend_chart
from mlbench.report.markdown.run_report import model_details, model_table, variant_label
from mlbench.report.marks import marks_of, sources_legend
from mlbench.report.text import html_text as escape  # controls shown as escapes, never raw

if TYPE_CHECKING:
    from mlbench.compare.comparison import Comparison

STYLE = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #212121;
       margin: 24px auto; max-width: 1280px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
h3.model { font-size: 15px; margin: 18px 0 2px; font-family: ui-monospace, Menlo, Consolas, monospace; }
.meta { color: #555; } .legend span { display: inline-block; margin-right: 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: -1px; margin-right: 4px; }
svg text { font: 12px -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #212121; }
svg .label { font-family: ui-monospace, Menlo, Consolas, monospace; }
svg .muted { fill: #757575; }
table { border-collapse: collapse; margin-top: 8px; } th, td { padding: 3px 10px; border-bottom: 1px solid #eee;
       text-align: right; } th:first-child, td:first-child { text-align: left; font-family: ui-monospace, Menlo, monospace; }
table th.text, table td.text { text-align: left; } table.headline td.num { white-space: nowrap; }
table.headline td.text:last-child { min-width: 240px; }
.failed { color: #c62828; font-weight: 600; } .skipped { color: #757575; }
.trends { display: flex; flex-wrap: wrap; gap: 12px; }
svg .value { font-size: 11px; } svg .head { font-weight: 600; } svg .star { font-size: 15px; fill: #f9a825; }
.wide { overflow-x: auto; } table.md td, table.md th { text-align: left; white-space: nowrap; } table.md th { white-space: normal; }
table.md th, table.md td { padding: 3px 6px; } table.md td.num { text-align: right; } table.md td.long { white-space: normal; min-width: 180px; }
table.md code, p code, li code { font: 12px ui-monospace, Menlo, Consolas, monospace; background: #f5f5f5; }
h4 { font-size: 15px; margin: 20px 0 4px; font-family: ui-monospace, Menlo, Consolas, monospace; }
h5 { font-size: 13px; margin: 12px 0 4px; } details { margin: 6px 0; }
h4.target, p.target { font: 600 13px -apple-system, "Segoe UI", Roboto, Arial, sans-serif; margin: 10px 0 2px; }
h4.target .meta, p.target .meta { font-weight: 400; }
.targets { display: flex; flex-wrap: wrap; gap: 8px 24px; } .target-chart { max-width: 620px; }
ol.point-legend { font: 12px ui-monospace, Menlo, Consolas, monospace; margin: 2px 0 8px; }
"""


def by_model(records: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    grouped: dict[str, list[RunRecord]] = {}
    for record in records:
        grouped.setdefault(record.model, []).append(record)
    return grouped


def _label(records: Sequence[RunRecord]) -> tuple[int, Callable[[RunRecord], str]]:
    """One left edge for every model's charts, and variant labels cut (from the left) to fit it."""
    width = label_width([variant_label(r) for r in records])
    return width, lambda r: fit_label(variant_label(r), width)


def by_target(records: Sequence[RunRecord]) -> list[tuple[Deployment, list[RunRecord]]]:
    """The records by deployment target (where their variants run), in the targets' display order."""
    from mlbench.report.advice import deployment_of

    grouped: dict[str, tuple[Deployment, list[RunRecord]]] = {}
    for record in records:
        target = deployment_of(record)
        grouped.setdefault(target.name, (target, []))[1].append(record)
    return sorted(grouped.values(), key=lambda item: item[0].rank)


def target_heading(target: Deployment) -> str:
    return f'<h4 class="target">{escape(target.label)} <span class="meta">({escape(target.basis)})</span></h4>'


def latency_section(records: Sequence[RunRecord], machine: str = "") -> list[str]:
    """One chart per model and deployment target, each on its own scale: a fast model is never a sliver beside
    a slow one, and a chip's estimates never share an axis with this machine's measurements of another target."""
    parts = ['<p class="meta">Bar: median; whisker: best to p90 of the timed calls; a hatched bar per chip a '
             "latency is estimated for, its whisker the estimate's error band. Each model and deployment target has "
             "its own chart and scale (the ticks above it), so compare bars within a chart, and read the figures "
             "across charts.</p>", latency_legend(records, machine)]
    width, label = _label(records)
    for model, rows in by_model(records).items():
        parts.append(f'<h3 class="model">{escape(model)}</h3>')
        targets = by_target(rows)
        for target, mine in targets:
            if len(targets) > 1:
                parts.append(target_heading(target))
            parts.append(not_timed_note(mine))
            parts.append(latency_chart(mine, label=label, label_w=width))
    return parts


def ship_section(records: Sequence[RunRecord]) -> list[str]:
    """Per model and deployment target, latency beside size beside error: which variant to ship. Each target
    is a chart of its own, with its own stars and its own latency axis: a star never crosses targets."""
    from mlbench.report.advice import ship_groups
    from mlbench.report.estimate_order import order_statements

    width, label = _label(records)
    charts = []
    for model, rows in by_model(records).items():
        order = order_statements(rows)
        groups = [g for g in ship_groups(rows) if g.wanted]
        if not groups and not order:
            continue
        parts = [f'<h3 class="model">{escape(model)}</h3>']
        for group in groups:
            parts.append(target_heading(group.deployment))
            parts.append(ship_chart([row.record for row in group.rows], label, width))
        items = "".join(f'<li class="order {s.confidence.replace(" ", "-")}">{escape(s.text())}</li>' for s in order)
        if order:
            parts.append('<p class="note">Estimated order, per chip (each variant against the next slower one; '
                         "confidence from how often the calibration ordered published pairs of the same kinds "
                         f'alike):</p><ul class="estimated-order">{items}</ul>')
        charts.append("".join(parts))
    from mlbench.report.markdown.summary import ship_summary

    table = ship_summary(records)[2:]  # the Markdown report's table of candidates, under this page's own heading
    return [to_html(table), ship_legend(records), *charts] if charts or table else []


def placement_section(records: Sequence[RunRecord]) -> list[str]:
    """Per model, one 100% bar per variant with a placement; the legend once, above the first chart."""
    width, label = _label(records)
    charts: list[str] = []
    for model, rows in by_model(records).items():
        if any(_value(r, f"{p}{d}") for r in rows for p in ("placement.", "placement.count.") for d in devices()):
            charts.append(f'<h3 class="model">{escape(model)}</h3>'
                          + placement_chart(rows, label=label, label_w=width, legend=not charts))
    return charts or [placement_chart([])]


def figures_section(report: RunReport) -> list[str]:
    """Every model's full Markdown table (no column folded away), its notes and its backends' sections."""
    return [to_html([*model_table(model, rows, max_columns=10_000), *model_details(rows, report.artifacts)])
            for model, rows in by_model(report.records).items()]


def render_html(report: RunReport, trends: Mapping[str, Sequence[TrendPoint]] | None = None,
                comparison: Comparison | None = None) -> str:
    """The whole report as one HTML document. `trends`: per variant, earlier runs' latency medians
    (oldest first); this run's own figure is added at the end when it is not there yet."""
    from types import SimpleNamespace

    machine = report.machine
    machine_text = " · ".join(str(machine[k]) for k in ("os", "os_release", "arch", "cpu") if machine.get(k))
    machine_text += f" ({machine['cpu_count']} cores)" if machine.get("cpu_count") else ""
    machine_text += f" · Python {machine['python']}" if machine.get("python") else ""
    packages = ", ".join(f"{k} {v}" for k, v in machine.get("packages", {}).items() if v)
    latency = report.settings.get("latency", {})
    summary = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    title = f"mlbench: {report.pipeline.name}"
    body = [hatch_defs(), f"<h1>{escape(title)}</h1>",
            f'<p class="meta">run <code>{escape(report.run_id)}</code> · {escape(report.created)} · '
            f"{escape(machine_text)} · {escape(summary)}</p>",
            f'<p class="meta">{escape(sources_legend(marks_of(report.records), code=False))}'
            + ("; estimated ones are drawn hatched" if ESTIMATE_MARK in marks_of(report.records) else "")
            + "; a figure that could not be had is shown with its reason, never as zero.</p>",
            f'<p class="meta">{escape(packages)}' + (f". Latency: {latency.get('warmup')} warmup calls thrown away, "
                                                    f"then at least {latency.get('repeats')} calls and "
                                                    f"{latency.get('min_time_s')} s." if latency else "") + "</p>"]
    if report.finished is None:
        body.append('<p class="failed">partial: the run was interrupted; only finished variants are here.</p>')

    if comparison is not None:  # what a pull request asks first, as report.md opens with it
        from mlbench.report.markdown.summary import comparison_summary

        body.append(to_html(comparison_summary(comparison, budget=10**9)))
    body.append("<h2>Latency per model</h2>")
    here = f"{machine.get('cpu')}, {machine.get('cpu_count')} cores" if machine.get("cpu") else ""
    body += latency_section(report.records, here)
    from mlbench.report.html.generation import generation_html  # a generative model's charts (none otherwise)

    body += generation_html(report.records)
    ship = ship_section(report.records)
    if ship:
        body.append("<h2>Which variant to ship</h2>")
        body += ship
    body.append("<h2>Placement per variant</h2>")
    body += placement_section(report.records)
    body.append("<h2>Memory and latency per model</h2>")
    body += memory_section(report.records)

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
        body.append('<p class="meta">Latency median per variant over the runs in the history, against their '
                    "dates; each axis starts at zero. The hollow point is this run; the figure top right is the "
                    "change from the first run shown to the last.</p>")
        body.append('<div class="trends">' + "".join(charts) + "</div>")
    else:
        body.append('<p class="meta">No earlier runs of this pipeline in the history yet.</p>')
    body.append("<h2>Figures</h2>")
    body.append(headline_table(report.records))
    body.append("<h2>Every figure, per model</h2>")
    body.append('<p class="meta">The Markdown report\'s tables with none of their columns folded away, and '
                "their notes.</p>")
    body += figures_section(report)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
