"""`mlbench calibrate REPORT.json... --out profiles/`: a thin layer over ``calibration.run.calibrate``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    from mlbench.plugins.commands import add_command

    p = add_command(
        subparsers, "calibrate", "fit Core ML estimates to measured Mac runs: one profile per chip and OS",
        "Reads Core ML records measured on a Mac (compute plan and latency) from reports or a history\n"
        "database, fits the latency model's parameters per chip and OS, records where the Mac placed each\n"
        "op signature, and writes PROFILE.yaml files into --out. Use them with `calibration: DIR` on a\n"
        "Core ML target: its estimates and placements then say they come from the profile.")
    p.add_argument("reports", nargs="+", metavar="REPORT", type=Path,
                   help="report.json files, or a history database (.sqlite: every run in it)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write the profiles into")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mlbench.backends.apple.calibration.run import calibrate

    done, left_out = calibrate(args.reports, args.out)
    for item in done:
        print("\n".join(item.lines))
    for line in left_out:
        print(f"left out: {line}")
    return 0
