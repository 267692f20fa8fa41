"""The Markdown report: one table per model, a row per variant, made for a pull-request comment.

What each cell says lives here; how the table fits a comment (columns, folds, notes said once, the
size limit) lives in `layout`."""

from __future__ import annotations

from math import isfinite
from typing import TYPE_CHECKING

from mlbench.metrics import ESTIMATE_MARK, MetricInfo, columns, estimate_mark, format_ms, source_mark, table_columns
from mlbench.plugins.registry import devices, specs
from mlbench.plugins.spec import REFERENCE, load_attr
from mlbench.records import Metric, RunRecord, RunReport
from mlbench.report.band_words import describe_bands
from mlbench.report.markdown.layout import COMMENT_LIMIT, MAX_COLUMNS, Column, Section, fit_comment, render_table
from mlbench.report.text import md_cell, md_code, md_inline
from mlbench.stability import LEGEND, metric_notes, suffix
from mlbench.units import human_bytes

if TYPE_CHECKING:
    from mlbench.compare.comparison import Comparison

FULL_NAME = "report.full.md"
"""Where the whole Markdown report goes when report.md had to be cut to fit a comment."""

STATUS_MARK = {"ok": "ok", "failed": "**failed**", "skipped": "skipped"}


def fmt_metric(metric: Metric | None, fmt=format_ms) -> str:
    """A figure as text; estimated ones carry `≈` so they never pass for measured ones, and a timed figure that
    is not stable its mark (the note column says why)."""
    if metric is None or metric.value is None:
        return "–"
    return source_mark(metric.source) + fmt(metric.value) + suffix(metric.stability)  # ⚠ unreliable, ? noisy


def variant_label(record: RunRecord) -> str:
    """The variant id without the model: `coreml/float16/all/none`."""
    return "/".join([record.backend, *record.axes.values()])


def baseline_for(records: list[RunRecord]) -> RunRecord | None:
    """The model's reference record (eager float32 on the CPU), when it ran."""
    for record in records:
        if variant_label(record) == REFERENCE and record.status == "ok":
            return record
    return None


def _speedup(record: RunRecord, baseline: RunRecord | None) -> str:
    if baseline is None or record.status != "ok":
        return "–"
    mine, base = record.metrics.get("latency.median"), baseline.metrics.get("latency.median")
    if not mine or not base or mine.value in (None, 0) or base.value is None:
        return "–"
    text = f"{base.value / mine.value:.2f}×"
    return (ESTIMATE_MARK + text) if "estimated" in (mine.source, base.source) else text


def _verify(record: RunRecord) -> str:
    if record.verify is None:
        return "reference" if "verify" in record.details else "–"
    mark = "" if record.verify.passed else " ✗"
    if record.verify.note:  # some output is too small for max_rel to see a wrong export (not ≈: an estimate)
        snr = record.verify.snr_db
        mark += " (outputs near 0: max_rel blind" + (f"; SNR {snr:.0f} dB)" if snr is not None and isfinite(snr) else ")")
    if record.verify.samples > 1:
        mark += f" ({record.verify.samples} samples)"
    if record.verify.max_rel == 0 and record.verify.max_abs == 0 and not record.verify.note:
        mark += (" (identical outputs: emulated with the reference's own kernels)" if record.verify.source == "emulated"
                 else " (identical outputs)")  # exactly 0 is no rounding: say why, or it reads as a glitch
    return f"{source_mark(record.verify.source)}{record.verify.max_rel:.2e}{mark}"


def _note(record: RunRecord) -> str:
    text = record.error or ""
    median = record.metrics.get("latency.median")
    if not text and median is not None and median.value is None:
        text = f"not timed: {median.reason}"
    if record.status == "ok":
        text = "; ".join([text, *metric_notes(record.metrics)]) if text else "; ".join(metric_notes(record.metrics))
    return md_cell(text)


def _artifact(record: RunRecord) -> tuple[str, str]:
    """(size, export) cells: the package size and whether the export came from the cache."""
    info = record.artifact
    if info is None:
        return "–", "–"
    return human_bytes(info.size_bytes), "cached" if info.cache_hit else f"{info.export_seconds:.1f} s"


