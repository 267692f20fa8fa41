"""The command line: a thin layer over the Python API."""

from mlbench.cli.main import main

__all__ = ["main"]
