"""`mlbench inspect model.aimodel`: a Core AI asset's summary (functions, inputs/outputs, states, storage
types, op histogram), read by Core AI's own `AIModelAsset.summary(include_statistics=True)`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    """Core AI adds no options of its own to `mlbench inspect`."""


def run(args: argparse.Namespace) -> int:
    from mlbench.backends.coreai.analysis import NotAnAsset, analyse_asset, render_asset_markdown
    from mlbench.backends.coreai.availability import unavailable
    from mlbench.errors import UserError

    why = unavailable()
    if why is not None:
        raise UserError(f"{args.path}: cannot read a Core AI asset here: {why}")
    try:
        analysis = analyse_asset(Path(args.path))
    except NotAnAsset as exc:
        raise UserError(str(exc).removeprefix(f"{args.path}: "), file=args.path) from None
    if args.json:
        print(json.dumps(analysis, indent=2))
        return 0
    print(render_asset_markdown(analysis, title=str(args.path), max_layers=args.max_layers))
    return 0