def _placement(record: RunRecord) -> tuple[str, str, str]:
    """(`ANE / GPU / CPU` % of the cost, the same % of the compute ops, switches) cells; estimated placements
    carry `≈`; the cost cell is – where nothing says what each operation costs."""
    placement = record.placement
    if placement is None:
        return "–", "–", "–"
    mark = estimate_mark(placement.source)
    by_cost = placement.by_cost
    cost = " / ".join(f"{100 * by_cost.get(d, 0.0):.0f}" for d in devices()) if by_cost else "–"
    count = " / ".join(f"{100 * placement.by_count.get(d, 0.0):.0f}" for d in devices())
    return f"{mark}{cost}" if by_cost else cost, f"{mark}{count}", f"{mark}{placement.switches}"


def _metric_cell(record: RunRecord, column: MetricInfo) -> str:
    """A metric column's figure (`≈` when estimated), with measured ÷ estimated where this machine
    measured what the estimate predicts."""
    metric = record.metrics.get(column.name)
    text = fmt_metric(metric) if column.unit == "ms" else fmt_metric(metric, column.format)  # bytes: 44.7 MB
    if metric is not None and metric.value and metric.measured_as:
        measured = record.metrics.get(metric.measured_as)
        if measured is not None and measured.value is not None and measured.source == "measured":
            text += f" (measured ×{measured.value / metric.value:.2f})"
    return text


def _lead_cell(record: RunRecord, column: MetricInfo, chip: str | None) -> str | None:
    """The median or memory cell of a row this machine did not measure: the estimate (≈, with its band), so
    a Linux run's Core ML rows lead with a figure, not a dash; None where the measured cell stands."""
    from mlbench.report.lead import lead_latency, lead_memory

    if column.name not in ("latency.median", "memory.peak"):
        return None
    mine = record.metrics.get(column.name)
    if mine is not None and mine.value is not None:
        return None
    lead = lead_latency(record, chip) if column.name == "latency.median" else lead_memory(record)
    if lead is None or lead.source != "estimated":
        return None
    text = fmt_metric(lead) if column.unit == "ms" else fmt_metric(lead, column.format)
    return text + (f" (×{lead.band.worst_ratio:.2f})" if lead.band is not None else "")


def render_column_notes(records: list[RunRecord], extra: list[MetricInfo]) -> list[str]:
    """What the extra columns are, and the error band their estimates carry: one line per kind."""
    groups: dict[str, list[str]] = {}
    for column in extra:
        bands = {m.band.model_dump_json(): m.band for r in records
                 if (m := r.metrics.get(column.name)) is not None and m.band is not None}
        text = column.describe
        if any((m := r.metrics.get(column.name)) is not None and m.source == "reference" for r in records):
            text += " (‡: in the vendor's reference runtime on this machine's CPU, not a device)"  # only where one is
        if bands:
            text += f"; {describe_bands(list(bands.values()))}"
        groups.setdefault(text, []).append(f"_{column.label}_")
    lines = [f"{', '.join(labels)}: {text}." for text, labels in groups.items()]
    if any((m := r.metrics.get(c.name)) is not None and m.measured_as for r in records for c in extra):
        lines.append("(measured ×r): this machine's measured median ÷ the estimate for its own chip.")
    return [line for text in lines for line in (text, "")]


def render_placement_notes(records: list[RunRecord]) -> list[str]:
    """Each distinct placement note once, with the variants it applies to."""
    notes: dict[str, list[str]] = {}
    for record in records:
        if record.placement is not None and record.placement.note:
            notes.setdefault(record.placement.note, []).append(variant_label(record))
    if not notes:
        return []
    lines = ["Placement notes:", ""]
    for note, variants in notes.items():
        lines.append(f"- {', '.join(md_code(v) for v in variants)}: {md_inline(note)}")
    return lines + [""]


FIXED_ORDER = {"variant": 0, "status": 1, "speedup": 6, "verify": 7, "shares": 8, "counts": 9, "switches": 10,
               "size": 11, "export": 12, "note": 13}
"""Where the columns that are no metric stand; the metric columns (`ColumnPlace.order`) fall between them."""


def _metric_keep(column: MetricInfo, extra_index: int) -> float:
    """How long a comment keeps a metric's column: its catalog's `keep`, else an extra column's rule (the
    first one, e.g. the first chip's estimate, beside the median; the others folded first)."""
    place = column.column
    if place is not None and place.keep is not None:
        return place.keep
    return 2.5 if extra_index == 0 else 8.5 + extra_index


