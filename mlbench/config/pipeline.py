"""The pipeline file's pydantic models: the one source of truth for the YAML and its JSON schema.

`load_pipeline` turns a file into a validated `PipelineConfig` or raises `UserError`s that name
the file, line and column. Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, Field, ValidationError, create_model, field_validator, model_validator

from mlbench.backends import TARGET_MODELS
from mlbench.backends.coreml.target import NO_OPTIMIZATION, Recipe
from mlbench.config.base import StrictModel, TargetBase, suggest
from mlbench.errors import UserError

SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
SOURCE_PATTERN = re.compile(r"^(?:torchvision:[A-Za-z_]\w*|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*|[^:]+\.py:[A-Za-z_][\w.]*)$")
DEFAULT_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
InputDtype = Literal["float32", "float16", "bfloat16", "int64", "int32", "bool"]


class ModelInput(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Input name used by exported models.")
    shape: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, description="Static shape, e.g. [1, 3, 224, 224].")
    dtype: InputDtype = Field(default="float32", description="Element type; floats are seeded normal values.")


class ModelSpec(StrictModel):
    name: str = Field(pattern=SAFE_NAME, description="Safe identifier: letters, digits, - _ . (used in variant ids).")
    source: str = Field(
        description='"torchvision:NAME", "pkg.module:factory" or "path/to/file.py:Factory" (relative to this file).'
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the factory.")
    inputs: list[ModelInput] = Field(min_length=1, description="Inputs, in the order forward() takes them.")

    @field_validator("source")
    @classmethod
    def _source_shape(cls, value: str) -> str:
        if not SOURCE_PATTERN.match(value):
            raise ValueError(
                f"'{value}' is not a model source: use torchvision:NAME, pkg.module:factory or path/to/file.py:Factory"
            )
        return value


class LatencySettings(StrictModel):
    warmup: int = Field(default=5, ge=0, description="Calls made and thrown away before timing.")
    repeats: int = Field(default=30, ge=1, description="Least number of timed calls.")
    min_time_s: float = Field(default=1.0, ge=0, description="Least total seconds of timed calls.")
    max_repeats: int = Field(default=10_000, ge=1, description="Most timed calls, for very fast models.")


class VerifySettings(StrictModel):
    tolerance: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: dict(DEFAULT_TOLERANCE),
        description="Largest allowed max_rel error versus eager float32, per precision; an optimization "
        "recipe's name (e.g. palettize4) may have its own entry, which wins over the precision's.",
    )

    def tolerance_for(self, precision: str, optimization: str | None = None) -> float:
        """The recipe's tolerance if given, else the precision's (the pipeline's, else mlbench's default)."""
        if optimization is not None and optimization in self.tolerance:
            return self.tolerance[optimization]
        return self.tolerance.get(precision, DEFAULT_TOLERANCE.get(precision, DEFAULT_TOLERANCE["float16"]))


def _gate_rule(text: str) -> str:
    from mlbench.compare.comparison import RuleError, parse_rule

    try:
        parse_rule(text)
    except RuleError as exc:
        raise ValueError(str(exc)) from None
    return text


class ReportSettings(StrictModel):
    dir: Path | None = Field(default=None, description="Where reports go (relative to this file); default reports/NAME.")
    formats: list[Literal["json", "markdown", "html"]] = Field(
        default=["json", "markdown"], min_length=1,
        description="Report formats to write; html is one self-contained file with charts.",
    )
    gate: list[Annotated[str, AfterValidator(_gate_rule)]] = Field(
        default_factory=list,
        description="Regression rules for `mlbench compare --pipeline`, e.g. 'latency.median:+10%', "
        "'placement.neural_engine:-5pp', 'verify.max_rel:>1e-2', 'status:failed'.",
    )


class HistorySettings(StrictModel):
    path: Path | None = Field(
        default=None,
        description="Run history database (relative to this file). Default: $MLBENCH_HISTORY, else "
        "mlbench-history.sqlite beside the default cache folder.",
    )
    enabled: bool = Field(default=True, description="Append every finished run to the history.")


class CacheSettings(StrictModel):
    dir: Path | None = Field(
        default=None,
        description="Artifact cache folder (relative to this file). Default: $MLBENCH_CACHE_DIR, else the "
        "platform's user cache dir (XDG on Linux).",
    )


class ExecutorSettings(StrictModel):
    kind: Literal["local", "dask"] = Field(
        default="local", description="local: this machine (exports in parallel processes); dask: a Dask cluster."
    )
    address: str | None = Field(
        default=None, pattern=r"^(tcp|tls|inproc|ucx|ws|wss)://\S+$",
        description="The Dask scheduler, e.g. tcp://scheduler:8786 (kind: dask only).",
    )

    @model_validator(mode="after")
    def _address_with_dask(self) -> ExecutorSettings:
        if self.kind == "dask" and self.address is None:
            raise ValueError("the dask executor needs an address, e.g. tcp://scheduler:8786")
        if self.kind == "local" and self.address is not None:
            raise ValueError("an address is only used with kind: dask")
        return self


TargetUnion = Annotated[Union[tuple(TARGET_MODELS)], Field(discriminator="backend")]  # noqa: UP007


def _include_model(target: type[TargetBase]) -> type[TargetBase]:
    """An include entry is a one-model target: the target's fields plus `model`."""
    return create_model(
        f"{target.__name__}Include",
        __base__=target,
        __doc__=f"An extra variant of {target.__name__}: its fields plus the model it is for.",
        model=(str, Field(description="Name of a model in `models`.")),
    )


