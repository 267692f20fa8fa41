"""The pipeline: plan, export what goes through the cache (in parallel, measuring there what times
nothing on this machine), then measure every other variant one at a time, journaling each record
the moment it is done.

An interrupted run loses nothing already measured: the journal holds every finished record, a
partial report is written on Ctrl-C (and when the run cannot finish), and `resume=True` runs only
what the journal lacks. User models run only in supervised child processes (`supervisor.py`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid

from mlbench import __version__
from mlbench.config.pipeline_file import Pipeline
from mlbench.errors import UserError, os_reason, short_error
from mlbench.machine import snapshot, with_devices
from mlbench.machine_load import LoadSample, load_between, sample
from mlbench.matrix import Plan, expand
from mlbench.plugins.registry import backend_class
from mlbench.records import PipelineInfo, RunRecord, RunReport
from mlbench.report.fit import fit_record
from mlbench.run.executors import DaskExecutor, LocalExecutor
from mlbench.run.journal import Journal
from mlbench.run.limits import ChildLimits, limits_for
from mlbench.run.lock import ReportLock
from mlbench.run.progress import Progress
from mlbench.run.resume import fingerprint, resume
from mlbench.run.signals import Stopped, signals_deferred
from mlbench.run.tasks import ExportOutcome, Finished, WorkContext, WorkSpec, utc_now, with_failure_details
from mlbench.run.work import work_summary
from mlbench.store.cache import ArtifactCache

log = logging.getLogger("mlbench.run")

EXIT_UNFINISHED = 3
"""Exit code of a run that could not finish (its partial report is written); 1 is a finished run
with failed variants."""


class RunUnfinished(UserError):
    """The run stopped before every variant had a record: the partial report and the journal stay."""

    exit_code = EXIT_UNFINISHED


class Runner:
    def __init__(self, pipeline: Pipeline, progress: Progress | None = None, *, jobs: int = 1,
                 executor: str | None = None, resume: bool = False, retry_crashed: bool = False) -> None:
        self.pipeline = pipeline
        self.config = pipeline.config
        self.progress = progress or Progress()
        self.plan = Plan(expand(self.config))
        self.spec = WorkSpec(config=self.config.model_dump(mode="json"), base_dir=str(pipeline.base_dir),
                             cache_dir=str(pipeline.cache_dir))
        self.cache = ArtifactCache(pipeline.cache_dir)
        self.journal = Journal(pipeline.report_dir / "journal.jsonl")
        self.resume = resume
        self.resume_note: str | None = None  # what a resume reused, said once the progress starts
        self.retry_crashed = retry_crashed
        self.fingerprints = {v.id: fingerprint(self.config, v) for v in self.plan.variants}
        self.stage_seconds: dict[str, float] = {"load": 0.0, "export": 0.0, "measure": 0.0}
        self.executor_address = executor or (self.config.executor.address if self.config.executor.kind == "dask"
                                             else None)
        self.jobs = jobs
        self.run_id = uuid.uuid4().hex[:12]
        self.created = utc_now()
        self.records: dict[str, RunRecord] = {}
        self.reused: frozenset[str] = frozenset()  # variants whose records a resume took from the journal
        self.built_keys: set[str] = set()  # artifacts this run built ahead of measuring them
        self.artifacts: dict[str, dict] = {}
        self.measure_load: tuple[LoadSample, LoadSample | None] | None = None  # the measurement phase's window
        self.outcomes: dict[str, ExportOutcome] = {}  # by the first variant of the group an export was built for
        self.group_of: dict[str, str] = {}  # variant id → its group's first variant id

    # -- bookkeeping -------------------------------------------------------------------------

    def _finish(self, finished: Finished) -> None:
        """Keep the record and write it to the journal (flushed) before anything else happens; a record
        that breaks the report schema is kept failed, with the schema error as its reason."""
        first = self.group_of.get(finished.record.variant_id)
        finished.record = fit_record(with_failure_details(finished.record, self.outcomes.get(first or "")))
        info = finished.record.artifact
        if info is not None and info.key in self.built_keys:  # found in the cache, but built by this run
            finished.record.artifact = info.model_copy(update={"cache_hit": False})
        if finished.artifact is not None:
            key, details = finished.artifact
            self.artifacts[key] = details
            self.journal.artifact(key, details)
        self.records[finished.record.variant_id] = finished.record
        self.journal.record(finished.record, self.fingerprints.get(finished.record.variant_id))
        self.progress.record(finished.record, len(self.records), len(self.plan.variants))

    def _started(self, variant) -> None:
        """Journal that a measurement begins: if the run dies now, a resume knows which variant it was."""
        self.journal.started(variant.id, self.fingerprints.get(variant.id), utc_now())

    def _limits(self, variant) -> ChildLimits:
        return limits_for(self.config, variant)

    def _start_journal(self) -> None:
        header = {"run_id": self.run_id, "created": self.created, "pipeline": str(self.pipeline.path),
                  "pipeline_sha256": self.pipeline.sha256, "variants": len(self.plan.variants)}
        if not self.resume:
            self.journal.start(header)
            return
        contents = self.journal.load()
        self.run_id, self.created = contents.header["run_id"], contents.header["created"]
        found = resume(contents, self.plan.variants, self.config, self.pipeline.sha256,
                       retry_crashed=self.retry_crashed)
        self.records.update(found.kept)
        self.reused = frozenset(found.kept)
        self.resume_note = (f"resuming: {len(found.kept)} finished record{'s' if len(found.kept) != 1 else ''} "
                            f"reused from {self.journal.path}")
        self.artifacts.update(contents.artifacts)
        self.journal.resumed({"at": utc_now(), "reused": len(self.records), "pipeline_sha256": self.pipeline.sha256})
        if found.changed:
            log.warning("resuming: %d of the journal's records are measured again, as what shaped them changed "
                        "in %s", found.changed, self.pipeline.path.name)
        for record in found.crashed:
            self.records[record.variant_id] = record
            self.journal.record(record, self.fingerprints.get(record.variant_id))

    # -- the run -------------------------------------------------------------------------------

    def _executor(self):
        if self.executor_address:
            runs_on = {i: t.runs_on for i, t in enumerate([*self.config.targets, *self.config.include])}
            return DaskExecutor(self.executor_address, runs_on)
        return LocalExecutor(self.jobs)

    def _first_phase(self, executor: LocalExecutor | DaskExecutor, groups: list[list]) -> list:
        """The export phase's work, one item per artifact built through the cache, in the order to start
        them. On several local cores, an item carries its whole group when none of its variants is timed
        on this machine: the exporting child measures it too (`fanout.py`)."""
        from mlbench.run.fanout import Work

        cached = {g[0].id: g for g in groups if backend_class(g[0].backend).cached_export}
        early: set[str] = set()
        if self.jobs > 1 and executor.measures_untimed_early:
            ctx = WorkContext(self.config, self.pipeline.base_dir, self.cache)
            early = {first for first, g in cached.items() if not any(ctx.backend(v).measure_times(v) for v in g)}
        to_export = [g[0] for g in cached.values()]
        if len(to_export) > 1 and self.jobs > 1 and isinstance(executor, LocalExecutor):
            to_export = self._order_exports(executor, to_export)
        return [Work(v, cached[v.id] if v.id in early else None) for v in to_export]

    def _order_exports(self, executor: LocalExecutor, to_export: list) -> list:
        """Longest first (`schedule.py`), while the export children start and import torch and the
        converters; the model sizes that may decide the order are taken in one of those children."""
        from mlbench.plugins.registry import specs
        from mlbench.run.schedule import longest_first

        limits = self._limits(to_export[0])
        memory = limits.memory_bytes
        executor.warm([p for b in {v.backend for v in to_export} for p in specs()[b].warmups()], len(to_export),
                      memory)
        history = self.pipeline.history_path if self.config.history.enabled else None
        return longest_first(to_export, self.config, self.pipeline.base_dir, history,
                             sizes=lambda models: executor.model_sizes(self.spec, models, memory, limits.export_s))

    def _cache_writable(self) -> bool:
        """False, with one warning, when the cache cannot be written (a read-only filesystem): the variants that
        need no cache still run, and those that export through it fail with one line each."""
        try:
            self.cache.claim()
            return True
        except OSError as exc:
            log.warning("the cache cannot be written (%s): variants that export through it fail, the others run",
                        failure_line(exc))
            return False

    def run(self) -> RunReport:
        self.pipeline.report_dir.mkdir(parents=True, exist_ok=True)
        writable = self._cache_writable()  # a cache folder that is not mlbench's: one line, before the journal
        self._start_journal()
        if writable:
            self.cache.clean_stale_builds()
        todo = [v for v in self.plan.variants if v.id not in self.records]
        groups = Plan(todo).artifact_groups()
        self.group_of = {v.id: group[0].id for group in groups for v in group}
        executor = self._executor()
        if self.resume_note:
            self.progress.note(self.resume_note)
        self.progress.start(len(self.plan.variants), done=len(self.records))
        try:
            work = self._first_phase(executor, groups)
            for item in work:
                self.progress.stage(item.variant.artifact_id, "queued")
            failures: dict[str, str] = {}

            def exported(outcome: ExportOutcome) -> None:
                if outcome.failure:
                    failures[outcome.variant_id] = outcome.failure
                    self.outcomes[outcome.variant_id] = outcome
                if outcome.built_key:
                    self.built_keys.add(outcome.built_key)
                self.progress.stage(outcome.variant_id, "exported")

            for finished in executor.export(self.spec, work, self._limits, exported, self.progress.stage,
                                            self._started):
                self._finish(finished)
            timed = [g for g in groups if not all(v.id in self.records for v in g)]
            self.measure_load = (sample(), None)
            for finished in executor.measure(self.spec, timed, failures, self._limits, self.progress.stage,
                                             self._started):
                self._finish(finished)
            self._remeasure(executor, {v.id for v in todo})
            self.measure_load = (self.measure_load[0], sample())
        finally:
            self.progress.stop()
            executor.close()
            for name, value in getattr(executor, "stage_seconds", {}).items():
                self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + value
        return self.report(finished=True)

    def _remeasure(self, executor: LocalExecutor | DaskExecutor, measured: set[str]) -> None:
        """This run's suspect figures measured again while `latency.retry_s` lasts (`retry.py`)."""
        from mlbench.run.retry import history_medians, remeasure
        from mlbench.store.history import machine_key

        history = (history_medians(self.pipeline.history_path, self.config.name, machine_key(snapshot()))
                   if self.config.history.enabled else {})
        variants = {v.id: v for v in self.plan.variants}

        def measure(variant_id: str):
            for finished in executor.measure(self.spec, [[variants[variant_id]]], {}, self._limits,
                                             self.progress.stage, self._started):
                yield finished.record

        changed = remeasure({vid: r for vid, r in self.records.items() if vid in measured}, history,
                            self.config.latency.retry_s, measure, self.progress.note)
        for record in changed.values():
            self._finish(Finished(record))

    def report(self, *, finished: bool) -> RunReport:
        order = {v.id: i for i, v in enumerate(self.plan.variants)}
        records = sorted(self.records.values(), key=lambda r: order.get(r.variant_id, len(order)))
        machine = with_devices(snapshot(), records)  # the connected devices its records were measured on
        if self.measure_load is not None:  # how busy the machine was while this run measured
            start, end = self.measure_load
            machine["load"] = load_between(start, end or sample(), "measurement")
        return RunReport(
            mlbench_version=__version__,
            run_id=self.run_id,
            created=self.created,
            finished=utc_now() if finished else None,
            pipeline=PipelineInfo(name=self.config.name, path=str(self.pipeline.path), sha256=self.pipeline.sha256),
            machine=machine,
            settings={"latency": self.config.latency.model_dump(mode="json"),
                      "memory": self.config.memory.model_dump(mode="json"),
                      "verify": self.config.verify.model_dump(mode="json"), "seed": self.config.seed},
            records=records,
            artifacts={r.artifact.key: self.artifacts[r.artifact.key] for r in records
                       if r.artifact is not None and r.artifact.key in self.artifacts},
            stage_seconds={k: round(v, 6) for k, v in self.stage_seconds.items()},
            summary={s: sum(r.status == s for r in records) for s in ("ok", "failed", "skipped")},
            work=work_summary(records, self.reused),
        )