def model_columns(records: list[RunRecord]) -> list[Column]:
    """Every column of a model's table, in display order; `priority` says which stay out of the fold."""
    from mlbench.report.lead import ESTIMATED_LATENCY, chips_of

    baseline = baseline_for(records)
    metric_columns = table_columns([name for r in records for name in r.metrics], "markdown")
    cells: dict[str, list[str]] = {}
    chip = next(iter(chips_of(records)), None)
    led: set[str] = set()  # the columns where some row leads with an estimate
    beside = chip is not None and any(  # a row measured here that also has the chip's estimate (Core ML on a Mac)
        (m := r.metrics.get("latency.median")) is not None and m.value is not None and m.source == "measured"
        and (e := r.metrics.get(ESTIMATED_LATENCY + chip)) is not None and e.value is not None for r in records)

    def add(name: str, value: str) -> None:
        cells.setdefault(name, []).append(value)

    for r in records:
        size, export = _artifact(r)
        shares, counts, switches = _placement(r)
        add("variant", md_code(variant_label(r)))
        add("status", STATUS_MARK[r.status])
        for column in metric_columns:
            lead = _lead_cell(r, column, chip)
            if lead is not None:
                led.add(column.name)
            add(column.name, lead if lead is not None else _metric_cell(r, column))
        add("speedup", _speedup(r, baseline))
        add("verify", _verify(r))
        add("shares", shares)
        add("counts", counts)
        add("switches", switches)
        add("size", size)
        add("export", export)
        add("note", _note(r))
    shorts = " / ".join(d.short for d in devices().values())
    fixed = [
        Column("Variant", cells["variant"], priority=0),
        Column("Status", cells["status"], priority=1),
        Column("vs eager", cells["speedup"], right=True, priority=4),
        Column("Verify max_rel", cells["verify"], right=True, priority=5),
        Column(f"{shorts} % of cost", cells["shares"], right=True, priority=6),
        Column(f"{shorts} % of ops", cells["counts"], right=True, priority=10.5),
        Column("Switches", cells["switches"], right=True, priority=10),
        Column("Size", cells["size"], right=True, priority=7),
        Column("Export", cells["export"], right=True, priority=11),
        Column("Note", cells["note"], priority=3, note=True),
    ]
    placed: list[tuple[float, int, Column]] = list(zip(FIXED_ORDER.values(), range(len(fixed)), fixed, strict=True))
    extras = [c for c in metric_columns if c.column is not None and not c.column.always]
    for column in metric_columns:
        place = column.column
        assert place is not None  # table_columns gives only metrics with a column
        keep = _metric_keep(column, extras.index(column) if column in extras else 0)
        if chip is not None and column.name == ESTIMATED_LATENCY + chip:  # the lead chip's estimate: beside a
            keep = 2.5 if beside else 9.5  # measured median (a Mac), else folded (the median column shows it)
        title = place.title or column.label
        if column.name in led:  # which figure an unmeasured row shows, in the header
            title += f" (else {ESTIMATE_MARK}{chip})" if column.name == "latency.median" else f" (else {ESTIMATE_MARK}estimated)"
        placed.append((place.order, len(placed), Column(title, cells[column.name],
                                                        right=True, priority=keep)))
    return [column for _, _, column in sorted(placed, key=lambda item: (item[0], item[1]))]