INCLUDE_MODELS = tuple(_include_model(t) for t in TARGET_MODELS)
IncludeUnion = Annotated[Union[tuple(INCLUDE_MODELS)], Field(discriminator="backend")]  # noqa: UP007


class PipelineConfig(StrictModel):
    """A benchmark sweep: models × targets (each list value an axis), minus exclude, plus include."""

    version: Literal[1] = Field(description="Pipeline file format version.")
    name: str = Field(pattern=SAFE_NAME, description="Name of the sweep, used for the default report dir.")
    models: list[ModelSpec] = Field(min_length=1)
    targets: list[TargetUnion] = Field(min_length=1, description="One entry per backend configuration.")
    exclude: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Variants to drop: each entry matches variant fields (model, backend, axis values); a list means any of.",
    )
    include: list[IncludeUnion] = Field(default_factory=list, description="Extra variants, each a target for one model.")
    optimizations: dict[str, Recipe] = Field(
        default_factory=dict, description="Named weight-compression recipes, referred to by targets' `optimize`."
    )
    latency: LatencySettings = Field(default_factory=LatencySettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    seed: int = Field(default=0, description="Seed for model weights and inputs: the same file gives the same numbers.")

    @field_validator("optimizations")
    @classmethod
    def _recipe_names(cls, recipes: dict[str, Any]) -> dict[str, Any]:
        for name in recipes:
            if name == NO_OPTIMIZATION or not re.match(SAFE_NAME, name):
                raise ValueError(f"'{name}' cannot name a recipe: use letters, digits, - _ . and not 'none'")
        return recipes

    @field_validator("models")
    @classmethod
    def _unique_model_names(cls, models: list[ModelSpec]) -> list[ModelSpec]:
        names = [m.name for m in models]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"model name '{name}' is used twice")
        return models


def pipeline_schema() -> dict[str, Any]:
    """JSON schema of the pipeline file, generated from the models above."""
    schema = PipelineConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mlbench pipeline"
    return schema


# ---------------------------------------------------------------------------------------------
# Loading: YAML positions + pydantic errors → one line per problem


class PipelineInvalid(UserError):
    """One or more problems in a pipeline file; each renders as its own one-line error."""

    def __init__(self, errors: list[UserError]) -> None:
        self.errors = errors
        super().__init__(errors[0].what, file=errors[0].file, line=errors[0].line, col=errors[0].col,
                         where=errors[0].where)

    def __str__(self) -> str:
        return "\n".join(UserError.__str__(e) for e in self.errors)


def format_where(loc: tuple[str | int, ...]) -> str:
    """`targets[0].precision[1]` from ("targets", 0, "precision", 1)."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _data_loc(data: Any, loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    """Drop pydantic's extra loc parts (union tags, validator names) by walking the data."""
    clean: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            clean.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            clean.append(part)
    return tuple(clean)