def run(pipeline: Pipeline, progress: Progress | None = None, *, jobs: int = 1, executor: str | None = None,
        resume: bool = False, retry_crashed: bool = False, against: RunReport | None = None) -> RunReport:
    """Run a pipeline and write its reports; the Python API behind `mlbench run`.

    jobs: export processes at once (1: each artifact is exported by the child that measures it).
    executor: a Dask scheduler address (`tcp://host:8786`) overriding the pipeline's `executor:`.
    resume: reuse the journal's records whose variants and inputs are unchanged and run the rest.
    retry_crashed: with resume, measure again a variant the run died on twice.
    against: a base run; the reports open with what changed against it.
    Raises RunUnfinished (exit code 3) after writing the partial report when the run cannot finish, and
    NothingCanRun (exit code 2, before anything is written) when no variant has the packages it needs.
    """
    from mlbench.report import write_reports
    from mlbench.run.preflight import check_runnable

    if executor is None and pipeline.config.executor.kind == "local":  # a cluster's workers have their own packages
        check_runnable(pipeline, expand(pipeline.config))  # nothing can run: stop before touching anything
    with ReportLock(pipeline.report_dir):
        runner = Runner(pipeline, progress, jobs=jobs, executor=executor, resume=resume,
                        retry_crashed=retry_crashed)
        try:
            report = runner.run()
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (`Stopped`): one path, the partial report first
            stopped = exc if isinstance(exc, Stopped) else Stopped()
            stopped.partial_written, stopped.why_not = _write_partial_safely(runner, pipeline)
            if stopped is exc:
                raise
            raise stopped from exc
        except UserError:  # a mistake found on the way (e.g. no journal to resume): nothing to report
            raise
        except Exception as exc:  # whatever stopped the run, the finished records are written before it re-raises
            log.debug("the run could not finish", exc_info=True)
            written, why_not = _write_partial_safely(runner, pipeline)
            where = (f"the partial report and the journal are in {pipeline.report_dir}" if written else
                     f"{why_not}; the finished records are in the journal in {pipeline.report_dir}")
            raise RunUnfinished(f"the run could not finish: {failure_line(exc)}; {where} (`--resume` goes on from "
                                "there)") from exc
        try:
            with signals_deferred():  # a Ctrl-C now waits for the reports: never one format new, another old
                write_reports(report, pipeline, against=against)
        except OSError as exc:
            raise RunUnfinished(f"the reports could not be written: {failure_line(exc)}; every record is in the "
                                f"journal in {pipeline.report_dir} (`--resume` writes the reports from it)") from None
    if pipeline.config.history.enabled:  # after the reports: a history failure never loses a report
        from mlbench.store.history import record_run

        try:
            record_run(report, pipeline.path, pipeline.history_path)
        except Exception as exc:  # noqa: BLE001 - one warning line, the run stands
            why = str(exc) if isinstance(exc, UserError) else f"{pipeline.history_path}: {short_error(exc)}"
            logging.getLogger("mlbench.store.history").warning("run not added to the history: %s", why)
    return report


