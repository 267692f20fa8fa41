"""Where the work of a run executes: this machine (exports in parallel processes) or a Dask cluster.

Both run a sweep in two phases so that no timing is ever disturbed by an export: first every
artifact that goes through the cache is built (in parallel), then measurements run strictly one
at a time per machine. Records come back to the coordinator as they finish; it journals them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mlbench.cpus import available_cpus
from mlbench.errors import UserError
from mlbench.records import RunRecord
from mlbench.run.tasks import (
    ExportOutcome,
    Finished,
    WorkContext,
    WorkSpec,
    export_artifact,
    export_task,
    failed_record,
    measure_task,
    run_group,
    warm_task,
)
from mlbench.run.threads import limited_threads

if TYPE_CHECKING:
    from mlbench.matrix import Variant

MEASURE_RESOURCE = "measure"
"""Dask resource every measurement takes one of: workers declare `--resources measure=1`, so a
machine never runs two measurements (or a measurement beside another) at once."""

OnExported = Callable[[ExportOutcome], None]


def default_jobs() -> int:
    """One export process per CPU this process may use (affinity and container quota honoured)."""
    return available_cpus()


class LocalExecutor:
    """Exports in `jobs` worker processes (joblib/loky), measurements in this process, in order."""

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self._warming: list[Any] = []

    def describe(self) -> str:
        return f"local, {self.jobs} export job{'s' if self.jobs != 1 else ''}"

    def _pool(self, exports: int) -> Any:
        from joblib.externals.loky import get_reusable_executor

        return get_reusable_executor(max_workers=min(self.jobs, exports) - 1)

    def warm(self, packages: list[str], exports: int) -> None:
        """Start the worker processes now, each importing `packages` (torch, a converter), while this
        process works out the export order: seconds of imports no longer delay the first export."""
        if self.jobs == 1 or exports < 2:
            return
        pool = self._pool(exports)
        self._warming = [pool.submit(warm_task, packages) for _ in range(min(self.jobs, exports) - 1)]

    def export(self, spec: WorkSpec, ctx: WorkContext, variants: list[Variant], on_done: OnExported) -> None:
        """Build the artifacts of `variants` (one per artifact, longest first) in parallel, reporting each outcome.

        This process takes a share of the exports itself beside `jobs - 1` worker processes (joblib's
        loky pool): it would only wait otherwise, and what it imports and builds now serves the
        measurements that follow. Every process takes the next export in order when it is free, so
        the longest start first and the last to finish is short.
        """
        if self.jobs == 1 or len(variants) < 2:
            return  # exported in order during measurement, in this process: nothing to gain
        from concurrent.futures import FIRST_COMPLETED, Future, wait

        threads = max(1, available_cpus() // self.jobs)  # no oversubscription across processes
        workers = min(self.jobs, len(variants)) - 1
        pool = self._pool(len(variants))
        pending = list(variants)
        in_flight: set[Future[ExportOutcome]] = set()
        with limited_threads(threads):
            while pending or in_flight:
                while pending and len(in_flight) < workers:  # workers take the next ...
                    in_flight.add(pool.submit(export_task, spec, pending.pop(0), threads))
                if pending:  # ... and so does this process
                    on_done(export_artifact(ctx, pending.pop(0)))
                else:
                    wait(in_flight, return_when=FIRST_COMPLETED)
                for future in [f for f in in_flight if f.done()]:
                    in_flight.discard(future)
                    on_done(future.result())

    def measure(self, spec: WorkSpec, ctx: WorkContext, groups: list[list[Variant]], failures: dict[str, str],
                on_stage: Callable[[str, str], None]) -> Iterator[Finished]:
        for group in groups:
            yield from run_group(ctx, group, on_stage, export_failure=failures.get(group[0].id))

    def close(self) -> None:
        pass


class DaskExecutor:
    """Exports anywhere on the cluster; each measurement on a worker holding the resources it needs.

    Artifacts travel by content hash: a worker finds them in a shared cache folder, or builds its
    own copy under the same key.
    """

    def __init__(self, address: str, runs_on: dict[int, str | None]) -> None:
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - distributed is a dependency
            raise UserError(f"the Dask executor needs the 'distributed' package: {exc}") from None
        try:
            self.client = Client(address, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise UserError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
        self.address = address
        self.runs_on = runs_on

    def describe(self) -> str:
        return f"dask at {self.address} ({len(self._workers())} workers)"

    def _workers(self) -> dict[str, Any]:
        return self.client.scheduler_info()["workers"]

    def _resources(self, variant: Variant) -> dict[str, float]:
        resources = {MEASURE_RESOURCE: 1.0}
        hardware = self.runs_on.get(variant.target_index)
        if hardware:
            resources[hardware] = 1.0
        return resources

    def _unplaceable(self, resources: dict[str, float]) -> str | None:
        """Why no worker could ever take a task needing `resources` (it would wait forever)."""
        for name in resources:
            if not any(w.get("resources", {}).get(name, 0) >= 1 for w in self._workers().values()):
                return (f"no worker of the Dask cluster at {self.address} declares the resource '{name}' "
                        f"(start workers with --resources {name}=1)")
        return None

    def warm(self, packages: list[str], exports: int) -> None:
        pass  # Dask workers are long-lived: their imports are paid once, before any run

    def export(self, spec: WorkSpec, ctx: WorkContext, variants: list[Variant], on_done: OnExported) -> None:
        from distributed import as_completed

        futures = [self.client.submit(export_task, spec, v, pure=False) for v in variants]
        for future in as_completed(futures):
            on_done(future.result())

    def measure(self, spec: WorkSpec, ctx: WorkContext, groups: list[list[Variant]], failures: dict[str, str],
                on_stage: Callable[[str, str], None]) -> Iterator[Finished]:
        from distributed import as_completed

        futures = {}
        for group in groups:
            resources = self._resources(group[0])
            why_not = self._unplaceable(resources)
            if why_not:
                for variant in group:
                    yield Finished(failed_record(variant, "skipped", why_not))
                continue
            future = self.client.submit(measure_task, spec, group,
                                        failures.get(group[0].id), resources=resources, pure=False)
            futures[future] = group
            on_stage(group[0].artifact_id, "queued")
        for future in as_completed(list(futures)):
            for item in future.result():
                yield Finished(RunRecord.model_validate(item["record"]),
                               tuple(item["artifact"]) if item["artifact"] else None)

    def close(self) -> None:
        self.client.close()
