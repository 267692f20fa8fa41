"""`mlbench inspect PKG.mlpackage`: the static analysis of any Core ML package, and where its
operations would run for a choice of compute units."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mlbench.backends.coreml.target import ComputeUnits


def configure(parser: argparse.ArgumentParser) -> None:
    """Core ML's options of `mlbench inspect` (light: no coremltools import)."""
    parser.add_argument("--compute-units", choices=ComputeUnits.__args__,  # type: ignore[attr-defined]
                        help="Core ML: also summarise where each operation runs (measured on macOS 14.4+, "
                        "else estimated)")
    parser.add_argument("--verify", action="store_true",
                        help="Core ML: run the program in mlbench's interpreter on seeded inputs and summarise "
                        "its outputs (any OS)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the --verify inputs (default 0)")
    parser.add_argument("--against", metavar="REFERENCE",
                        help="Core ML: where PATH loses accuracy against REFERENCE (the same model's float32 package "
                        "without compression), op by op, on seeded inputs, in mlbench's interpreter (any OS)")


def run(args: argparse.Namespace) -> int:
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.coreml.program_report import render_program_markdown

    if getattr(args, "against", None):
        from mlbench.backends.coreml.localize.inspect_against import inspect_against

        return inspect_against(Path(args.path), Path(args.against), args.seed, as_json=args.json)
    analysis = analyse_package(args.path)
    placement = None
    if args.compute_units:
        from mlbench.backends.coreml.artifact import CoremlArtifact
        from mlbench.backends.coreml.backend import placement_for

        placement = placement_for(CoremlArtifact(Path(args.path), analysis), args.compute_units)
    outputs = emulated_outputs(Path(args.path), args.seed) if args.verify else None
    if args.json:
        data = analysis.model_dump(mode="json")
        if placement is not None:
            data["placement"] = placement.model_dump(mode="json")
        if outputs is not None:
            data["emulated_outputs"] = outputs
        print(json.dumps(data, indent=2))
        return 0
    print(render_program_markdown(analysis, title=str(args.path), max_layers=args.max_layers))
    if outputs is not None:
        print(render_emulated_outputs(outputs))
    if placement is not None:
        from mlbench.report.placement import render_placement_markdown

        print(render_placement_markdown(placement, title=f"Placement with {args.compute_units}",
                                        max_ops=args.max_layers))
    return 0


def emulated_outputs(path: Path, seed: int) -> dict[str, Any]:
    """Run the package in the interpreter on seeded inputs of its declared shapes and types; a summary of
    each output (shape, dtype, range, mean, NaN/inf counts). An op it lacks is one line, not a traceback."""
    import numpy as np

    from mlbench.backends.coreml.emulate import EMULATION_NOTE, UnsupportedOps, emulate
    from mlbench.backends.coreml.seeded_inputs import readable_program, seeded_feeds
    from mlbench.errors import UserError

    program = readable_program(path)
    feeds = seeded_feeds(program, seed, path)
    try:
        result = emulate(program, feeds)
    except UnsupportedOps as exc:
        raise UserError(f"cannot verify: the interpreter lacks {', '.join(exc.ops)}", file=path) from None
    summary: dict[str, Any] = {"seed": seed, "note": EMULATION_NOTE, "run_seconds": result.run_seconds,
                               "outputs": {}}
    for name, array in result.outputs.items():
        values = np.asarray(array, dtype=np.float64)
        finite = values[np.isfinite(values)]
        summary["outputs"][name] = {
            "shape": list(values.shape), "dtype": str(np.asarray(array).dtype),
            "min": float(finite.min()) if finite.size else None, "max": float(finite.max()) if finite.size else None,
            "mean": float(finite.mean()) if finite.size else None,
            "nan": int(np.isnan(values).sum()), "inf": int(np.isinf(values).sum()),
        }
    return summary


def render_emulated_outputs(summary: dict[str, Any]) -> str:
    from mlbench.report.text import md_cell

    lines = [f"### Emulated outputs (seed {summary['seed']}, {summary['run_seconds'] * 1000:.1f} ms)", "",
             summary["note"], "", "| Output | Shape | Dtype | Min | Max | Mean | NaN | Inf |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for name, o in summary["outputs"].items():
        cells = [f"{o[k]:.4g}" if o[k] is not None else "–" for k in ("min", "max", "mean")]
        lines.append(f"| {md_cell(name)} | {o['shape']} | {o['dtype']} | {' | '.join(cells)} | {o['nan']} | {o['inf']} |")
    return "\n".join([*lines, ""])
