"""ONNX Runtime's section of the Markdown report: the slowest operator types and nodes per variant."""

from __future__ import annotations

from mlbench.metrics import format_ms as fmt_ms
from mlbench.records import RunRecord
from mlbench.report.text import html_text, md_cell, md_code

OP_TIME_TOP = 10


def render_op_times(records: list[RunRecord], artifacts: dict[str, dict] | None = None, top: int = OP_TIME_TOP) -> list[str]:
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
            f"<details><summary>Per-operator time of <code>{html_text(variant)}</code>: {fmt_ms(op_time.get('total_ms'))} ms "
            f"in kernels per run, mean of {op_time.get('runs')} profiled runs ({html_text(op_time.get('method'))})</summary>",
            "",
            f"| Op type (top {min(top, len(by_type))} of {len(by_type)}) | Nodes | ms / run | Share | Providers |",
            "|---|---:|---:|---:|---|",
        ]
        for row in by_type[:top]:
            providers = md_cell(", ".join(f"{p.removesuffix('ExecutionProvider')} ×{n}" for p, n in row["providers"].items()))
            lines.append(f"| {md_cell(row['op_type'])} | {row['nodes']} | {fmt_ms(row['time_ms'])} "
                         f"| {100 * row['share']:.1f}% | {providers} |")
        lines += ["", f"| Node (top {min(top, len(by_node))} of {len(by_node)}) | Op type | Provider | ms / run | Share |",
                  "|---|---|---|---:|---:|"]
        for row in by_node[:top]:
            provider = md_cell(str(row["provider"]).removesuffix("ExecutionProvider"))
            lines.append(f"| {md_code(row['name'])} | {md_cell(row['op_type'])} | {provider} "
                         f"| {fmt_ms(row['time_ms'])} | {100 * row['share']:.1f}% |")
        lines += ["", "</details>", ""]
    return lines
