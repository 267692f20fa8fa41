"""Where the work of a run executes: child processes of this machine, or a Dask cluster.

Both run a sweep in two phases so that no timing is ever disturbed by an export: first every
artifact that goes through the cache is built (in parallel), then measurements run strictly one
at a time per machine. Locally, a measurement that times nothing on this machine is done in the
first phase, by the child that exported its artifact (`fanout.py`). Every model runs in a
supervised child process (`supervisor.py`), never in the coordinator: a crash, a hang or a runaway
allocation fails its own variants and the sweep goes on. Records come back to the coordinator as
they finish; it journals them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mlbench.cpus import available_cpus
from mlbench.errors import ReportableError, UserError, short_error
from mlbench.records import RunRecord
from mlbench.run.fanout import Work, fan_out
from mlbench.run.limits import ChildLimits
from mlbench.run.supervisor import ChildPool, ask, measure_group
from mlbench.run.tasks import ExportOutcome, Finished, WorkSpec, failed_record

if TYPE_CHECKING:
    from mlbench.matrix import Variant

MEASURE_RESOURCE = "measure"
"""Dask resource every measurement takes one of: workers declare `--resources measure=1`, so a
machine never runs two measurements (or a measurement beside another) at once."""
WORKER_JOIN_S = 30.0
"""How long a run waits for a worker declaring a resource it needs before skipping the variants needing it."""

COUNTS_S = 60.0
"""How long the child counting parameters for the export order may take (past its imports)."""

OnExported = Callable[[ExportOutcome], None]
LimitsOf = Callable[["Variant"], ChildLimits]
OnStarted = Callable[["Variant"], None]


def default_jobs() -> int:
    """One export process per CPU this process may use (affinity and container quota honoured)."""
    return available_cpus()


class LocalExecutor:
    """Exports in up to `jobs` child processes at once, then measurements in one child, in order."""

    measures_untimed_early = True
    """The runner may hand `export` whole groups whose measurement times nothing on this machine."""

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self.pool = ChildPool()
        self.stage_seconds: dict[str, float] = {}

    def describe(self) -> str:
        return f"local, {self.jobs} export job{'s' if self.jobs != 1 else ''}"

    def warm(self, warmups: list[str], exports: int, memory_bytes: int = 0) -> None:
        """Start the export children now, each importing torch and readying the converters (`warmups`),
        while this process works out the export order: seconds of imports no longer delay the first export."""
        if self.jobs == 1 or exports < 2:
            return
        self.pool.prestart(min(self.jobs, exports), memory_bytes, tuple(warmups))

    def model_sizes(self, spec: WorkSpec, models: set[str], memory_bytes: int = 0,
                    export_s: float | None = None) -> dict[str, float]:
        """model → size (`schedule.size_of`), built on the meta device in a child (a user's model never runs in
        the coordinator); {} when that child fails or takes longer than COUNTS_S or `export_s` (a model
        that hangs in its constructor does so here first: it is not loaded again)."""
        if export_s is not None and export_s < COUNTS_S:
            counts = ask(self.pool, ("counts", spec, models), memory_bytes, export_s, "limits.export_s")
        else:
            counts = ask(self.pool, ("counts", spec, models), memory_bytes, COUNTS_S)
        return counts if isinstance(counts, dict) else {}

    def export(self, spec: WorkSpec, work: list[Work], limits_of: LimitsOf, on_done: OnExported,
               on_stage: Callable[[str, str], None], on_started: OnStarted) -> Iterator[Finished]:
        """Build the artifacts of `work` in parallel children, reporting each outcome, and measure the
        groups that come with their work item (yielding their records).

        Every child takes the next item in the order given (longest first, `schedule.py`) when it is
        free, so the longest start first and the last to finish is short.
        """
        if self.jobs == 1 or len(work) < 2:
            return  # exported and measured in order by the measuring child: nothing to gain
        threads = max(1, available_cpus() // self.jobs)  # no oversubscription across processes
        yield from fan_out(self.pool, spec, work, limits_of, self.jobs, threads, on_done, on_stage, on_started,
                           self.stage_seconds)
        self.pool.trim(1)  # measurements run alone

    def measure(self, spec: WorkSpec, groups: list[list[Variant]], failures: dict[str, str], limits_of: LimitsOf,
                on_stage: Callable[[str, str], None], on_started: OnStarted) -> Iterator[Finished]:
        for group in groups:
            failure = failures.get(group[0].id)
            if failure is not None:  # a parallel export already failed: don't pay for it twice
                for variant in group:
                    yield Finished(failed_record(variant, "failed", failure))
                continue
            yield from measure_group(self.pool, spec, group, limits_of(group[0]), on_stage, on_started,
                                     self.stage_seconds)

    def close(self) -> None:
        """Ask the children to exit and reap them in the background: an interpreter holding torch and a
        converter takes a second or two to shut down, which the coordinator spends writing the reports."""
        if self.pool.startup_seconds():  # children's interpreter start and imports, outside every stage
            self.stage_seconds["child_start"] = self.pool.startup_seconds()
            self.stage_seconds["child_start_wall"] = self.pool.startup_wall_seconds()
        self.pool.close_in_background()


class ClusterLost(ReportableError):
    """The coordinator lost its Dask scheduler: the run is unfinished (exit 3), and the variants it was
    waiting for have no record, so `--resume` runs them again."""


class DaskExecutor:
    """Exports anywhere on the cluster; each measurement on a worker holding the resources it needs.

    Artifacts travel by content hash: a worker finds them in a shared cache folder, or builds its
    own copy under the same key.
    """

    measures_untimed_early = False
    """Whether a variant is timed depends on the worker that measures it (a Mac or not), which the
    coordinator cannot know ahead: every measurement waits for the measure resource."""

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
        self._seen: set[str] = set()  # resources some worker has declared this run

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

    def _declared(self, name: str) -> bool:
        return any(w.get("resources", {}).get(name, 0) >= 1 for w in self._workers().values())

    def _unplaceable(self, resources: dict[str, float]) -> str | None:
        """Why no worker could ever take a task needing `resources` (it would wait forever). Workers started
        beside the run (a CI job starting the scheduler, its workers and the run at once) may still be joining:
        a resource no worker declares yet is waited for up to `WORKER_JOIN_S`, once per resource and run."""
        for name in resources:
            if name in self._seen:
                continue
            deadline = time.monotonic() + WORKER_JOIN_S
            while not self._declared(name) and time.monotonic() < deadline:
                time.sleep(0.25)
            if not self._declared(name):
                return (f"no worker of the Dask cluster at {self.address} declares the resource '{name}' "
                        f"(waited {WORKER_JOIN_S:g} s; start workers with --resources {name}=1)")
            self._seen.add(name)
        return None

    def _check_lost(self, exc: Exception) -> None:
        """Raise ClusterLost when `exc` says the scheduler, not a worker or a task, went away (the client
        cancels every future it holds then; this executor never cancels one itself)."""
        from distributed.client import CancelledError

        if isinstance(exc, CancelledError) or self.client.status in ("connecting", "closing", "closed"):
            raise ClusterLost(f"lost the Dask scheduler at {self.address} ({short_error(exc)}); the variants it "
                              "had not finished have no record") from exc

    def warm(self, warmups: list[str], exports: int, memory_bytes: int = 0) -> None:
        pass  # Dask workers are long-lived: their imports are paid once, before any run

    def export(self, spec: WorkSpec, work: list[Work], limits_of: LimitsOf, on_done: OnExported,
               on_stage: Callable[[str, str], None], on_started: OnStarted) -> Iterator[Finished]:
        from distributed import as_completed

        from mlbench.run.remote import export_task

        futures = {self.client.submit(export_task, spec, w.variant, limits_of(w.variant), pure=False): w.variant
                   for w in work}
        for future in as_completed(list(futures)):
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001 - the worker itself was lost: this export failed
                self._check_lost(exc)
                on_done(ExportOutcome(futures[future].id, failure=f"the Dask worker failed: {short_error(exc)}"))
                continue
            on_done(outcome)
        yield from ()  # records come from `measure` only

    def measure(self, spec: WorkSpec, groups: list[list[Variant]], failures: dict[str, str], limits_of: LimitsOf,
                on_stage: Callable[[str, str], None], on_started: OnStarted) -> Iterator[Finished]:
        """Records come back per artifact group when its task ends (`on_started` is not called: the
        coordinator does not see a remote measurement begin)."""
        from distributed import as_completed

        from mlbench.run.remote import measure_task

        futures = {}
        for group in groups:
            resources = self._resources(group[0])
            why_not = self._unplaceable(resources)
            if why_not:
                for variant in group:
                    yield Finished(failed_record(variant, "skipped", why_not))
                continue
            future = self.client.submit(measure_task, spec, group, failures.get(group[0].id), limits_of(group[0]),
                                        resources=resources, pure=False)
            futures[future] = group
            on_stage(group[0].artifact_id, "queued")
        for future in as_completed(list(futures)):
            try:
                items: list[dict[str, Any]] = future.result()
            except Exception as exc:  # noqa: BLE001 - the worker itself was lost: its group failed
                self._check_lost(exc)
                for variant in futures[future]:
                    yield Finished(failed_record(variant, "failed", f"the Dask worker failed: {short_error(exc)}"))
                continue
            for item in items:
                yield Finished(RunRecord.model_validate(item["record"]),
                               tuple(item["artifact"]) if item["artifact"] else None)

    def close(self) -> None:
        self.client.close(timeout=10)  # a lost scheduler does not hold the partial report back
