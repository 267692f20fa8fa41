"""Checks of the `models:` section that need the file's folder or the whole pipeline (numpy at most):
saved models and values files exist and fit their inputs, token ids stay within a config's vocabulary,
and a model without a source is only measured from existing artifacts.

Each check gives (place, message) pairs; `load` turns them into FILE:LINE:COL lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.config.generate import generate_problems

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig

Problem = tuple[tuple[str | int, ...], str]
TOKEN_INPUTS = ("input_ids", "decoder_input_ids")


def check_models(config: PipelineConfig, base_dir: Path) -> list[Problem]:
    problems: list[Problem] = []
    for m, spec in enumerate(config.models):
        if spec.source_kind == "saved":
            path = base_dir / str(spec.source)
            if not path.exists():
                problems.append((("models", m, "source"), f"saved model not found: {path.resolve()}"))
        if any(item.values is not None for item in spec.inputs):
            from mlbench.sources.values import check_values  # numpy: only when a values file is named

            for i, what in check_values(spec, base_dir):
                problems.append((("models", m, "inputs", i, "values"), what))
        if spec.source_kind == "transformers":
            problems.extend(_vocabulary(m, spec.kwargs, spec.inputs))
        problems.extend(generate_problems(m, spec))
    problems.extend(_existing_artifacts(config, base_dir))
    return problems


def _existing_artifacts(config: PipelineConfig, base_dir: Path) -> list[Problem]:
    """A named artifact exists, and belongs to one model: in `targets:` only when there is one model."""
    problems: list[Problem] = []
    for section, targets in (("targets", config.targets), ("include", config.include)):
        for i, target in enumerate(targets):
            existing = target.existing_artifact()
            if existing is None:
                continue
            key, path = existing
            full = path if path.is_absolute() else base_dir / path
            if not full.exists():
                problems.append(((section, i, key), f"not found: {full.resolve()}"))
            elif section == "targets" and len(config.models) > 1:
                problems.append(((section, i, key), f"names one model's artifact, and there are {len(config.models)} "
                                 "models: give it as an include entry with model: NAME"))
    return problems


def _vocabulary(m: int, kwargs: dict[str, Any], inputs: list[Any]) -> list[Problem]:
    """Token ids past the config's vocab_size would index past the embedding table."""
    config = kwargs.get("config")
    vocab = config.get("vocab_size") if isinstance(config, dict) else None
    problems: list[Problem] = []
    if not isinstance(vocab, int):
        return problems
    for i, item in enumerate(inputs):
        if item.name in TOKEN_INPUTS and item.range is not None and item.range[1] > vocab:
            problems.append((("models", m, "inputs", i, "range"),
                             f"token ids up to {item.range[1] - 1} but the config's vocab_size is {vocab}: "
                             f"use range: [0, {vocab}]"))
    return problems


def sourceless_variants(config: PipelineConfig, variants: list[Any]) -> list[Problem]:
    """A model without a source can only be measured by targets that name an existing artifact."""
    targets = [*config.targets, *config.include]
    problems: list[Problem] = []
    for m, spec in enumerate(config.models):
        if spec.source is not None:
            continue
        needing = [v.id for v in variants if v.model == spec.name
                   and not targets[v.target_index].uses_existing_artifact()]
        if needing:
            more = f" (and {len(needing) - 1} more)" if len(needing) > 1 else ""
            problems.append((("models", m), f"no source, but variant {needing[0]}{more} needs one: give the model a "
                             "source, or exclude its variants that export"))
    return problems