def _message(error: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    value = error.get("input")
    if kind == "missing":
        return f"missing required key '{error['loc'][-1]}'"
    if kind == "literal_error":
        return f"{value!r} is not allowed; expected {ctx.get('expected', '')}"
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        return f"unknown backend '{ctx.get('tag')}'{suggest(str(ctx.get('tag')), tags)} (backends: {', '.join(tags)})"
    if kind == "union_tag_not_found":
        return "missing required key 'backend'"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    message = error["msg"]
    if isinstance(value, (str, int, float, bool)) or value is None:
        message += f", got {value!r}"
    return message


def errors_from_validation(exc: ValidationError, loaded: Any) -> list[UserError]:
    errors: list[UserError] = []
    for error in exc.errors():
        loc = _data_loc(loaded.data, tuple(error["loc"]))
        as_key = False
        if error["type"] == "unknown_key":
            loc = (*loc, error["ctx"]["key"])
            as_key = True
        elif error["type"] == "missing":
            as_key = False
        position = loaded.locate(loc, key=as_key) or (None, None)
        errors.append(UserError(_message(error), file=loaded.path, line=position[0], col=position[1],
                                where=format_where(loc) or None))
    return errors


def _check_references(config: PipelineConfig, loaded: Any) -> list[UserError]:
    """What pydantic can't see: names in include/exclude must exist, and the matrix can't be empty."""
    errors: list[UserError] = []
    model_names = [m.name for m in config.models]

    def error(loc: tuple[str | int, ...], what: str, key: bool = False) -> None:
        line, col = loaded.locate(loc, key=key) or (None, None)
        errors.append(UserError(what, file=loaded.path, line=line, col=col, where=format_where(loc)))

    for section, targets in (("targets", config.targets), ("include", config.include)):
        for i, target in enumerate(targets):
            for loc, what in target.check(config):
                error((section, i, *loc), what)
    for i, include in enumerate(config.include):
        if include.model not in model_names:
            error(("include", i, "model"), f"unknown model '{include.model}'{suggest(include.model, model_names)}")
    fields = ["model", "backend"] + sorted({a for t in TARGET_MODELS for a in t.axes})
    for i, entry in enumerate(config.exclude):
        if not entry:
            error(("exclude", i), "an empty exclude entry would match every variant")
        for key in entry:
            if key not in fields:
                error(("exclude", i, key), f"unknown variant field '{key}'{suggest(str(key), fields)} "
                      f"(fields: {', '.join(fields)})", key=True)
    if not errors:
        from mlbench.matrix import VariantConflict, expand

        try:
            variants = expand(config)
        except VariantConflict as exc:
            n = len(config.targets)
            first, second = (("targets", i) if i < n else ("include", i - n)
                             for i in (exc.first_index, exc.second_index))
            error(second, f"gives variant {exc.variant_id} again, with other options than {format_where(first)}; "
                  "a variant id must name one configuration")
            return errors
        if not variants:
            loc: tuple[str | int, ...] = ("exclude",) if config.exclude else ("targets",)
            error(loc, "the matrix is empty: every variant is excluded", key=True)
    return errors


@dataclass(frozen=True)
class Pipeline:
    """A validated pipeline and the file it came from (relative paths resolve against its folder)."""

    config: PipelineConfig
    path: Path
    sha256: str

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, path: Path) -> Path:
        """A path from the file, taken relative to the file's folder unless absolute."""
        return path if path.is_absolute() else (self.base_dir / path).resolve()

    @property
    def cache_dir(self) -> Path:
        """The pipeline's cache dir, else $MLBENCH_CACHE_DIR, else the platform's user cache dir."""
        from mlbench.store.cache import default_cache_dir

        configured = self.config.cache.dir
        return default_cache_dir() if configured is None else self.resolve(configured)

    @property
    def history_path(self) -> Path:
        """The pipeline's history path, else $MLBENCH_HISTORY, else beside the default cache folder."""
        from mlbench.store.history import default_history_path

        configured = self.config.history.path
        return default_history_path() if configured is None else self.resolve(configured)

    @property
    def report_dir(self) -> Path:
        return self.resolve(self.config.report.dir or Path("reports") / self.config.name)


def load_pipeline(path: str | Path) -> Pipeline:
    """Read, check and validate a pipeline file. Raises UserError (PipelineInvalid for many)."""
    from mlbench.config.loader import load_yaml

    path = Path(path)
    loaded = load_yaml(path)
    try:
        config = PipelineConfig.model_validate(loaded.data)
    except ValidationError as exc:
        raise PipelineInvalid(errors_from_validation(exc, loaded)) from None
    problems = _check_references(config, loaded)
    if problems:
        raise PipelineInvalid(problems)
    return Pipeline(config=config, path=path.resolve(), sha256=loaded.sha256)
