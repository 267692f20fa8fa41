"""The Markdown report: one table per model, a row per variant, ready to paste into a PR."""

from __future__ import annotations

from mlbench.records import Metric, RunRecord, RunReport
from mlbench.report.program import render_program_markdown
from mlbench.units import human_bytes

BASELINE = {"backend": "torch", "device": "cpu", "precision": "float32"}
STATUS_MARK = {"ok": "ok", "failed": "**failed**", "skipped": "skipped"}


def fmt_ms(value: float | None) -> str:
    """Milliseconds with the digits that matter at that size; – when absent."""
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt_metric(metric: Metric | None, fmt=fmt_ms) -> str:
    """A figure as text; estimated ones carry `~` so they never pass for measured ones."""
    if metric is None or metric.value is None:
        return "–"
    return ("~" if metric.source == "estimated" else "") + fmt(metric.value)


def baseline_for(records: list[RunRecord]) -> RunRecord | None:
    """The model's eager float32 CPU record, when it ran."""
    for record in records:
        fields = {"backend": record.backend, **record.axes}
        if all(fields.get(k) == v for k, v in BASELINE.items()) and record.status == "ok":
            return record
    return None


def _speedup(record: RunRecord, baseline: RunRecord | None) -> str:
    if baseline is None or record.status != "ok":
        return "–"
    mine, base = record.metrics.get("latency.median"), baseline.metrics.get("latency.median")
    if not mine or not base or mine.value in (None, 0) or base.value is None:
        return "–"
    text = f"{base.value / mine.value:.2f}×"
    return ("~" + text) if "estimated" in (mine.source, base.source) else text


def _verify(record: RunRecord) -> str:
    if record.verify is None:
        return "reference" if "verify" in record.details else "–"
    mark = "" if record.verify.passed else " ✗"
    if record.verify.note:
        mark += " (reference ≈ 0: uninformative)"
    return f"{record.verify.max_rel:.2e}{mark}"


def _note(record: RunRecord) -> str:
    text = record.error or ""
    median = record.metrics.get("latency.median")
    if not text and median is not None and median.value is None:
        text = f"not timed: {median.reason}"
    return text.replace("|", "\\|").replace("\n", " ")


def _artifact(record: RunRecord) -> tuple[str, str]:
    """(size, export) cells: the package size and whether the export came from the cache."""
    info = record.artifact
    if info is None:
        return "–", "–"
    return human_bytes(info.size_bytes), "cached" if info.cache_hit else f"{info.export_seconds:.1f} s"


def _placement(record: RunRecord) -> tuple[str, str]:
    """(`ANE / GPU / CPU %`, switches) cells; estimated placements carry `~`."""
    placement = record.placement
    if placement is None:
        return "–", "–"
    mark = "~" if placement.source == "estimated" else ""
    shares = " / ".join(f"{100 * placement.by_count.get(d, 0.0):.0f}" for d in ("neural_engine", "gpu", "cpu"))
    return f"{mark}{shares}", f"{mark}{placement.switches}"


def render_placement_notes(records: list[RunRecord]) -> list[str]:
    """Each distinct placement note once, with the variants it applies to."""
    notes: dict[str, list[str]] = {}
    for record in records:
        if record.placement is not None and record.placement.note:
            notes.setdefault(record.placement.note, []).append("/".join([record.backend, *record.axes.values()]))
    if not notes:
        return []
    lines = ["Placement notes:", ""]
    for note, variants in notes.items():
        lines.append(f"- {', '.join(f'`{v}`' for v in variants)}: {note}")
    return lines + [""]


