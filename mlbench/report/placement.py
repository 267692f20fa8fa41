"""Markdown for one placement summary (measured or estimated). Pure function, no I/O."""

from __future__ import annotations

from mlbench.plugins.registry import devices as known_devices
from mlbench.records import Placement
from mlbench.report.text import counted, md_cell, md_inline


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def render_placement_markdown(placement: Placement, *, title: str, max_ops: int | None = None) -> str:
    """Fractions per device by count and by cost, switches, the note, and a collapsible per-op table."""
    devices = list(dict.fromkeys([*placement.by_count, *(placement.by_cost or {})]))
    lines = [f"### {md_cell(title)} ({placement.source}: {md_cell(placement.method)})", "",
             "| Device | Compute ops | Cost share |", "|---|---:|---:|"]
    for device in devices:
        cost = (placement.by_cost or {}).get(device)
        known = known_devices().get(device)
        lines.append(f"| {md_cell(known.label if known else device)} | {_pct(placement.by_count.get(device, 0.0))} "
                     f"| {_pct(cost) if placement.by_cost else '–'} |")
    basis = {"estimated_cost": "Core ML's estimated cost", "time": "measured time", "macs": "MACs",
             "roofline": "roofline time (FLOPs and bytes on a reference chip)",
             "flops": "FLOPs (Core ML cost model conventions)"}
    lines += ["", f"{counted(placement.compute_ops, 'compute operation')} ({counted(placement.constants, 'constant')} "
              f"counted apart); {counted(placement.switches, 'device switch', 'device switches')}; cost share by "
              f"{basis.get(placement.cost_basis or '', 'nothing known')}.", ""]
    if placement.note:
        lines += [md_inline(placement.note), ""]
    shown = placement.ops if max_ops is None else placement.ops[:max(0, max_ops)]
    if placement.ops and not shown:  # `inspect --max-layers 0`: the count, never an empty table
        return "\n".join([*lines, f"{counted(len(placement.ops), 'operation')}, not listed (at most 0 asked for).", ""])
    lines += [f"<details><summary>Operations ({len(placement.ops)})</summary>", "",
              "| # | Op | Type | Device | Supported | Cost | Reason |", "|---:|---|---|---|---|---:|---|"]
    for i, op in enumerate(shown, 1):
        supported = md_cell(", ".join(op.supported)) if op.supported else ""
        lines.append(f"| {i} | {md_cell(op.name)} | {md_cell(op.op_type)} | {md_cell(op.device or '?')} | {supported} "
                     f"| {_pct(op.cost)} | {md_cell(op.reason or '')} |")
    if len(shown) < len(placement.ops):
        lines += ["", f"… {len(placement.ops) - len(shown)} more operations not shown."]
    return "\n".join([*lines, "", "</details>", ""])
