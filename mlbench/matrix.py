"""Expand a pipeline's targets into variants: the cross product of each target's axes, then
`exclude` removes and `include` adds.

A variant knows which of its axes shape the artifact, so a sweep of P precisions × U compute
units is planned as P exports and P×U measurements. A model whose inputs have shape alternatives
(or ranges) adds one measurement-only axis, `shape`, to each of its variants: one export, measured
at every shape. A generative model (`generate:`) adds `prompt` the same way: one export for `context`
cache positions, measured at every prompt length (`p32`).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlbench.config.base import SHAPE_AXIS
from mlbench.config.generate import PROMPT_AXIS, prompt_length

if TYPE_CHECKING:
    from mlbench.config.base import TargetBase
    from mlbench.config.pipeline import PipelineConfig


@dataclass(frozen=True)
class Variant:
    """One cell of the matrix: a model on a backend with one value per axis."""

    model: str
    backend: str
    target_index: int
    axes: tuple[tuple[str, str], ...]  # (axis, value) in the backend's declared order
    artifact_axes: tuple[str, ...]
    fixed: str  # canonical JSON of the target's non-axis options: part of what an artifact is

    @property
    def id(self) -> str:
        """Stable, readable id: `resnet18/torch/cpu/float32`."""
        return "/".join([self.model, self.backend, *(value for _, value in self.axes)])

    @property
    def artifact_id(self) -> str:
        """Id of the artifact this variant measures: measurement-only axes left out."""
        values = [value for name, value in self.axes if name in self.artifact_axes]
        return "/".join([self.model, self.backend, *values])

    def axis(self, name: str) -> str:
        return dict(self.axes)[name]

    @property
    def shape(self) -> str | None:
        """The measured shape's label, for a model with shape alternatives (else None)."""
        return dict(self.axes).get(SHAPE_AXIS)

    @property
    def prompt(self) -> int | None:
        """A generative model's variant: the prompt length it measures (its `prompt` axis); else None."""
        label = dict(self.axes).get(PROMPT_AXIS)
        return prompt_length(label) if label is not None else None

    def fields(self) -> dict[str, str]:
        """Everything `exclude` can match on."""
        return {"model": self.model, "backend": self.backend, **dict(self.axes)}


def _target_variants(model: str, shapes: list[str], index: int, target: TargetBase,
                     prompts: list[str] | None = None) -> list[Variant]:
    values: dict[str, list[Any]] = target.axis_values()
    if shapes:
        values[SHAPE_AXIS] = shapes
    if prompts:
        values[PROMPT_AXIS] = prompts
    names = list(values)
    fixed = json.dumps(target.fixed_options(), sort_keys=True)
    return [
        Variant(
            model=model,
            backend=target.backend,
            target_index=index,
            axes=tuple(zip(names, (str(v) for v in combo))),
            artifact_axes=type(target).artifact_axes,
            fixed=fixed,
        )
        for combo in itertools.product(*(values[n] for n in names))
    ]


def matches(entry: dict[str, Any], variant: Variant) -> bool:
    """An exclude entry matches when every field it names has the variant's value (a list: any of)."""
    fields = variant.fields()
    for key, wanted in entry.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if key not in fields or fields[key] not in [str(o) for o in options]:
            return False
    return True


def expand(config: PipelineConfig) -> list[Variant]:
    """All variants in a stable order: models, then targets, then axes as written. No duplicates."""
    variants: list[Variant] = []
    shapes = {model.name: model.shape_labels() for model in config.models}
    prompts = {model.name: model.prompt_labels() for model in config.models}
    for model in config.models:
        for index, target in enumerate(config.targets):
            variants.extend(_target_variants(model.name, shapes[model.name], index, target, prompts[model.name]))
    variants = [v for v in variants if not any(matches(e, v) for e in config.exclude)]
    for offset, include in enumerate(config.include):
        variants.extend(_target_variants(include.model, shapes.get(include.model, []), len(config.targets) + offset,
                                         include, prompts.get(include.model)))
    unique: dict[str, Variant] = {}
    for variant in variants:
        first = unique.setdefault(variant.id, variant)
        if first.fixed != variant.fixed:
            raise VariantConflict(variant.id, first.target_index, variant.target_index)
    return list(unique.values())


class VariantConflict(ValueError):
    """Two targets give the same variant id with different options: the id would be ambiguous."""

    def __init__(self, variant_id: str, first_index: int, second_index: int) -> None:
        self.variant_id, self.first_index, self.second_index = variant_id, first_index, second_index
        super().__init__(f"variant {variant_id} comes from two targets with different options")


@dataclass(frozen=True)
class Plan:
    variants: list[Variant]

    def artifact_groups(self) -> list[list[Variant]]:
        """Variants grouped by the artifact they share (same id and same fixed options)."""
        groups: dict[tuple[str, str], list[Variant]] = {}
        for variant in self.variants:
            groups.setdefault((variant.artifact_id, variant.fixed), []).append(variant)
        return list(groups.values())

    def by_model(self) -> dict[str, list[Variant]]:
        grouped: dict[str, list[Variant]] = {}
        for variant in self.variants:
            grouped.setdefault(variant.model, []).append(variant)
        return grouped