def render_programs(records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    """One static-analysis section per distinct artifact (several variants can share one)."""
    from mlbench.backends.coreml.analysis import ProgramAnalysis

    lines: list[str] = []
    seen: set[str] = set()
    for record in records:
        if record.artifact is None or record.artifact.key in seen:
            continue
        program = artifacts.get(record.artifact.key, {}).get("program")
        if program is None:
            continue
        seen.add(record.artifact.key)
        title = f"Program of `{record.artifact_id}` (artifact `{record.artifact.key[:12]}`)"
        lines.append(render_program_markdown(ProgramAnalysis.model_validate(program), title=title, level=4))
    if lines:
        lines.insert(0, "Counts and sizes below are read from the saved package (measured); "
                        "MACs are estimated from operation shapes.\n")
    return lines


OP_TIME_TOP = 10


def render_op_times(records: list[RunRecord], top: int = OP_TIME_TOP) -> list[str]:
    """Per record with measured per-operator time (details["op_time"]): the slowest op types and nodes.

    The JSON report keeps every row; this shows the top `top` of each, in a collapsible block.
    """
    lines: list[str] = []
    for record in records:
        op_time = record.details.get("op_time") if record.status == "ok" else None
        if not op_time:
            continue
        variant = "/".join([record.backend, *record.axes.values()])
        by_type, by_node = op_time.get("by_type", []), op_time.get("by_node", [])
        lines += [
            f"<details><summary>Per-operator time of <code>{variant}</code>: {fmt_ms(op_time.get('total_ms'))} ms "
            f"in kernels per run, mean of {op_time.get('runs')} profiled runs ({op_time.get('method')})</summary>",
            "",
            f"| Op type (top {min(top, len(by_type))} of {len(by_type)}) | Nodes | ms / run | Share | Providers |",
            "|---|---:|---:|---:|---|",
        ]
        for row in by_type[:top]:
            providers = ", ".join(f"{p.removesuffix('ExecutionProvider')} ×{n}" for p, n in row["providers"].items())
            lines.append(f"| {row['op_type']} | {row['nodes']} | {fmt_ms(row['time_ms'])} "
                         f"| {100 * row['share']:.1f}% | {providers} |")
        lines += ["", f"| Node (top {min(top, len(by_node))} of {len(by_node)}) | Op type | Provider | ms / run | Share |",
                  "|---|---|---|---:|---:|"]
        for row in by_node[:top]:
            name = str(row["name"]).replace("|", "\\|")
            lines.append(f"| `{name}` | {row['op_type']} | {str(row['provider']).removesuffix('ExecutionProvider')} "
                         f"| {fmt_ms(row['time_ms'])} | {100 * row['share']:.1f}% |")
        lines += ["", "</details>", ""]
    return lines


def render_model_table(model: str, records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    baseline = baseline_for(records)
    lines = [
        f"### {model}",
        "",
        "| Variant | Status | Median ms | Best ms | p90 ms | vs eager | Verify max_rel | ANE / GPU / CPU % "
        "| Switches | Size | Export | Note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in records:
        variant = "/".join([r.backend, *r.axes.values()])
        size, export = _artifact(r)
        shares, switches = _placement(r)
        lines.append(
            f"| `{variant}` | {STATUS_MARK[r.status]} | {fmt_metric(r.metrics.get('latency.median'))} "
            f"| {fmt_metric(r.metrics.get('latency.best'))} | {fmt_metric(r.metrics.get('latency.p90'))} "
            f"| {_speedup(r, baseline)} | {_verify(r)} | {shares} | {switches} | {size} | {export} | {_note(r)} |"
        )
    baseline_text = "/".join(BASELINE.values())
    lines += ["", f"_vs eager_: {baseline_text} median ÷ this median (higher is faster)."
              if baseline else f"_vs eager_: no {baseline_text} baseline ran for this model.", ""]
    return lines + render_placement_notes(records) + render_op_times(records) + render_programs(records, artifacts)


def render_markdown(report: RunReport) -> str:
    machine = report.machine
    packages = ", ".join(f"{k} {v}" for k, v in machine.get("packages", {}).items() if v)
    summary = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    latency = report.settings.get("latency", {})
    lines = [
        f"# mlbench report: {report.pipeline.name}",
        "",
        f"Run `{report.run_id}` started {report.created}"
        + ("" if report.finished else " — **partial: the run was interrupted**") + f". {summary}.",
        "",
        f"Machine: {machine.get('os')} {machine.get('os_release')} {machine.get('arch')}, {machine.get('cpu')} "
        f"({machine.get('cpu_count')} cores), Python {machine.get('python')}; {packages}.",
        "",
        "All figures are **measured** on this machine unless marked `~` (**estimated** by mlbench's rules); "
        "– means absent, with the reason in the JSON report. "
        f"Latency: {latency.get('warmup')} warmup calls thrown away, then at least {latency.get('repeats')} calls "
        f"and {latency.get('min_time_s')} s.",
        "",
    ]
    by_model: dict[str, list[RunRecord]] = {}
    for record in report.records:
        by_model.setdefault(record.model, []).append(record)
    for model, records in by_model.items():
        lines += render_model_table(model, records, report.artifacts)
    return "\n".join(lines).rstrip() + "\n"
