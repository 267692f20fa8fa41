"""Entry points for Dask workers: each task runs its work in a supervised child of the worker, so a
model that crashes or hangs costs its own variants, never the worker or the sweep."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlbench.matrix import Variant
from mlbench.run.limits import ChildLimits
from mlbench.run.supervisor import ChildPool, export_one, measure_group
from mlbench.run.tasks import ExportOutcome, WorkSpec, failed_record

_IDLE_POOLS: list[ChildPool] = []  # this worker process's child pools not in use by a running task
_LOCK = threading.Lock()


@contextmanager
def _worker_pool() -> Iterator[ChildPool]:
    """A pool for this task alone (a worker may run tasks on several threads); kept for the next task."""
    with _LOCK:
        pool = _IDLE_POOLS.pop() if _IDLE_POOLS else ChildPool()
    pool.load_failures.clear()  # what one task learnt of a model is not another run's
    try:
        yield pool
    finally:
        with _LOCK:
            _IDLE_POOLS.append(pool)


def export_task(spec: WorkSpec, variant: Variant, limits: ChildLimits) -> ExportOutcome:
    """Build one artifact in a supervised child."""
    with _worker_pool() as pool:
        return export_one(pool, spec, variant, limits, None, {})


def measure_task(spec: WorkSpec, variants: list[Variant], export_failure: str | None,
                 limits: ChildLimits) -> list[dict[str, Any]]:
    """Measure one artifact's variants in a supervised child; records as JSON-ready dicts (they cross machines)."""
    if export_failure is not None:
        failed = [failed_record(v, "failed", export_failure) for v in variants]
        return [{"record": r.model_dump(mode="json"), "artifact": None} for r in failed]
    out = []
    with _worker_pool() as pool:
        for finished in measure_group(pool, spec, variants, limits):
            out.append({"record": finished.record.model_dump(mode="json"), "artifact": finished.artifact})
    return out
