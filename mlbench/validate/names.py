"""Names a pipeline refers to that pydantic cannot check alone: a `verify:` table's keys are precisions
or recipes that exist (a misspelled `flaot16` would be ignored, the default applying instead), and an
`exclude` entry's values are models and axis values the targets give (one naming nothing would exclude
nothing).

Each check gives (place, message) pairs; `load` turns them into FILE:LINE:COL lines.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from mlbench.config.base import SHAPE_AXIS, suggest

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig

Problem = tuple[tuple[str | int, ...], str]
VERIFY_TABLES = ("tolerance", "min_snr_db")


def _literals(annotation: Any) -> list[str]:
    if get_origin(annotation) is Literal:
        return [a for a in get_args(annotation) if isinstance(a, str)]
    return [value for arg in get_args(annotation) for value in _literals(arg)]


@cache
def known_precisions() -> tuple[str, ...]:
    """Every precision a registered backend's `precision` axis allows, and mlbench's defaults' keys."""
    from mlbench.config.pipeline import DEFAULT_TOLERANCE, TARGET_MODELS

    found = list(DEFAULT_TOLERANCE)
    for target in TARGET_MODELS:
        field = target.model_fields.get("precision")
        if field is not None:
            found.extend(p for p in _literals(field.annotation) if p not in found)
    return tuple(found)


def verify_keys(config: PipelineConfig) -> list[Problem]:
    """`verify: {tolerance: {...}, min_snr_db: {...}}` keys name a precision or an `optimizations:` recipe."""
    precisions, recipes = list(known_precisions()), list(config.optimizations)
    problems: list[Problem] = []
    for table in VERIFY_TABLES:
        if table not in config.verify.model_fields_set:
            continue
        for key in getattr(config.verify, table):
            if key in precisions or key in recipes:
                continue
            names = f"precisions: {', '.join(precisions)}" + (f"; recipes: {', '.join(recipes)}" if recipes else "")
            problems.append((("verify", table, key), f"'{key}' is neither a precision nor a recipe in "
                             f"optimizations{suggest(key, precisions + recipes)} ({names})"))
    return problems


def _allowed(config: PipelineConfig, present: dict[str, list[str]]) -> dict[str, list[str]]:
    """What an exclude entry may name per field: the models and shape labels here, any registered backend, any
    value a backend's axis allows (a `cuda` device excluded from a CPU-only file is harmless), recipes here."""
    from mlbench.config.base import NO_OPTIMIZATION
    from mlbench.config.pipeline import TARGET_MODELS
    from mlbench.plugins.registry import specs

    allowed = {"model": [m.name for m in config.models], "backend": list(specs())}
    allowed["optimize"] = [NO_OPTIMIZATION, *config.optimizations]
    for target in TARGET_MODELS:
        for axis in target.axes:
            literals = _literals(target.model_fields[axis].annotation)
            if literals and axis not in ("model", "backend", "optimize"):
                allowed.setdefault(axis, [])
                allowed[axis] += [v for v in literals if v not in allowed[axis]]
    for name, values in present.items():
        if name in allowed:
            allowed[name] += [v for v in values if v not in allowed[name]]
        elif name == SHAPE_AXIS:
            allowed[name] = list(values)
    return allowed


def exclude_values(config: PipelineConfig, fields: list[str]) -> list[Problem]:
    """Every value an exclude entry names is one a variant could have: models of this file, registered
    backends, values the axis allows (fields an axis takes freely, like a thread count, are not checked)."""
    from mlbench.matrix import VariantConflict, expand

    try:
        variants = expand(config.model_copy(update={"exclude": [], "include": []}))
    except VariantConflict:
        return []  # reported by the caller's own expansion
    present: dict[str, list[str]] = {}
    for variant in variants:
        for name, value in variant.fields().items():
            if value not in present.setdefault(name, []):
                present[name].append(value)
    allowed = _allowed(config, present)
    problems: list[Problem] = []
    for i, entry in enumerate(config.exclude):
        for key, wanted in entry.items():
            if key not in fields or key not in allowed:
                continue
            for j, option in enumerate(wanted if isinstance(wanted, list) else [wanted]):
                if str(option) in allowed[key]:
                    continue
                loc: tuple[str | int, ...] = ("exclude", i, key, j) if isinstance(wanted, list) else ("exclude", i, key)
                known = present.get(key) or allowed[key]
                problems.append((loc, f"no variant can have {key} '{option}', so this excludes nothing"
                                 f"{suggest(str(option), allowed[key])} ({key} values here: {', '.join(known)})"))
    return problems
