"""Running a pipeline: the runner, units of work, executors (local pool, Dask), journal, progress.

`from mlbench.run import run` is the Python API behind `mlbench run`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from mlbench.run.runner import run

        return run
    raise AttributeError(f"module 'mlbench.run' has no attribute {name!r}")
