"""How a subcommand presents itself, for mlbench's own commands and a backend's (`BackendSpec.commands`):
a one-line summary (in `mlbench --help` and as the first line of `mlbench COMMAND --help`), then details,
with the line breaks they were written with. It lives on the ground floor so a backend adds its commands
without importing the CLI above it."""

from __future__ import annotations

import argparse
from typing import Any


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs keep their lines (lists of exit codes, examples); option help wraps."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)


def add_command(subparsers: Any, name: str, summary: str, details: str = "", **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand with its summary as both the list entry and the description's first line.

    argparse %-formats `help` strings but not descriptions: write `%` in details and `%%` only in
    the help of an argument."""
    description = summary[:1].upper() + summary[1:] + "." + (f"\n\n{details}" if details else "")
    return subparsers.add_parser(name, help=summary, description=description, formatter_class=HelpFormatter, **kwargs)