def failure_line(exc: BaseException) -> str:
    """What stopped the run, on one line: an operating system's error as `PATH: reason (ENOSPC)`."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {os_reason(exc)}" if exc.filename else os_reason(exc)
    return str(exc) if isinstance(exc, UserError) else short_error(exc)


def _write_partial_safely(runner: Runner, pipeline: Pipeline) -> tuple[bool, str | None]:
    """Write the partial report (signals held back meanwhile); (True, None) when it was written, else False and
    why not (the previous, fuller reports were kept, or the disk refused: the journal still holds the records)."""
    with signals_deferred():
        try:
            if write_partial(runner.report(finished=False), pipeline):
                return True, None
            return False, "the previous reports, holding more records, are kept"
        except (OSError, UserError) as exc:
            why = f"no partial report could be written ({failure_line(exc)})"
            log.warning("%s", why)
            return False, why


def write_partial(report: RunReport, pipeline: Pipeline) -> bool:
    """The reports of a run that could not finish, unless they would replace a report holding more records
    (a run that died early, or a damaged journal, never wipes the previous report); True when written."""
    from mlbench.report import write_reports
    from mlbench.run.journal import open_own

    previous = 0
    try:
        with open(open_own(pipeline.report_dir / "report.json", os.O_RDONLY), "rb") as handle:
            records = json.loads(handle.read()).get("records")
        previous = len(records) if isinstance(records, list) else 0
    except (OSError, UserError, ValueError, AttributeError):
        pass  # none there, or nothing worth keeping
    if previous > len(report.records):
        log.warning("the previous reports in %s are kept: they hold %d records, this unfinished run %d (its "
                    "records are in the journal)", pipeline.report_dir, previous, len(report.records))
        return False
    write_reports(report, pipeline)
    return True
