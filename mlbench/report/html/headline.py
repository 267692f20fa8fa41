"""The HTML report's headline table: one row per variant with the figures a reader looks at first.

The latency column leads with the best figure a row has: the measured median, else the estimate for the
pipeline's first `estimate_on` chip (`≈`, with its band), the header naming the chip. Where this machine
measured a variant that also has that estimate (Core ML on a Mac), the estimate stays beside it in a column of
its own. A column no row fills is left out. Text columns are left-aligned, figures right-aligned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mlbench.metrics import ESTIMATE_MARK, headline, source_mark, table_columns
from mlbench.plugins.registry import devices
from mlbench.records import RunRecord
from mlbench.report.html.charts import value_of
from mlbench.report.lead import ESTIMATED_LATENCY, chips_of, lead_latency
from mlbench.report.markdown.layout import EMPTY
from mlbench.report.markdown.run_report import fmt_metric
from mlbench.report.text import html_text as escape
from mlbench.stability import metric_notes


@dataclass(frozen=True)
class HtmlColumn:
    header: str
    cells: list[str]
    """Each cell's HTML."""
    text: bool = False
    """Left-aligned (words); figures are right-aligned."""


def _banded(record: RunRecord, chip: str | None) -> str:
    """The row's lead latency as text: measured, else `≈` the chip's estimate with its band (×worst)."""
    lead = lead_latency(record, chip)
    if lead is None:
        return fmt_metric(record.metrics.get("latency.median"))
    text = fmt_metric(lead)
    return text + (f" (×{lead.band.worst_ratio:.2f})" if lead.source == "estimated" and lead.band is not None else "")


def headline_columns(records: Sequence[RunRecord]) -> list[HtmlColumn]:
    """Every column of the headline table, empty ones left out."""
    share = next((name for name in headline() if name.startswith("placement.")), None)
    share_label = f"{devices()[share.removeprefix('placement.')].label} % of cost" if share else "placement"
    chip = next(iter(chips_of(records)), None)
    metric_columns = table_columns([name for r in records for name in r.metrics], "html")
    columns = [HtmlColumn("variant", [escape(r.variant_id) for r in records], text=True),
               HtmlColumn("status", [f'<span class="{r.status}">{escape(r.status)}</span>' for r in records], text=True)]
    for m in metric_columns:
        if m.name == "latency.median":
            leads = [lead_latency(r, chip) for r in records]
            led = any(lead is not None and lead is not r.metrics.get(m.name) for r, lead in zip(records, leads))
            columns.append(HtmlColumn(m.label + (f" (else {ESTIMATE_MARK}{chip})" if led else ""),
                                      [escape(_banded(r, chip)) for r in records]))
            estimate = ESTIMATED_LATENCY + (chip or "")
            beside = any(lead is not None and lead.source == "measured" and value_of(r, estimate) is not None
                         for r, lead in zip(records, leads))
            if chip is not None and beside:  # measured here and estimated too (a Mac): the estimate stays beside it
                columns.append(HtmlColumn(f"{ESTIMATE_MARK}ms {chip}", [escape(fmt_metric(r.metrics.get(estimate)))
                                                                       for r in records]))
            continue
        columns.append(HtmlColumn(m.label, [escape(fmt_metric(r.metrics.get(m.name)) if m.unit == "ms" else
                                                   fmt_metric(r.metrics.get(m.name), m.format)) for r in records]))
    columns.append(HtmlColumn("verify max_rel", [escape(source_mark(r.verify.source) + f"{r.verify.max_rel:.2e}")
                                                 if r.verify else "–" for r in records]))
    shares = [value_of(r, share) if share else None for r in records]
    columns.append(HtmlColumn(share_label, [escape(fmt_metric(s.metric if s else None, lambda v: f"{v * 100:.0f}%"))
                                            for s in shares]))
    columns.append(HtmlColumn("note", [escape((r.error or "")[:160] if r.status != "ok" else
                                              "; ".join(metric_notes(r.metrics))) for r in records], text=True))
    return [c for i, c in enumerate(columns) if i == 0 or any(cell not in EMPTY for cell in c.cells)]


def headline_table(records: Sequence[RunRecord]) -> str:
    columns = headline_columns(records)
    align = ['class="text"' if c.text else 'class="num"' for c in columns]
    head = "".join(f"<th {a}>{escape(c.header)}</th>" for c, a in zip(columns, align))
    rows = ["<tr>" + "".join(f"<td {a}>{c.cells[i]}</td>" for c, a in zip(columns, align)) + "</tr>"
            for i in range(len(records))]
    return f'<table class="headline"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