def render_model_table(model: str, records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    return [*model_table(model, records), *model_details(records, artifacts)]


def model_table(model: str, records: list[RunRecord], max_columns: int = MAX_COLUMNS) -> list[str]:
    """The model's heading and its table (folded columns included): what a comment keeps longest.
    `max_columns`: how many stay out of the fold (the HTML report shows them all)."""
    from mlbench.report.markdown.generation import generation_section  # a generative model's table (else nothing)

    baseline = baseline_for(records)
    lines = [f"### {md_cell(model)}", "", *render_table(model_columns(records), max_columns)]
    generation = generation_section(records)
    vs_eager = (f"_vs eager_: {REFERENCE} median ÷ this median (higher is faster)." if baseline else
                "_vs eager_: see the generation table (decode per token at each prompt length)." if generation else
                f"_vs eager_: no {REFERENCE} baseline ran for this model.")
    return lines + [vs_eager, "", *render_column_notes(records, extra_columns(records)), *placement_legend(records),
                    *estimated_order(records), *generation]


ORDER_LINES = 8  # a PR comment keeps this many order statements per model; the HTML report has them all


def estimated_order(records: list[RunRecord]) -> list[str]:
    """Which variant the estimates say is faster on each chip, and how far that order can be trusted."""
    from mlbench.report.estimate_order import order_statements

    statements = order_statements(records)
    if not statements:
        return []
    lines = [f"_Estimated order_ ({ESTIMATE_MARK}, per chip, each variant against the next slower one; confidence "
             "from how often the calibration's estimates ordered published pairs of the same kinds alike):", ""]
    lines += [f"- {md_cell(s.text())}" for s in statements[:ORDER_LINES]]
    if len(statements) > ORDER_LINES:
        lines.append(f"- … and {len(statements) - ORDER_LINES} more in the HTML report")
    return [*lines, ""]


def placement_legend(records: list[RunRecord]) -> list[str]:
    """What the two placement columns show, when a record has a placement."""
    if not any(r.placement is not None for r in records):
        return []
    return ["_% of cost_: each device's share of the work (the runtime's cost or time per operation; for "
            "estimates, the cost model's), the `placement.<device>` metrics compare checks; _% of ops_: its share "
            "of the compute operations (`placement.count.<device>`).", ""]


def extra_columns(records: list[RunRecord]) -> list[MetricInfo]:
    """The catalog's extra columns (metric families a backend adds) that these records fill."""
    return columns([name for r in records for name in r.metrics])


def model_details(records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    """What follows the table: placement notes, each backend's sections, and where variants lose accuracy."""
    from mlbench.report.localization import localization_section

    return render_placement_notes(records) + render_backend_sections(records, artifacts) + localization_section(records)


def render_backend_sections(records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    """What each backend adds below a model's table (its spec's `report_sections`), for its records."""
    lines: list[str] = []
    for spec in specs().values():
        mine = [r for r in records if r.backend == spec.name]
        for section in spec.report_sections if mine else ():
            lines += load_attr(section)(mine, artifacts)
    return lines


def render_markdown(report: RunReport, *, limit: int | None = COMMENT_LIMIT, full_name: str = FULL_NAME,
                    comparison: Comparison | None = None) -> str:
    """The report; with a `limit`, cut to fit a comment of that many characters (pointing to `full_name`). Its
    first table answers a pull request's question: what changed against the base run (`comparison`), when one
    is given, then which variant to ship per deployment target."""
    from mlbench.report.markdown.summary import comparison_summary, ship_summary
    from mlbench.report.marks import sources_legend

    machine = report.machine
    packages = ", ".join(f"{k} {v}" for k, v in machine.get("packages", {}).items() if v)
    summary = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    latency = report.settings.get("latency", {})
    by_model: dict[str, list[RunRecord]] = {}
    for record in report.records:
        by_model.setdefault(record.model, []).append(record)
    sections = [Section(f"{md_cell(model)} ({len(records)} variants)", model_table(model, records),
                        model_details(records, report.artifacts)) for model, records in by_model.items()]
    first = comparison_summary(comparison, limit // 3 if limit else 10**9) if comparison is not None else []
    first += ship_summary(report.records)
    shown = "\n".join([*first, *(line for s in sections for line in [*s.core, *s.extra])])
    head = [
        f"# mlbench report: {md_cell(report.pipeline.name)}",
        "",
        f"Run `{report.run_id}` started {report.created}"
        + ("" if report.finished else " — **partial: the run was interrupted**") + f". {summary}.",
        "",
        "Machine: " + md_cell(f"{machine.get('os')} {machine.get('os_release')} {machine.get('arch')}, "
                              f"{machine.get('cpu')} ({machine.get('cpu_count')} cores), Python {machine.get('python')}; "
                              f"{packages}."),
        "",
        sources_legend(shown, code=True) + "; – means absent, with the reason in the JSON report. "
        f"Latency: {latency.get('warmup')} warmup calls thrown away, then at least {latency.get('repeats')} calls "
        f"and {latency.get('min_time_s')} s."
        + (f" {LEGEND}" if any(metric_notes(r.metrics) for r in report.records) else ""),
        "",
        *first,
    ]
    if limit is None:
        return "\n".join([*head, *(line for s in sections for line in [*s.core, *s.extra])]).rstrip() + "\n"
    return fit_comment(head, sections, full_name, limit)
