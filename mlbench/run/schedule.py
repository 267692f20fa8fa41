"""The order parallel exports start in: longest first, so that the last export to finish is a short
one and no core sits idle while one large export runs on alone (list scheduling, LPT).

The expected cost of an artifact is, in order of trust:
1. how long the same artifact took to export in the last recorded run of this pipeline (run history);
2. its model's size, read by building the model on torch's `meta` device (no weights are allocated
   or initialised: milliseconds, even for large models) -- in a run, inside one of the supervised
   export children (`sizes`), since a user's model never runs in the coordinator. The size is the
   count of leaf modules plus 3 per million parameters: conversion passes run per operation, so a
   mobilenet_v3_small (141 leaf modules, 2.5 M parameters) took longer to export than a resnet18 (52,
   11.7 M) — 3.4 s against 2.0 s, resnet50 (126, 25.6 M) 4.3 s, medians over four recipes each
   (benchmarks/parallel_export.py, 2026-11-30); ordering by parameters alone left a core idle while the
   last mobilenet export ran on alone;
3. unknown: scheduled first, as if it were the largest (a wrong guess then costs least).
Ties keep the plan's order, so the artifacts of one model stay together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

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


PER_MILLION_PARAMETERS = 3.0  # leaf modules a million parameters weigh as in export time (see above)


def size_of(module: torch.nn.Module) -> float:
    """Expected export cost in leaf-module units: leaf modules plus 3 per million parameters."""
    leaves = sum(1 for m in module.modules() if next(m.children(), None) is None)
    return leaves + PER_MILLION_PARAMETERS * sum(p.numel() for p in module.parameters()) / 1e6


def model_sizes(config: PipelineConfig, base_dir: Path, models: set[str],
                on_model: Callable[[str], None] | None = None) -> dict[str, float]:
    """model name → `size_of`, built on the meta device; models that cannot be built so are left out
    (`on_model(name)` before each is built: a supervisor then knows which one hung)."""
    import torch

    from mlbench.sources.loading import build_module, resolve_factory

    sizes: dict[str, float] = {}
    for spec in config.models:
        if spec.name not in models or spec.source is None or spec.source_kind == "saved":
            continue  # saved files are not built on the meta device; a model without a source exports nothing
        if on_model is not None:
            on_model(spec.name)
        try:
            if spec.source_kind == "transformers":
                with torch.device("meta"):
                    module = build_module(spec, base_dir)[0]
                sizes[spec.name] = size_of(module)
                continue
            factory = resolve_factory(spec.source, base_dir)
            if isinstance(factory, torch.nn.Module):
                module = factory
            else:
                with torch.device("meta"):
                    module = factory(**spec.kwargs)
            sizes[spec.name] = size_of(module)
        except Exception as exc:  # noqa: BLE001 - some models cannot be built without real weights
            log.debug("no size for %s: %s", spec.name, exc)
    return sizes


def longest_first(variants: list[Variant], config: PipelineConfig, base_dir: Path, history: Path | None,
                  sizes: Callable[[set[str]], dict[str, float]] | None = None) -> list[Variant]:
    """`variants` (one per artifact) ordered by expected export cost, largest first.

    sizes: model names → `size_of` (the runner's asks a supervised child); by default `model_sizes`
    in this process.
    """
    if len(variants) < 2:
        return list(variants)
    seconds = last_export_seconds(history, config.name)
    if all(v.artifact_id in seconds for v in variants):
        return sorted(variants, key=lambda v: -seconds[v.artifact_id])
    models = {v.model for v in variants}
    size = sizes(models) if sizes is not None else model_sizes(config, base_dir, models)
    return sorted(variants, key=lambda v: -size.get(v.model, float("inf")))
