"""ExecuTorch's section of the Markdown report: the partition and the slowest calls per variant."""

from __future__ import annotations

from mlbench.metrics import format_ms as fmt_ms
from mlbench.records import RunRecord
from mlbench.report.text import html_text, md_cell

OP_TIME_TOP = 10


def render_op_times(records: list[RunRecord], artifacts: dict[str, dict] | None = None,
                    top: int = OP_TIME_TOP) -> list[str]:
    """Per record: the ops left to portable kernels and, where ETDump ran, the slowest top-level calls
    (a delegate partition or one portable kernel). The JSON report keeps every row."""
    lines: list[str] = []
    for record in records:
        if record.status != "ok":
            continue
        variant = "/".join([record.backend, *record.axes.values()])
        partition = record.details.get("partition") or {}
        left = partition.get("portable_ops") or []
        op_time = record.details.get("op_time")
        if record.placement is not None:
            lines += [f"Partition of <code>{html_text(variant)}</code>: {html_text(_shares(record))}"
                      + (f"; left to portable kernels: {html_text(', '.join(left))}" if left else ""), ""]
        if not op_time:
            continue
        rows = op_time.get("by_call", [])
        lines += [
            f"<details><summary>Per-call time of <code>{html_text(variant)}</code>: {fmt_ms(op_time.get('calls_ms'))} ms "
            f"in calls per run of {fmt_ms(op_time.get('total_ms'))} ms in the method"
            + (f", {fmt_ms(op_time['wall_ms'])} ms per traced call from Python" if op_time.get("wall_ms") else "")
            + f" ({html_text(op_time.get('method'))}, {op_time.get('runs')} runs)</summary>",
            "",
        ]
        lines += [f"| Call (top {min(top, len(rows))} of {len(rows)}) | Runs on | Ops | ms / run | Share |",
                  "|---|---|---|---:|---:|"]
        for row in rows[:top]:
            ops = md_cell(", ".join(row["op_types"]))
            lines.append(f"| {md_cell(row['name'])} | {md_cell(row['device'])} | {ops} | {fmt_ms(row['time_ms'])} "
                         f"| {100 * row['share']:.1f}% |")
        lines += ["", "</details>", ""]
    return lines


def _shares(record: RunRecord) -> str:
    """`xnnpack 75% of ops (99% of FLOPs, 97% of time), portable kernels 25% of ops (1% of FLOPs, 3% of time),
    2 switches`: FLOPs by the Core ML cost model's conventions (`placement.<device>`), time where ETDump ran."""
    placement = record.placement
    assert placement is not None
    flops = ((record.details.get("partition") or {}).get("flops") or {}).get("by_device")
    op_time = record.details.get("op_time") or {}
    timed = op_time.get("by_device_ms") if op_time.get("calls_ms") else None
    parts = []
    for device, share in sorted(placement.by_count.items(), key=lambda kv: -kv[1]):
        name = "portable kernels" if device == "cpu" else device
        costs = ([f"{100 * flops.get(device, 0.0):.0f}% of FLOPs"] if flops else []) + (
            [f"{100 * timed.get(device, 0.0) / op_time['calls_ms']:.0f}% of time"] if timed else [])
        cost = f" ({', '.join(costs)})" if costs else ""
        parts.append(f"{name} {100 * share:.0f}% of ops{cost}")
    return ", ".join(parts) + f", {placement.switches} switch{'' if placement.switches == 1 else 'es'}"
