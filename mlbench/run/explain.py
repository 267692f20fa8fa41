"""`mlbench explain REPORT VARIANT` as a Python API: where a variant of a finished run loses accuracy.

The record's own localization (made during the run for a variant that failed or passed close to its
limits) is reused; otherwise, or with ``fresh``, the pipeline the report names is loaded, the variant
found in its matrix, and its backend's ``localize`` runs here (exports come from the artifact cache), or its
localization is found in the cache (not with ``fresh``, which computes it now).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlbench.errors import UserError
from mlbench.localization import ErrorLocalization
from mlbench.records import RunRecord, RunReport

__all__ = ["advised_pipeline", "explain", "find_record"]


def find_record(report: RunReport, variant_id: str, path: Path) -> RunRecord:
    from mlbench.config.base import suggest

    for record in report.records:
        if record.variant_id == variant_id:
            return record
    raise UserError(f"no variant {variant_id!r} in this report"
                    f"{suggest(variant_id, [r.variant_id for r in report.records])}", file=path)


def explain(report_path: str | Path, variant_id: str, *, fresh: bool = False) -> ErrorLocalization:
    """The variant's localization (UserError for a missing variant, pipeline or backend that cannot)."""
    from mlbench.compare.report_file import read_report_file
    from mlbench.report.localization import record_localization

    path = Path(report_path)
    report = read_report_file(path, checked=False)
    record = find_record(report, variant_id, path)
    kept = None if fresh else record_localization(record)
    if kept is not None:
        return kept
    return _localize(report, record, path, cached=not fresh)


def _localize(report: RunReport, record: RunRecord, path: Path, *, cached: bool = True) -> ErrorLocalization:
    """The variant localized by its backend: found in the artifact cache when an earlier run or explain
    computed it (`localize_hook.cached_localization`), unless not `cached` (`--fresh`: computed now)."""
    from mlbench.backends.localize_hook import cached_localization
    from mlbench.matrix import expand
    from mlbench.plugins.registry import get
    from mlbench.plugins.spec import load_attr
    from mlbench.run.tasks import WorkContext
    from mlbench.store.cache import ArtifactCache
    from mlbench.validate import load_pipeline

    spec = get(record.backend)
    if spec.localize is None:
        raise UserError(f"the {record.backend} backend cannot localize error: {spec.localize_missing}", file=path)
    pipeline_file = Path(report.pipeline.path)
    if not pipeline_file.is_file():
        raise UserError(f"the report's pipeline {pipeline_file} is not there: localizing needs its models", file=path)
    pipeline = load_pipeline(pipeline_file)
    variant = next((v for v in expand(pipeline.config) if v.id == record.variant_id), None)
    if variant is None:
        raise UserError(f"{pipeline_file} no longer has variant {record.variant_id!r}", file=path)
    ctx = WorkContext(pipeline.config, pipeline.base_dir, ArtifactCache(pipeline.cache_dir))
    localize = load_attr(spec.localize)
    backend, model = ctx.backend(variant), ctx.model(variant.model)
    if not cached:
        fresh: ErrorLocalization = localize(backend, model, variant)
        return fresh
    return cached_localization(backend, model, variant, localize)


def advised_pipeline(report_path: str | Path, found: ErrorLocalization, destination: str | Path) -> Path:
    """Write the report's pipeline with the advised recipe added beside the variant's (the target's
    `optimize:` gains it), so `mlbench run DESTINATION` measures both. Comments are not kept."""
    from mlbench.compare.report_file import read_report_file

    path = Path(report_path)
    advice = found.advice
    if advice is None or not advice.override:
        raise UserError(f"{found.variant} has no advice to apply"
                        + (f": {advice.reason}" if advice is not None else " (not a compressed variant)"), file=path)
    source = Path(read_report_file(path, checked=False).pipeline.path)
    destination = Path(destination)
    if destination.resolve().parent != source.resolve().parent:
        raise UserError(f"write the advised pipeline beside {source.name} ({source.parent}), where its relative "
                        "paths hold", file=destination)
    data: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    data.setdefault("optimizations", {}).update(advice.override)
    verify: dict[str, Any] = data["verify"] if isinstance(data.get("verify"), dict) else {}
    for limits in (verify.get("tolerance"), verify.get("min_snr_db")):  # judged by the variant's own limits
        if isinstance(limits, dict) and advice.recipe in limits:
            limits.setdefault(advice.advised_recipe, limits[advice.recipe])
    for target in [*data.get("targets", []), *data.get("include", [])]:
        optimize = target.get("optimize") if isinstance(target, dict) else None
        if isinstance(optimize, list) and advice.recipe in optimize and advice.advised_recipe not in optimize:
            optimize.append(advice.advised_recipe)
        elif optimize == advice.recipe:
            target["optimize"] = [optimize, advice.advised_recipe]
    destination.write_text(f"# {source.name} with the accuracy advice for {found.variant} (mlbench explain)\n"
                           + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return destination
