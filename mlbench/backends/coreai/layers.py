"""The per-op table of a Core AI asset: each compute op of each function as written in the IR, with its output,
FLOPs and bytes by Core ML's cost model where the op maps onto a Core ML op (``estimate``), and — what Core ML
cannot give — its origin in the user's model from the debug info (``ir.origin``: the torch node, the user's
file:line, the module stack)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlbench.backends.coreai.estimate import _label, cost_layers
from mlbench.backends.coreai.ir import origin


def layer_rows(asset: Path) -> list[dict[str, Any]]:
    """One row per compute op (constants and rebuilt compressed weights left out), function by function."""
    from coreai.authoring import AIModelAsset

    program = AIModelAsset.load(Path(asset)).program  # kept referenced while its graphs are walked
    summary = AIModelAsset.load(Path(asset)).summary(include_statistics=False)
    rows: list[dict[str, Any]] = []
    for function in (summary.function_names if summary else ["main"]):
        graph = program._get_graph(function)
        if graph is None:
            continue
        layers, ops, _, _ = cost_layers(graph)
        for layer, op in zip(layers, ops, strict=True):
            row: dict[str, Any] = {"function": function, "op": _label(op), "as": layer.op_type or None,
                                   "dtype": layer.output_dtype, "shape": layer.output_shape,
                                   "flops": layer.flops, "bytes": layer.bytes}
            row.update(origin(op.location))
            rows.append(row)
    return rows


def render_layers_markdown(rows: list[dict[str, Any]], *, max_rows: int | None = None) -> list[str]:
    """The per-op table (Markdown lines): op, Core ML counterpart, output, FLOPs, bytes, torch node, source
    line, module stack."""
    from mlbench.report.text import md_cell, md_code

    if not rows:
        return []
    shown = rows if max_rows is None else rows[:max(0, max_rows)]
    if not shown:  # `inspect --max-layers 0`: the count, never an empty table
        return [f"{len(rows):,} ops as written in the IR, not listed (at most 0 asked for)."]
    several = len({row["function"] for row in rows}) > 1
    lines = [f"Ops as written in the IR ({len(rows)}; FLOPs and bytes by Core ML's cost model where the op maps onto "
             "a Core ML op; origin from the asset's debug info):", "",
             "| # | " + ("Function | " if several else "") + "Op | Priced as | Output | FLOPs | Bytes | Torch node | "
             "Source | Module |", "|---:|" + ("---|" if several else "") + "---|---|---|---:|---:|---|---|---|"]
    for index, row in enumerate(shown, 1):
        shape = "×".join("?" if d is None else str(d) for d in row.get("shape") or [])
        output = " ".join(part for part in (row.get("dtype") or "", shape) if part)
        source = row.get("source", "")
        cells = [str(index)] + ([md_code(row["function"])] if several else []) + [
            md_code(row["op"]), md_cell(row.get("as") or "–"), md_cell(output),
            "" if row.get("flops") is None else f"{row['flops']:,}", "" if row.get("bytes") is None else f"{row['bytes']:,}",
            md_cell(", ".join(row.get("torch", []))), md_cell(_short_source(source)), md_cell(row.get("module_stack", ""))]
        lines.append("| " + " | ".join(cells) + " |")
    if len(shown) < len(rows):
        lines += ["", f"… {len(rows) - len(shown):,} more ops not shown."]
    return lines


def _short_source(source: str) -> str:
    """``/path/to/model.py:34`` → ``model.py:34`` (the full path stays in the data)."""
    return Path(source).name if source else ""
