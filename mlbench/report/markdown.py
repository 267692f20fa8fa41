"""The Markdown report: one table per model, a row per variant, ready to paste into a PR."""

from __future__ import annotations

from mlbench.records import Metric, RunRecord, RunReport
from mlbench.report.program import render_program_markdown
from mlbench.units import human_bytes

BASELINE = {"backend": "torch", "device": "cpu", "precision": "float32"}
STATUS_MARK = {"ok": "ok", "failed": "**failed**", "skipped": "skipped"}


def _fmt_ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt_metric(metric: Metric | None, fmt=_fmt_ms) -> str:
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


def render_model_table(model: str, records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    baseline = baseline_for(records)
    lines = [
        f"### {model}",
        "",
        "| Variant | Status | Median ms | Best ms | p90 ms | vs eager | Verify max_rel | Size | Export | Note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in records:
        variant = "/".join([r.backend, *r.axes.values()])
        size, export = _artifact(r)
        lines.append(
            f"| `{variant}` | {STATUS_MARK[r.status]} | {fmt_metric(r.metrics.get('latency.median'))} "
            f"| {fmt_metric(r.metrics.get('latency.best'))} | {fmt_metric(r.metrics.get('latency.p90'))} "
            f"| {_speedup(r, baseline)} | {_verify(r)} | {size} | {export} | {_note(r)} |"
        )
    baseline_text = "/".join(BASELINE.values())
    lines += ["", f"_vs eager_: {baseline_text} median ÷ this median (higher is faster)."
              if baseline else f"_vs eager_: no {baseline_text} baseline ran for this model.", ""]
    return lines + render_programs(records, artifacts)


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
