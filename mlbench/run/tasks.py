"""The units of work of a run, the same wherever they execute: in a supervised child process of
the coordinator (`child.py`) or of a Dask worker (`remote.py`).

- `export_artifact`: build (or find) one artifact in the content-addressed cache. Safe to run in
  parallel: the cache publishes each entry atomically and two builders of one key end with one.
- `run_group`: for the variants that share one artifact, fetch it and measure each variant,
  yielding each finished record as soon as it exists.

A worker gets the pipeline's config as plain data (`PipelineConfig` JSON + its folder), validated
once per worker process, and the variants themselves (plain frozen dataclasses): it never
re-expands the matrix, and a worker on another machine builds exactly what the coordinator planned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlbench import thermal
from mlbench.backends.base import Backend, VariantSkipped, generation_unsupported
from mlbench.config.pipeline import PipelineConfig
from mlbench.errors import located_error, one_line, user_frame
from mlbench.matrix import Variant
from mlbench.plugins.registry import backend_class
from mlbench.records import RunRecord
from mlbench.store.cache import ArtifactCache
from mlbench.store.derived import DERIVED_DETAILS, derived_of


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class WorkSpec:
    """What a worker needs to build backends and models for the variants it is sent: plain data."""

    config: dict[str, Any]
    base_dir: str
    cache_dir: str


@dataclass
class Finished:
    record: RunRecord
    artifact: tuple[str, dict[str, Any]] | None = None  # (key, details) the first time an artifact is seen


@dataclass
class WorkContext:
    """A worker's view of one pipeline: backends, the cache, and the last model it built."""

    config: PipelineConfig
    base_dir: Path
    cache: ArtifactCache
    stage_seconds: dict[str, float] = field(default_factory=lambda: {"load": 0.0, "export": 0.0, "measure": 0.0})
    _backends: dict[int, Backend] = field(default_factory=dict)
    _model: tuple[str, Any] | None = None

    @classmethod
    def from_spec(cls, spec: WorkSpec) -> WorkContext:
        return cls(PipelineConfig.model_validate(spec.config), Path(spec.base_dir), ArtifactCache(Path(spec.cache_dir)))

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[stage] += time.perf_counter() - t0

    def backend(self, variant: Variant) -> Backend:
        if variant.target_index not in self._backends:
            target = [*self.config.targets, *self.config.include][variant.target_index]
            backend = backend_class(target.backend)(target, self.config, self.cache)
            backend.base_dir = self.base_dir
            self._backends[variant.target_index] = backend
        return self._backends[variant.target_index]

    def unsupported(self, variant: Variant) -> str | None:
        """Why the variant's backend skips it before any work: a generative model on a backend that runs none."""
        spec = next((m for m in self.config.models if m.name == variant.model), None)
        if spec is None or spec.generate is None:
            return None
        return generation_unsupported(self.backend(variant), variant.model)

    def forget_model(self) -> None:
        """The next `model()` builds afresh (`mlbench ab` times several copies, each in its own memory)."""
        self._model = None

    def model(self, name: str) -> Any:
        """The loaded model, built once while its variants run (only the latest is kept: memory)."""
        from mlbench.sources.loading import load_model

        if self._model is None or self._model[0] != name:
            self._model = None
            spec = next(m for m in self.config.models if m.name == name)
            with self.timed("load"):
                self._model = (name, load_model(spec, self.config.seed, self.base_dir))
        return self._model[1]


def _record(variant: Variant, status: str, started: str, t0: float, **fields: Any) -> RunRecord:
    if fields.get("error") is not None:  # a multi-line message would break progress lines and report rows
        fields["error"] = one_line(fields["error"], limit=1000)
    return RunRecord(
        variant_id=variant.id, model=variant.model, backend=variant.backend, axes=dict(variant.axes),
        artifact_id=variant.artifact_id, status=status, started=started,
        seconds=round(time.perf_counter() - t0, 6), **fields,
    )


def failed_record(variant: Variant, status: str, error: str, *, started: str | None = None,
                  t0: float | None = None) -> RunRecord:
    """A record for a variant that failed or was skipped outside its measurement (by default: before
    any work; `started`/`t0`: when the work that failed began)."""
    return _record(variant, status, started or utc_now(), time.perf_counter() if t0 is None else t0, error=error)


def _model_failure(exc: BaseException, base_dir: Path) -> str:
    from mlbench.sources.loading import ModelLoadError

    return f"model: {exc if isinstance(exc, ModelLoadError) else located_error(exc, base_dir)}"


