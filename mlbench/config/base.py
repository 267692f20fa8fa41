"""Building blocks shared by every config model: strict keys with a "did you mean", and matrix axes.

Kept apart from ``config.py`` so each backend's target model can use them without importing the
whole pipeline config (and without importing torch).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

T = TypeVar("T")

NO_OPTIMIZATION = "none"
"""The `optimize` axis value meaning "no weight compression"; never a recipe's name."""

SHAPE_AXIS = "shape"
"""The measurement axis a model adds to every variant when its inputs have shape alternatives or
ranges: one value per measured shape (its flexible sizes, e.g. `128`). One export serves them all."""


def suggest(word: str, choices: list[str]) -> str:
    """'; did you mean 'x'?' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def unknown_recipe(name: str, recipes: Any, known: list[str] | None = None) -> str | None:
    """The one-line problem of an `optimize` value that names no recipe under `optimizations` (None for 'none'
    and defined names); `known` (default: every recipe) is what the message offers."""
    if name == NO_OPTIMIZATION or name in recipes:
        return None
    names = [NO_OPTIMIZATION, *(recipes if known is None else known)]
    return (f"unknown optimization '{name}'{suggest(name, names)} (define it under `optimizations`; known: "
            f"{', '.join(names)})")


class StrictModel(BaseModel):
    """A config model that rejects unknown keys, naming the closest known one.

    pydantic's own ``extra="forbid"`` says only "Extra inputs are not permitted"; reviewers of a
    pipeline file deserve the key, its place and a suggestion.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = list(cls.model_fields)
            for key in data:
                if key not in cls.model_fields:
                    raise PydanticCustomError(
                        "unknown_key",
                        "unknown key '{key}'{hint}",
                        {"key": str(key), "hint": suggest(str(key), known)},
                    )
        return data


def _as_list(value: Any) -> Any:
    """A scalar where an axis is expected means a one-value axis: `device: cpu` == `device: [cpu]`."""
    return value if isinstance(value, list) else [value]


def first_repeat(names: list[str]) -> str | None:
    """The first name that appears more than once (model names, input names), or None."""
    return next((name for name in names if names.count(name) > 1), None)


def _no_duplicates(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value in seen:
            raise PydanticCustomError("duplicate_axis_value", "'{value}' is listed twice", {"value": value})
        seen.append(value)
    if not seen:
        raise PydanticCustomError("empty_axis", "an axis needs at least one value", {})
    return seen


class _AxisJsonSchema:
    """The schema says what validation does: one value, or a non-empty list without repeats.

    Without this an editor would flag `device: cpu` (allowed) and accept `device: []` and
    `device: [cpu, cpu]` (refused)."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        array = dict(handler(core_schema))
        item = array.get("items", {})
        return {"anyOf": [item, {**array, "minItems": 1, "uniqueItems": True}]}


Axis = Annotated[list[T], BeforeValidator(_as_list), AfterValidator(_no_duplicates), _AxisJsonSchema()]
"""A matrix axis: a list of values (a scalar is a one-value list), no duplicates, not empty."""


MAX_LIMIT_S = 7 * 24 * 3600.0
"""The longest time limit a pipeline may give (a week): anything longer is a typo."""


class Limits(StrictModel):
    """Limits on the child process that exports or measures a variant; unset keys take the pipeline's."""

    export_s: float | None = Field(
        default=None, gt=0, le=MAX_LIMIT_S,
        description="Seconds one artifact's model load and export may take before the process is killed.")
    measure_s: float | None = Field(
        default=None, gt=0, le=MAX_LIMIT_S,
        description="Seconds one variant's measurement may take before the process is killed.")
    memory_gb: float | None = Field(
        default=None, gt=0, le=65536,
        description="Memory the child process may allocate, in GB (Linux: RLIMIT_DATA; not enforced elsewhere).")


class TargetBase(StrictModel):
    """One backend's entry in `targets:`. Its list fields are matrix axes.

    Each backend declares its axes (in the order they appear in a variant id) and which of them
    shape the exported artifact; the rest only shape the measurement. Core ML's `compute_units`
    is chosen at load time, so one export serves all four.
    """

    backend: str
    runs_on: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$",
        description="With the Dask executor: the worker resource this target's measurements need (e.g. "
        "apple-m2, or device:iphone15pro for a Core ML target measured on a connected phone); workers declare it "
        "with --resources apple-m2=1 (`mlbench devices --resources` prints a Mac's connected devices). Exports run "
        "anywhere.",
    )
    limits: Limits | None = Field(
        default=None, description="This target's own limits, over the pipeline's `limits:` (e.g. a longer export_s).")
    axes: ClassVar[tuple[str, ...]] = ()
    artifact_axes: ClassVar[tuple[str, ...]] = ()
    measurement_options: ClassVar[tuple[str, ...]] = ()
    """Non-axis options that shape only the measurement or the estimates, never the exported artifact (what
    `mlbench plan --diff` counts as a changed variant but not a changed artifact)."""

    def axis_values(self) -> dict[str, list[Any]]:
        return {name: list(getattr(self, name)) for name in self.axes}

    def check(self, config: Any) -> list[tuple[tuple[str | int, ...], str]]:
        """Checks that need the whole pipeline: (place within this target, message) pairs."""
        return []

    def existing_artifact(self) -> tuple[str, Path] | None:
        """(key, path) when the target measures a file the user already has (no export, no model source
        needed), else None."""
        return None

    def uses_existing_artifact(self) -> bool:
        return self.existing_artifact() is not None

    def fixed_options(self) -> dict[str, Any]:
        """Non-axis options (the same for every variant of this target), JSON-ready."""
        data = self.model_dump(mode="json")
        # an include entry's `model` is not an option, nor where a measurement runs or its limits
        for name in ("backend", "model", "runs_on", "limits", *self.axes):
            data.pop(name, None)
        return data
