"""The first table of report.md: what a pull request's reader asks first.

With a base run (`mlbench run --against BASE`): what changed against it (the comparison's verdict and groups,
cut to a third of the comment if it must be). Else, and after it, "which variant to ship": per model and
deployment target (Apple devices, Android, a server's CPU), the candidates no other variant for the same target
beats on latency, size and output error at once (`report.advice`), each with the figure the target's variants
are compared by. A star never crosses targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlbench.metrics import format_ms, source_mark
from mlbench.records import RunRecord
from mlbench.report.advice import Group, Row, ship_groups
from mlbench.report.markdown.layout import Column, table
from mlbench.report.text import md_cell, md_code
from mlbench.stability import suffix
from mlbench.units import human_bytes

if TYPE_CHECKING:
    from mlbench.compare.comparison import Comparison

PER_TARGET = 3
"""Candidates a comment lists per model and target (fastest first); the HTML report charts them all."""
MAX_ROWS = 45
"""Rows of the summary a comment keeps, whatever the number of models (the rest: the full report)."""
FASTEST = "(fastest; none has all three figures)"


def _label(record: RunRecord) -> str:
    return "/".join([record.backend, *record.axes.values()])


def _latency(row: Row, group: Group) -> str:
    if row.latency is None:
        return "–"
    text = source_mark(row.latency_source) + format_ms(row.latency) + " ms"
    if row.latency_source == "measured":  # a timed figure's grade (one for all of a record's timed figures)
        median = row.record.metrics.get("latency.median")
        text += suffix(median.stability if median is not None else None)
    if row.latency_source == "estimated" and group.basis_metric is not None:
        metric = row.record.metrics.get(group.basis_metric)
        text += f" on {group.basis_metric.rsplit('.', 1)[-1]}"
        if metric is not None and metric.band is not None:
            text += f" (×{metric.band.worst_ratio:.2f})"
    return text


def _error(row: Row) -> str:
    if row.error is None:
        return "reference" if "verify" in row.record.details else "–"  # the reference itself, as the model table says
    return f"{source_mark(row.error_source)}{row.error:.2e}" + ("" if row.passed else " ✗")


def _picks(group: Group) -> tuple[list[tuple[Row, bool, list[Row]]], int]:
    """The rows a comment shows for a group (row, starred, the other candidates with the very same three figures:
    compute units an estimate cannot tell apart), and how many candidates it leaves out."""
    twins: dict[tuple, list[Row]] = {}
    for row in group.rows:
        if row.record.variant_id in group.stars:
            twins.setdefault((row.latency, row.size, row.error), []).append(row)
    if twins:
        picks = [(same[0], True, same[1:]) for same in twins.values()]
        return picks[:PER_TARGET], max(len(picks) - PER_TARGET, 0)
    timed = [r for r in group.rows if r.latency is not None]
    return ([(timed[0], False, [])] if timed else []), 0


def ship_summary(records: Sequence[RunRecord]) -> list[str]:
    """The "which variant to ship" table and its notes; nothing when no variant has a figure to compare."""
    by_model: dict[str, list[RunRecord]] = {}
    for record in records:
        by_model.setdefault(record.model, []).append(record)
    cells: dict[str, list[str]] = {k: [] for k in ("model", "target", "variant", "latency", "size", "error")}
    targets: dict[str, str] = {}
    left_out: list[str] = []
    for model, rows in by_model.items():
        for group in ship_groups(rows):
            picks, more = _picks(group)
            if more:
                left_out.append(f"{md_cell(model)} on {group.deployment.label}: {more}")
            for row, star, same in picks:
                if len(cells["model"]) >= MAX_ROWS:
                    left_out.append(f"{md_cell(model)} on {group.deployment.label}")
                    break
                targets[group.deployment.label] = group.deployment.basis
                cells["model"].append(md_cell(model))
                cells["target"].append(group.deployment.label)
                cells["variant"].append(("★ " if star else "") + ", ".join(md_code(_label(r.record)) for r in [row, *same])
                                        + ("" if star else " " + FASTEST))
                cells["latency"].append(_latency(row, group))
                cells["size"].append(human_bytes(row.size) if row.size is not None else "–")
                cells["error"].append(_error(row))
    if not cells["model"]:
        return []
    columns = [Column("Model", cells["model"]), Column("Runs on", cells["target"]),
               Column("Candidate", cells["variant"]), Column("Latency", cells["latency"], right=True),
               Column("Size", cells["size"], right=True), Column("Verify max_rel", cells["error"], right=True)]
    kept = [c for c in columns if any(cell not in ("", "–") for cell in c.cells)]
    lines = ["## Which variant to ship", "", *table(kept), ""]
    notes = ["★: no other variant for the same target is at least as fast, as small and as close to the reference, "
             "and better in one (a star never crosses targets; up to "
             f"{PER_TARGET} per target here, fastest first, all of them in the HTML report; variants with the very same "
             "figures share a row)."]
    notes += [f"_{label}_: {basis}." for label, basis in targets.items()]
    if any(FASTEST in c for c in cells["variant"]):
        notes.append("_(fastest)_: no variant for that target has a latency, a size and a passing max_rel, so none "
                     "is starred; the fastest is named.")
    if left_out:
        notes.append("More candidates in the full report: " + "; ".join(left_out[:12]) + ".")
    return [*lines, " ".join(notes), ""]


def comparison_summary(comparison: Comparison, budget: int) -> list[str]:
    """What changed against the base run (the comparison's Markdown under a heading of its own), cut at a line
    to fit `budget` characters."""
    from mlbench.report.markdown.compare import render_comparison_markdown

    body = render_comparison_markdown(comparison).splitlines()
    body = [("#" + line if line.startswith("### ") else line) for line in body[1:]]  # its own title: ours below
    lines = ["## What changed against the base run", ""]
    size = sum(len(line) + 1 for line in lines)
    for k, line in enumerate(body):
        if size + len(line) + 1 > budget:
            open_folds = sum(x.startswith("<details>") for x in lines) - sum(x == "</details>" for x in lines)
            lines += ["", *(["</details>", ""] * open_folds),
                      f"… {len(body) - k} more lines of the comparison are in the full report "
                      "(or `mlbench compare BASE report.json`).", ""]
            break
        lines.append(line)
        size += len(line) + 1
    return [*lines, ""]
