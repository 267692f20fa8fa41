"""What a change to a pipeline file does to the matrix: variants and artifacts added, removed and changed
(with the fields that changed), and the pipeline-wide settings that changed.

A variant is known by its id and an artifact by its artifact id. Each carries the fields that make it
what it is: the model's definition, the seed, the target's fixed options, the recipes its axis values
name (artifact fields), and where it is measured (a variant field). Pure: two configs in, a `PlanDiff`
out; `mlbench plan --diff` renders it as Markdown for a pull request or as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mlbench.matrix import Plan, Variant, expand

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig

SECTIONS_OF_THE_MATRIX = ("version", "models", "targets", "exclude", "include", "optimizations", "seed")
"""Top-level keys that shape variants; every other key is a pipeline-wide setting, diffed as one."""


@dataclass(frozen=True)
class Change:
    """One item (a variant or an artifact) present on both sides whose fields differ."""

    id: str
    fields: dict[str, tuple[Any, Any]]  # dotted field → (base, head)


@dataclass
class Side:
    variants: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)


@dataclass
class Delta:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    unchanged: int = 0

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass
class PlanDiff:
    base_label: str
    head_label: str
    base: Side
    head: Side
    variants: Delta
    artifacts: Delta
    settings: dict[str, tuple[Any, Any]]

    @property
    def empty(self) -> bool:
        return self.variants.empty and self.artifacts.empty and not self.settings

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for delta in ("variants", "artifacts"):
            for change in data[delta]["changed"]:
                change["fields"] = {k: {"base": b, "head": h} for k, (b, h) in change["fields"].items()}
        data["settings"] = {k: {"base": b, "head": h} for k, (b, h) in self.settings.items()}
        for side in ("base", "head"):
            data[side] = {"label": data.pop(f"{side}_label"), "variants": len(data[side]["variants"]),
                          "artifacts": len(data[side]["artifacts"])}
        return data


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars stay whole (JSON-ready)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _fields(dumped: dict[str, Any], variant: Variant) -> tuple[dict[str, Any], dict[str, Any]]:
    """(artifact fields, measurement-only fields) of one variant of the pipeline dumped as JSON."""
    model = next(m for m in dumped["models"] if m["name"] == variant.model)
    targets = [*dumped["targets"], *dumped["include"]]
    target = targets[variant.target_index] if variant.target_index < len(targets) else {}
    artifact: dict[str, Any] = {"seed": dumped["seed"]}
    artifact.update(_flat({k: v for k, v in model.items() if k != "name"}, "model"))
    from mlbench.plugins.registry import specs

    options = json.loads(variant.fixed)
    only_measured = specs()[variant.backend].target.measurement_options
    artifact.update(_flat({k: v for k, v in options.items() if k not in only_measured}, "options"))
    for name, value in variant.axes:
        if value in dumped["optimizations"] and name in variant.artifact_axes:
            artifact.update(_flat(dumped["optimizations"][value], f"optimizations.{value}"))
    measured = {"runs_on": target.get("runs_on")}
    measured.update(_flat({k: v for k, v in options.items() if k in only_measured}, "options"))
    return artifact, measured


def _items(config: PipelineConfig | None) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Variant id → all its fields; artifact id → its artifact fields."""
    variants: dict[str, dict[str, Any]] = {}
    artifacts: dict[str, dict[str, Any]] = {}
    if config is None:
        return variants, artifacts
    dumped = config.model_dump(mode="json")
    for group in Plan(expand(config)).artifact_groups():
        for variant in group:
            artifact, measured = _fields(dumped, variant)
            variants[variant.id] = {**artifact, **measured}
            artifacts.setdefault(variant.artifact_id, artifact)
    return variants, artifacts


def _delta(base: dict[str, dict[str, Any]], head: dict[str, dict[str, Any]]) -> Delta:
    delta = Delta(added=[k for k in head if k not in base], removed=[k for k in base if k not in head])
    for key in (k for k in head if k in base):
        before, after = base[key], head[key]
        changed = {f: (before.get(f), after.get(f)) for f in dict.fromkeys([*before, *after])
                   if before.get(f) != after.get(f)}
        if changed:
            delta.changed.append(Change(key, changed))
        else:
            delta.unchanged += 1
    return delta


def _settings(config: PipelineConfig | None) -> dict[str, Any]:
    if config is None:
        return {}
    dumped = config.model_dump(mode="json")
    return _flat({k: v for k, v in dumped.items() if k not in SECTIONS_OF_THE_MATRIX}, "")


def diff_plans(base: PipelineConfig | None, head: PipelineConfig | None, base_label: str, head_label: str) -> PlanDiff:
    """The difference between two pipelines' matrices; a side is None when the file does not exist there."""
    base_variants, base_artifacts = _items(base)
    head_variants, head_artifacts = _items(head)
    before, after = _settings(base), _settings(head)
    settings = {k: (before.get(k), after.get(k)) for k in dict.fromkeys([*before, *after])
                if base is not None and head is not None and before.get(k) != after.get(k)}
    return PlanDiff(base_label, head_label, Side(list(base_variants), list(base_artifacts)),
                    Side(list(head_variants), list(head_artifacts)), _delta(base_variants, head_variants),
                    _delta(base_artifacts, head_artifacts), settings)
