"""The pipeline: plan, build each model once, export each artifact once, measure each variant.

Each finished record is appended to a JSONL journal in the report folder as it completes, so an
interrupted run loses nothing already measured; the reports are written at the end (or, on
Ctrl-C, a partial one).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from mlbench import __version__
from mlbench.backends import backend_class
from mlbench.backends.base import Backend, VariantSkipped
from mlbench.cache import ArtifactCache
from mlbench.config import Pipeline
from mlbench.errors import short_error
from mlbench.machine import snapshot
from mlbench.matrix import Plan, Variant, expand
from mlbench.records import PipelineInfo, RunRecord, RunReport


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Progress:
    """Callbacks for a front end; the runner itself prints nothing."""

    on_stage: Callable[[str, str], None] = lambda subject, stage: None
    on_record: Callable[[RunRecord, int, int], None] = lambda record, done, total: None


@dataclass
class RunState:
    pipeline: Pipeline
    plan: Plan
    run_id: str
    created: str
    records: list[RunRecord] = field(default_factory=list)
    artifacts: dict[str, dict] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=lambda: {"load": 0.0, "export": 0.0, "measure": 0.0})

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[stage] += time.perf_counter() - t0

    @property
    def journal_path(self) -> Path:
        return self.pipeline.report_dir / "journal.jsonl"


def _record(variant: Variant, status: str, started: str, t0: float, **fields) -> RunRecord:
    return RunRecord(
        variant_id=variant.id, model=variant.model, backend=variant.backend, axes=dict(variant.axes),
        artifact_id=variant.artifact_id, status=status, started=started,
        seconds=round(time.perf_counter() - t0, 6), **fields,
    )


class Runner:
    def __init__(self, pipeline: Pipeline, progress: Progress | None = None) -> None:
        self.pipeline = pipeline
        self.config = pipeline.config
        self.progress = progress or Progress()
        self.plan = Plan(expand(self.config))
        self.state = RunState(pipeline, self.plan, run_id=uuid.uuid4().hex[:12], created=utc_now())
        self._backends: dict[int, Backend] = {}
        self.cache = ArtifactCache(pipeline.cache_dir)

    def _backend(self, variant: Variant) -> Backend:
        if variant.target_index not in self._backends:
            targets = [*self.config.targets, *self.config.include]
            target = targets[variant.target_index]
            self._backends[variant.target_index] = backend_class(target.backend)(target, self.config, self.cache)
        return self._backends[variant.target_index]

    def _finish(self, record: RunRecord) -> None:
        """Keep the record and append it to the journal, flushed to disk before going on."""
        self.state.records.append(record)
        with open(self.state.journal_path, "a", encoding="utf-8") as journal:
            journal.write(record.model_dump_json() + "\n")
            journal.flush()
            os.fsync(journal.fileno())
        self.progress.on_record(record, len(self.state.records), len(self.plan.variants))

    def run(self) -> RunReport:
        self.pipeline.report_dir.mkdir(parents=True, exist_ok=True)
        self.state.journal_path.write_text("", encoding="utf-8")
        for model_name, variants in self.plan.by_model().items():
            self._run_model(model_name, variants)
        return self.report(finished=True)

    def _run_model(self, model_name: str, variants: list[Variant]) -> None:
        from mlbench.models import ModelLoadError, load_model

        spec = next(m for m in self.config.models if m.name == model_name)
        started, t0 = utc_now(), time.perf_counter()
        self.progress.on_stage(model_name, "load")
        try:
            with self.state.timed("load"):
                model = load_model(spec, self.config.seed, self.pipeline.base_dir)
        except Exception as exc:  # a model that cannot be built fails its variants, not the sweep
            message = str(exc) if isinstance(exc, ModelLoadError) else short_error(exc)
            for variant in variants:
                self._finish(_record(variant, "failed", started, t0, error=f"model: {message}"))
            return

        groups = Plan(variants).artifact_groups()
        for group in groups:
            self._run_artifact(model, group)

    def _run_artifact(self, model, group: list[Variant]) -> None:
        backend = self._backend(group[0])
        started, t0 = utc_now(), time.perf_counter()
        self.progress.on_stage(group[0].artifact_id, "export")
        try:
            with self.state.timed("export"):
                exported = backend.export(model, group[0])
        except VariantSkipped as exc:
            for variant in group:
                self._finish(_record(variant, "skipped", started, t0, error=str(exc)))
            return
        except Exception as exc:  # a failed export fails its variants, not the sweep
            message = f"export: {short_error(exc)}"
            for variant in group:
                self._finish(_record(variant, "failed", started, t0, error=message))
            return
        if exported.info is not None and exported.details:
            self.state.artifacts[exported.info.key] = exported.details
        for variant in group:
            self._measure(backend, model, exported, variant)

    def _measure(self, backend: Backend, model, exported, variant: Variant) -> None:
        started, t0 = utc_now(), time.perf_counter()
        self.progress.on_stage(variant.id, "measure")
        common = {"artifact": exported.info}
        try:
            with self.state.timed("measure"):
                result = backend.measure(model, exported, variant)
        except VariantSkipped as exc:
            self._finish(_record(variant, "skipped", started, t0, error=str(exc), **common))
            return
        except Exception as exc:
            self._finish(_record(variant, "failed", started, t0, error=f"measure: {short_error(exc)}", **common))
            return
        status, error = "ok", None
        if result.verify is not None and not result.verify.passed:
            status = "failed"
            error = (f"verify: max_rel {result.verify.max_rel:.3g} exceeds the tolerance "
                     f"{result.verify.tolerance:.3g}")
        self._finish(_record(
            variant, status, started, t0, error=error, metrics=result.metrics, latency=result.latency,
            verify=result.verify, placement=result.placement, details=result.details if exported.info else {**exported.details, **result.details},
            **common,
        ))

    def report(self, *, finished: bool) -> RunReport:
        records = self.state.records
        return RunReport(
            mlbench_version=__version__,
            run_id=self.state.run_id,
            created=self.state.created,
            finished=utc_now() if finished else None,
            pipeline=PipelineInfo(name=self.config.name, path=str(self.pipeline.path), sha256=self.pipeline.sha256),
            machine=snapshot(),
            settings={"latency": self.config.latency.model_dump(mode="json"),
                      "verify": self.config.verify.model_dump(mode="json"), "seed": self.config.seed},
            records=records,
            artifacts={r.artifact.key: self.state.artifacts[r.artifact.key] for r in records
                       if r.artifact is not None and r.artifact.key in self.state.artifacts},
            stage_seconds={k: round(v, 6) for k, v in self.state.stage_seconds.items()},
            summary={s: sum(r.status == s for r in records) for s in ("ok", "failed", "skipped")},
        )


def run(pipeline: Pipeline, progress: Progress | None = None) -> RunReport:
    """Run a pipeline and write its reports; the Python API behind `mlbench run`."""
    from mlbench.report import write_reports

    runner = Runner(pipeline, progress)
    try:
        report = runner.run()
    except KeyboardInterrupt:
        write_reports(runner.report(finished=False), pipeline)
        raise
    write_reports(report, pipeline)
    if pipeline.config.history.enabled:  # after the reports: a history failure never loses a report
        import logging

        from mlbench.errors import UserError
        from mlbench.history import record_run

        try:
            record_run(report, pipeline.path, pipeline.history_path)
        except Exception as exc:  # noqa: BLE001 - one warning line, the run stands
            why = str(exc) if isinstance(exc, UserError) else f"{pipeline.history_path}: {short_error(exc)}"
            logging.getLogger("mlbench.history").warning("run not added to the history: %s", why)
    return report