def failure_fields(stage: str, exc: BaseException, base_dir: Path) -> dict[str, Any]:
    """A failed record's error (`measure: models.py:41 in forward: RuntimeError: ...`) and, in its details,
    the user's frame it was raised in in full (`error_at`: file, line, function), when one of them is theirs."""
    error = _model_failure(exc, base_dir) if stage == "model" else f"{stage}: {located_error(exc, base_dir)}"
    frame = user_frame(exc)
    details = {"error_at": {"file": frame[0], "line": frame[1], "function": frame[2]}} if frame else {}
    return {"error": error, "details": details}


def with_failure_details(record: RunRecord, outcome: ExportOutcome | None) -> RunRecord:
    """`record`, failed by an export built ahead of it (`outcome`), with that failure's details (`error_at`)."""
    if outcome is not None and outcome.details and record.status == "failed" \
            and record.error == one_line(outcome.failure or "", limit=1000):  # as `_record` keeps it
        record.details = {**outcome.details, **record.details}
    return record


@dataclass(frozen=True)
class ExportOutcome:
    """What building one artifact ahead of measurement gave: a failure, or the key it built."""

    variant_id: str
    failure: str | None = None
    built_key: str | None = None  # set when this call built the entry (a cache miss)
    details: dict[str, Any] = field(default_factory=dict)  # a failure's `error_at`, for its variants' records


def export_artifact(ctx: WorkContext, variant: Variant, on_stage: Any = None) -> ExportOutcome:
    """Make sure the variant's artifact is in the cache; failures come back as one line (`on_stage(subject,
    name)`: "load" then "export", as `run_group` says them)."""
    stage = on_stage or (lambda subject, name: None)
    if ctx.unsupported(variant) is not None:
        return ExportOutcome(variant.id)  # measurement will say why
    try:
        stage(variant.model, "load")
        model = ctx.model(variant.model)
    except Exception as exc:  # noqa: BLE001 - reported with the variants
        fields = failure_fields("model", exc, ctx.base_dir)
        return ExportOutcome(variant.id, failure=fields["error"], details=fields["details"])
    try:
        stage(variant.artifact_id, "export")
        with ctx.timed("export"):
            exported = ctx.backend(variant).export(model, variant)
    except VariantSkipped:
        return ExportOutcome(variant.id)  # measurement will say why
    except Exception as exc:  # noqa: BLE001
        fields = failure_fields("export", exc, ctx.base_dir)
        return ExportOutcome(variant.id, failure=fields["error"], details=fields["details"])
    info = exported.info
    ctx.cache.release_pins()  # measured later, by a child that finds (and pins) it again
    return ExportOutcome(variant.id, built_key=info.key if info is not None and not info.cache_hit else None)


