"""Markdown for a static Core ML program analysis (``ProgramAnalysis``). Pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the report layer only reads the data
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, TensorDescription

from mlbench.report.text import md_cell, md_code
from mlbench.units import human_bytes, human_count

__all__ = ["render_program_markdown"]


def _shape(shape: Sequence[int | None] | None) -> str:
    if shape is None:
        return "?"
    if not shape:
        return "scalar"
    return "×".join("?" if d is None else str(d) for d in shape)


def _io(desc: TensorDescription) -> str:
    parts = [md_code(desc.name)]
    if desc.kind == "image":
        parts.append(md_cell(f"image {_shape(desc.shape)} {desc.dtype or ''}".rstrip()))
    elif desc.kind in ("tensor", "state"):
        label = "" if desc.kind == "tensor" else "state "
        parts.append(md_cell(f"{label}{desc.dtype or '?'} {_shape(desc.shape)}"))
    else:
        parts.append(md_cell(desc.kind))
    if desc.flexible:
        parts.append("(flexible)")
    return " ".join(parts)


def _macs_cell(layer: LayerInfo) -> str:
    return "" if layer.macs is None else f"{layer.macs:,}"


# --- cost model (mlbench/backends/apple/cost) ---
def _cost_row(a: ProgramAnalysis) -> str:
    t = a.totals
    if t.flops is None and t.bytes is None:
        return "n/a"
    parts = [f"{human_count(t.flops)} FLOPs" if t.flops is not None else "FLOPs n/a",
             f"{human_bytes(t.bytes)} read + written" if t.bytes is not None else "bytes n/a"]
    if t.arithmetic_intensity is not None:
        parts.append(f"{t.arithmetic_intensity:.2f} FLOP/byte")
    unknown = sum(1 for layer in a.layers if layer.flops is None)
    if unknown:
        parts.append(f"FLOPs unknown for {unknown} ops")
    return "; ".join(parts)


def _count_cell(value: int | None) -> str:
    return "" if value is None else f"{value:,}"
# --- end cost model ---


def render_program_markdown(
    analysis: ProgramAnalysis, *, title: str | None = None, max_layers: int | None = None, level: int = 3,
    heading: str | None = None,
) -> str:
    """Summary, op-type counts, notes and a collapsible per-layer table for one model."""
    a = analysis
    t = a.totals
    lines: list[str] = [f"{'#' * level} {heading or md_cell(title or a.path)}", ""]  # heading: already Markdown

    kind = f"{a.model_type} (spec {a.spec_version}"
    if a.min_os:
        kind += f", {a.min_os}+"
    if a.opset:
        kind += f"; opset {a.opset}" + (f" = {a.opset_os}" if a.opset_os else "")
    kind += ")"
    weight_ops = ""
    if a.weight_ops:
        weight_ops = " + " + ", ".join(f"{n} {k}" for k, n in a.weight_ops.items())
    if t.macs is None:
        macs = "n/a"
    else:
        macs = f"{t.macs:,} ({human_count(t.macs)}; {human_count(2 * t.macs)} FLOPs)"
        if not t.macs_complete:
            macs = "≥ " + macs + ", some shapes unknown"

    rows = [  # plain text, quoted with md_cell when the table is written
        ("Model", kind),
        ("Precision", a.precision),
        ("Compute ops", f"{t.compute_ops:,}"),
        ("Consts", f"{a.const_count:,}{weight_ops}"),
        ("Parameters", "n/a" if t.params is None else f"{t.params:,} ({human_count(t.params)})"),
        ("Weights as stored", human_bytes(t.weight_bytes)),
        ("MACs (estimated)", macs),
        ("FLOPs, bytes (cost model)", _cost_row(a)),  # cost model
        ("Package size", human_bytes(a.package_size_bytes)),
    ]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {name} | {md_cell(value)} |" for name, value in rows]
    if a.inputs:  # already Markdown: quoted part by part in _io
        lines.append(f"| Inputs | {', '.join(_io(d) for d in a.inputs)} |")
    if a.outputs:
        lines.append(f"| Outputs | {', '.join(_io(d) for d in a.outputs)} |")
    lines.append("")

    if a.op_counts:
        lines += ["| Op type | Count |", "|---|---:|"]
        lines += [f"| {md_cell(op)} | {n:,} |" for op, n in sorted(a.op_counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines.append("")

    if a.notes:
        lines += [f"- {note}" for note in a.notes]
        lines.append("")

    shown = a.layers if max_layers is None else a.layers[: max(0, max_layers)]
    if a.layers and not shown:  # `inspect --max-layers 0`: the count, never an empty table
        lines += [f"{len(a.layers):,} layers, not listed (at most 0 asked for).", ""]
    elif a.layers:
        lines += [f"<details><summary>Layers ({len(a.layers):,})</summary>", ""]
        lines += ["| # | Op | Type | Dtype | Output shape | MACs | FLOPs | Bytes | Weights |",
                  "|---:|---|---|---|---|---:|---:|---:|---|"]
        for i, layer in enumerate(shown, 1):
            name = ("↳ " * layer.depth) + layer.name
            weights = ""
            if layer.weight_bytes:
                weights = human_bytes(layer.weight_bytes)
                if layer.weight_storage:
                    weights += f" {layer.weight_storage}"
            lines.append(
                f"| {i} | {md_cell(name)} | {md_cell(layer.op_type)} | {md_cell(layer.output_dtype or '')} | "
                f"{_shape(layer.output_shape) if layer.output_shape is not None else ''} | "
                f"{_macs_cell(layer)} | {_count_cell(layer.flops)} | {_count_cell(layer.bytes)} | {md_cell(weights)} |"
            )
        if len(shown) < len(a.layers):
            lines += ["", f"… {len(a.layers) - len(shown):,} more layers not shown."]
        lines += ["", "</details>", ""]

    return "\n".join(lines)
