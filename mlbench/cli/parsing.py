"""Options several mlbench commands share (`--format`); how a command presents itself is
`mlbench.plugins.commands`, where backends reach it too."""

from __future__ import annotations

import argparse


def add_format(parser: argparse.ArgumentParser, *choices: str) -> None:
    """`--format` with the text form first (the default)."""
    parser.add_argument("--format", choices=choices, default=choices[0],
                        help=f"output format (default {choices[0]}); json is for scripts and CI")