def run_group(ctx: WorkContext, group: list[Variant], on_stage: Any = None,
              export_failure: str | None = None) -> Iterator[Finished]:
    """Measure the variants of one artifact, one at a time, yielding each record when it is done."""
    stage = on_stage or (lambda subject, name: None)
    first = group[0]
    started, t0 = utc_now(), time.perf_counter()
    if export_failure is not None:  # a parallel export already failed: don't pay for it twice
        for variant in group:
            yield Finished(_record(variant, "failed", started, t0, error=export_failure))
        return
    if (why := ctx.unsupported(first)) is not None:
        for variant in group:
            yield Finished(_record(variant, "skipped", started, t0, error=why))
        return
    try:
        stage(first.model, "load")
        model = ctx.model(first.model)
    except Exception as exc:  # noqa: BLE001 - a model that can't be built fails its variants only
        for variant in group:
            yield Finished(_record(variant, "failed", started, t0, **failure_fields("model", exc, ctx.base_dir)))
        return
    backend = ctx.backend(first)
    stage(first.artifact_id, "export")
    try:
        with ctx.timed("export"):
            exported = backend.export(model, first)
    except VariantSkipped as exc:
        for variant in group:
            yield Finished(_record(variant, "skipped", started, t0, error=str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - a failed export fails its variants, not the sweep
        for variant in group:
            yield Finished(_record(variant, "failed", started, t0, **failure_fields("export", exc, ctx.base_dir)))
        return
    artifact = (exported.info.key, exported.details) if exported.info is not None and exported.details else None
    try:
        for variant in group:
            stage(variant.id, "measure")
            yield Finished(_measure(ctx, backend, model, exported, variant), artifact)
            artifact = None
    finally:  # the entry was pinned from its lookup: `cache clear` during the run skips it (`store/pins.py`)
        ctx.cache.release_pins()


def _measure(ctx: WorkContext, backend: Backend, model: Any, exported: Any, variant: Variant) -> RunRecord:
    started, t0 = utc_now(), time.perf_counter()
    common: dict[str, Any] = {"artifact": exported.info}
    heat = thermal.before_variant(ctx.config.latency.max_thermal_state, ctx.config.latency.thermal_wait_s)
    derived = derived_of(ctx.cache)
    derived.take_tally()  # what the export's own lookups found is not this variant's
    try:
        with ctx.timed("measure"):
            result = backend.measure(model, exported, variant)
        work = _derived_work(ctx, derived.take_tally())
    except VariantSkipped as exc:
        return _record(variant, "skipped", started, t0, error=str(exc), **common)
    except Exception as exc:  # noqa: BLE001
        return _record(variant, "failed", started, t0, **failure_fields("measure", exc, ctx.base_dir), **common)
    status, error = "ok", None
    if result.verify is not None and not result.verify.passed:
        status = "failed"
        error = f"verify: {result.verify.why_failed()}"
        if result.verify.overflow:  # say why it is inf
            error = f"verify: {result.verify.overflow}; max_rel {result.verify.max_rel:.3g}"
            if result.verify.source != "measured":
                error += f" ({result.verify.source})"
    details = result.details if exported.info else {**exported.details, **result.details}
    details.setdefault("thermal", thermal.after_variant(heat))  # a connected device's own reading wins
    if work:  # the derived figures it used: computed here, or found in the cache (`store/derived.py`)
        details = {**details, DERIVED_DETAILS: work}
    return _record(variant, status, started, t0, error=error, metrics=result.metrics, latency=result.latency,
                   verify=result.verify, placement=result.placement, details=details, **common)


def _derived_work(ctx: WorkContext, outcomes: list[Any]) -> list[dict[str, Any]]:
    """The derived figures a measurement used, for its record; their seconds (within "measure") go to the stages
    "derived.computed" and "derived.cached", so a run says what its reuse saved."""
    for outcome in outcomes:
        stage = "derived.computed" if outcome.computed else "derived.cached"
        ctx.stage_seconds[stage] = ctx.stage_seconds.get(stage, 0.0) + outcome.seconds
    return [outcome.as_json() for outcome in outcomes]


def memory_round(ctx: WorkContext, group: list[Variant]) -> dict[str, dict[str, Any]]:
    """One more memory round (`Backend.memory_round`) of each variant of one artifact, in this fresh process:
    {variant id: {metric: Metric as JSON}}, leaving out the variants whose backend measures memory once. The
    artifact comes from the cache the timed round's export filled (eager: the module as cast)."""
    first = group[0]
    model = ctx.model(first.model)
    backend = ctx.backend(first)
    exported = backend.export(model, first)
    figures: dict[str, dict[str, Any]] = {}
    try:
        for variant in group:
            metrics = backend.memory_round(model, exported, variant)
            if metrics is not None:
                figures[variant.id] = {name: metric.model_dump(mode="json") for name, metric in metrics.items()}
    finally:
        ctx.cache.release_pins()
    return figures


# --- entry points for worker processes (module-level functions: picklable by reference) ----------

_CONTEXT: tuple[WorkSpec, WorkContext] | None = None


def worker_context(spec: WorkSpec) -> WorkContext:
    """One context per worker process and pipeline, so a worker builds each model once."""
    global _CONTEXT
    if _CONTEXT is None or _CONTEXT[0] != spec:
        _CONTEXT = (spec, WorkContext.from_spec(spec))
    return _CONTEXT[1]


def export_task(spec: WorkSpec, variant: Variant, threads: int | None = None, on_stage: Any = None) -> ExportOutcome:
    """In a child process: build one artifact. The variant travels itself: no worker re-expands the matrix."""
    from mlbench.run.threads import limited_threads

    with limited_threads(threads):
        return export_artifact(worker_context(spec), variant, on_stage)


def warm_task(warmups: list[str]) -> list[str]:
    """In a child before its first request: ready what the exports will need (`BackendSpec.warmups`: a
    "module:function" to call, or a package to import); returns those that failed (the export will
    say why)."""
    import importlib

    from mlbench.plugins.spec import load_attr

    failed = []
    for name in warmups:
        try:
            if ":" in name:
                load_attr(name)()
            else:
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not ours to report here
            failed.append(name)
    return failed
