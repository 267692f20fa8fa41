"""Static analysis of a Core AI asset on any OS that has the wheels:
``AIModelAsset.summary(include_statistics=True)`` gives the functions with their inputs, outputs and states,
the storage-dtype histogram (scalars stored per type) and the op histogram; the sizes are read from disk.

``size.weights`` is the bytes the stored scalars take at their types' widths (a 4-bit index is half a byte),
so compression shows in it even though the asset is MLIR bytecode; ``ops.compute`` counts every op but
``constant``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlbench.errors import ReportableError

PROGRAM_FILE = "main.mlirb"


class NotAnAsset(ReportableError):
    """The path holds no Core AI program."""


def type_bits(name: str) -> int | None:
    """Bits per scalar of a storage type as the summary names it (Float32, UInt4, Float8E4M3FN, UInt1…)."""
    match = re.search(r"(\d+)", name)
    return int(match.group(1)) if match else None


def _io(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "type": kind} for name, kind in pairs]


def analyse_asset(path: Path) -> dict[str, Any]:
    """The asset's summary as plain data (JSON-ready): what reports, `inspect` and the cache keep."""
    from coreai.authoring import AIModelAsset

    path = Path(path)
    if not path.exists():
        raise NotAnAsset(f"{path}: no such file or folder")
    if not (path / PROGRAM_FILE).is_file():
        raise NotAnAsset(f"{path}: not a Core AI asset (no {PROGRAM_FILE} inside)")
    summary = AIModelAsset.load(path).summary(include_statistics=True)
    if summary is None:
        raise NotAnAsset(f"{path}: Core AI found no program in the asset")
    functions = [{"name": name, "inputs": _io(summary.function_inputs(name)),
                  "outputs": _io(summary.function_outputs(name)), "states": _io(summary.function_states(name))}
                 for name in summary.function_names]
    storage = {name: int(count) for name, count in summary.storage_types}
    ops = {name: int(count) for name, count in summary.operation_distribution}
    widths = {name: type_bits(name) for name in storage}
    from mlbench.backends.coreai.ir import graph_ops, load_module
    from mlbench.backends.coreai.layers import layer_rows

    written = graph_ops(load_module(path))
    weight_bits = sum(count * (widths[name] or 0) for name, count in storage.items())
    return {
        "path": str(path),
        "format": "Core AI asset (.aimodel)",
        "compatibility_version": summary._compatibility_version,
        "functions": functions,
        "storage_types": storage,
        "compute_types": list(summary.compute_types),
        "op_histogram": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "graph_ops": written,  # as written in the IR: the histogram above also counts each decomposition (ir)
        "ops_total": sum(ops.values()),
        "compute_ops": sum(count for name, count in ops.items() if name != "constant"),
        "stored_scalars": sum(storage.values()),
        "weight_bytes": (weight_bits + 7) // 8,
        "package_bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
        "layers": layer_rows(path),
    }


def render_asset_markdown(analysis: dict[str, Any], *, title: str, max_ops: int | None = None,
                          max_layers: int | None = None) -> str:
    """The analysis as Markdown: functions with their inputs/outputs/states, storage types, op histogram (the
    summary's, beside the ops as written), and the per-op table with origins (at most `max_layers` rows)."""
    from mlbench.report.text import md_cell, md_code

    lines = [f"#### {md_cell(title)}", "",
             f"{analysis['format']}, compatibility {analysis.get('compatibility_version') or '?'}; "
             f"{analysis['package_bytes']:,} bytes on disk, {analysis['weight_bytes']:,} bytes of stored scalars; "
             f"{analysis['compute_ops']} ops besides {analysis['ops_total'] - analysis['compute_ops']} constants.",
             "", "| Function | Inputs | Outputs | States |", "|---|---|---|---|"]
    for function in analysis["functions"]:
        cells = [", ".join(f"{md_code(i['name'])} {md_cell(i['type'])}" for i in function[key]) or "–"
                 for key in ("inputs", "outputs", "states")]
        lines.append(f"| {md_code(function['name'])} | " + " | ".join(cells) + " |")
    lines += ["", "| Storage type | Scalars | Bytes |", "|---|---:|---:|"]
    for name, count in analysis["storage_types"].items():
        bits = type_bits(name)
        size = f"{(count * bits + 7) // 8:,}" if bits else "?"
        lines.append(f"| {md_cell(name)} | {count:,} | {size} |")
    ops = list(analysis["op_histogram"].items())
    shown = ops if max_ops is None else ops[:max_ops]
    written = analysis.get("graph_ops")
    if written is None:
        lines += ["", f"| Op ({len(shown)} of {len(ops)} kinds) | Count |", "|---|---:|"]
        lines += [f"| {md_code(name)} | {count} |" for name, count in shown]
    else:
        lines += ["", f"| Op ({len(shown)} of {len(ops)} kinds) | Count (summary, decompositions included) | "
                  "As written in the IR |", "|---|---:|---:|"]
        lines += [f"| {md_code(name)} | {count} | {written.get(name, 0)} |" for name, count in shown]
    from mlbench.backends.coreai.layers import render_layers_markdown

    layers = render_layers_markdown(analysis.get("layers") or [], max_rows=max_layers)
    if layers:
        lines += [""] + layers
    return "\n".join(lines) + "\n"
