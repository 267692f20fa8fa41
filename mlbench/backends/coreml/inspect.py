"""`mlbench inspect PKG.mlpackage`: the static analysis of any Core ML package, and where its
operations would run for a choice of compute units."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlbench.backends.coreml.target import ComputeUnits


def configure(parser: argparse.ArgumentParser) -> None:
    """Core ML's options of `mlbench inspect` (light: no coremltools import)."""
    parser.add_argument("--compute-units", choices=ComputeUnits.__args__,  # type: ignore[attr-defined]
                        help="Core ML: also summarise where each operation runs (measured on macOS 14.4+, "
                        "else estimated)")


def run(args: argparse.Namespace) -> int:
    from mlbench.backends.coreml.analysis import analyse_package
    from mlbench.report.program import render_program_markdown

    analysis = analyse_package(args.path)
    placement = None
    if args.compute_units:
        from mlbench.backends.coreml.artifact import CoremlArtifact
        from mlbench.backends.coreml.backend import placement_for

        placement = placement_for(CoremlArtifact(Path(args.path), analysis), args.compute_units)
    if args.json:
        data = analysis.model_dump(mode="json")
        if placement is not None:
            data["placement"] = placement.model_dump(mode="json")
        print(json.dumps(data, indent=2))
        return 0
    print(render_program_markdown(analysis, title=str(args.path), max_layers=args.max_layers))
    if placement is not None:
        from mlbench.report.placement import render_placement_markdown

        print(render_placement_markdown(placement, title=f"Placement with {args.compute_units}",
                                        max_ops=args.max_layers))
    return 0
