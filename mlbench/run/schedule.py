"""The order parallel exports start in: longest first, so that the last export to finish is a short
one and no core sits idle while one large export runs on alone (list scheduling, LPT).

The expected cost of an artifact is, in order of trust:
1. how long the same artifact took to export in the last recorded run of this pipeline (run history);
2. its model's parameter count, read by building the model on torch's `meta` device (no weights are
   allocated or initialised: milliseconds, even for large models) -- in a run, inside one of the
   supervised export children (`counts`), since a user's model never runs in the coordinator;
3. unknown: scheduled first, as if it were the largest (a wrong guess then costs least).
Ties keep the plan's order, so the artifacts of one model stay together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant

log = logging.getLogger("mlbench.run")


def last_export_seconds(history: Path | None, pipeline: str) -> dict[str, float]:
    """artifact id → export seconds of the artifacts the last recorded run of `pipeline` built."""
    if history is None or not history.exists():
        return {}
    from mlbench.store.history import list_runs, load_report

    try:
        runs = list_runs(history, pipeline=pipeline, limit=1)
        if not runs:
            return {}
        report, _ = load_report(history, runs[-1].run_id)
    except Exception as exc:  # noqa: BLE001 - an unreadable history only costs the ordering
        log.debug("no export times from %s: %s", history, exc)
        return {}
    return {r.artifact_id: r.artifact.export_seconds for r in report.records
            if r.artifact is not None and not r.artifact.cache_hit and r.artifact.export_seconds > 0}


def parameter_counts(config: PipelineConfig, base_dir: Path, models: set[str]) -> dict[str, int]:
    """model name → parameter count, built on the meta device; models that cannot be built so are left out."""
    import torch

    from mlbench.sources.loading import build_module, resolve_factory

    counts: dict[str, int] = {}
    for spec in config.models:
        if spec.name not in models or spec.source is None or spec.source_kind == "saved":
            continue  # saved files are not built on the meta device; a model without a source exports nothing
        try:
            if spec.source_kind == "transformers":
                with torch.device("meta"):
                    module = build_module(spec, base_dir)[0]
                counts[spec.name] = sum(p.numel() for p in module.parameters())
                continue
            factory = resolve_factory(spec.source, base_dir)
            if isinstance(factory, torch.nn.Module):
                module = factory
            else:
                with torch.device("meta"):
                    module = factory(**spec.kwargs)
            counts[spec.name] = sum(p.numel() for p in module.parameters())
        except Exception as exc:  # noqa: BLE001 - some models cannot be built without real weights
            log.debug("no parameter count for %s: %s", spec.name, exc)
    return counts


def longest_first(variants: list[Variant], config: PipelineConfig, base_dir: Path, history: Path | None,
                  counts: Callable[[set[str]], dict[str, int]] | None = None) -> list[Variant]:
    """`variants` (one per artifact) ordered by expected export cost, largest first.

    counts: model names → parameter counts (the runner's asks a supervised child); by default
    `parameter_counts` in this process.
    """
    if len(variants) < 2:
        return list(variants)
    seconds = last_export_seconds(history, config.name)
    if all(v.artifact_id in seconds for v in variants):
        return sorted(variants, key=lambda v: -seconds[v.artifact_id])
    models = {v.model for v in variants}
    params = counts(models) if counts is not None else parameter_counts(config, base_dir, models)
    return sorted(variants, key=lambda v: -params.get(v.model, float("inf")))
