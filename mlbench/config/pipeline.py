"""The pipeline file's pydantic models: the one source of truth for the YAML and its JSON schema.

Reading a file into a validated `Pipeline` is `mlbench.config.pipeline_file`. Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union, get_args, get_origin

from pydantic import Field, create_model, field_validator, model_validator

from mlbench.config.base import MAX_LIMIT_S, NO_OPTIMIZATION, Limits, StrictModel, TargetBase, first_repeat
from mlbench.config.models import (
    SAFE_NAME,
    SAFE_NAME_RE,
    SOURCE_PATTERN,
    InputDtype,
    ModelInput,
    ModelSpec,
    ShapeRange,
)
from mlbench.plugins.registry import specs

MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit
MAX_REPEATS = 1_000_000
DEFAULT_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
DEFAULT_MIN_SNR_DB = {"float32": 60.0, "float16": 30.0, "bfloat16": 20.0}
RECIPE_MIN_SNR_DB = 10.0
"""The SNR floor of a variant whose optimization recipe has no `min_snr_db` entry of its own (if its
precision's is higher): compression moves outputs by design, yet an all-zero or unrelated export
is at or below 0 dB."""

__all__ = ["SAFE_NAME", "SAFE_NAME_RE", "SOURCE_PATTERN", "InputDtype", "ModelInput", "ModelSpec", "PipelineConfig",
           "ShapeRange"]


class LatencySettings(StrictModel):
    warmup: int = Field(default=5, ge=0, le=MAX_REPEATS, description="Calls made and thrown away before timing.")
    repeats: int = Field(default=30, ge=1, le=MAX_REPEATS, description="Least number of timed calls.")
    min_time_s: float = Field(default=1.0, ge=0, le=3600, description="Least total seconds of timed calls.")
    max_repeats: int = Field(default=10_000, ge=1, le=MAX_REPEATS, description="Most timed calls, for very fast models.")
    retry_s: float = Field(
        default=60.0, ge=0, le=3600,
        description="Seconds at the end of a run for measuring suspect figures again: those graded unreliable, and "
        "those 3x or more off the variant's history median on this kind of machine, in rounds alternating with the "
        "model's reference variant (eager float32 on the CPU) where the run measured it. Both measurements are kept; the "
        "report uses the one near the history where only one is, else the better graded, else the faster; one still "
        "far from its history is graded unreliable when the two disagree, noisy when they agree. 0: none is measured "
        "again, and a figure far from its history is graded unreliable.")
    sustained_s: float = Field(
        default=0.0, ge=0, le=3600,
        description="Seconds each variant is also run continuously after its timed calls (0: none): reports "
        "latency.sustained.first and .last (the first and last window's medians) and .slope (ms per minute), with a "
        "note saying why it slowed (throttled: the thermal state rose; or the machine's load). Eager, ONNX Runtime, "
        "ExecuTorch, LiteRT and Core ML on macOS.")
    sustained_window_s: float = Field(
        default=60.0, gt=0, le=3600,
        description="The window whose median is taken at the start and end of a sustained run (a third of "
        "sustained_s when that is shorter).")
    max_thermal_state: Literal["nominal", "fair", "serious", "critical"] | None = Field(
        default=None,
        description="Wait before each variant until the machine's thermal state is this or cooler (macOS: "
        "ProcessInfo.thermalState; Linux: from the thermal zones' trip points), at most thermal_wait_s; where the "
        "state is unreadable nothing waits and the record says so.")
    thermal_wait_s: float = Field(
        default=300.0, ge=0, le=3600,
        description="Longest wait for max_thermal_state before a variant is measured anyway (the record says so).")

    @model_validator(mode="after")
    def _repeats_within_max(self) -> LatencySettings:
        if self.repeats > self.max_repeats:
            raise ValueError(f"repeats ({self.repeats}) is more than max_repeats ({self.max_repeats}); "
                             "raise max_repeats or lower repeats")
        return self


class MemorySettings(StrictModel):
    rounds: int = Field(
        default=1, ge=1, le=100,
        description="Load-and-predict rounds that memory.load and memory.peak are measured over (3 or more where a "
        "pipeline gates on memory; 1, the default, keeps one measurement and adds no process): the figure is their "
        "median, and their spread (largest minus smallest) widens compare's noise floor, since one round's figure "
        "moves by whole activation buffers with the allocator's state, which settles per process. With 2 or more, "
        "each round runs in a fresh process after the timed measurement, loads again and makes the first call "
        "(untimed); the timed measurement's own figures (its process built the model and ran other work first) "
        "are kept in details.memory.timed_round. Eager PyTorch (CPU), ONNX Runtime, ExecuTorch and LiteRT; Core "
        "ML and Core AI measure memory once.")


class LimitSettings(Limits):
    """Limits on the child processes that export and measure; a target's own `limits:` overrides them."""

    export_s: float | None = Field(
        default=1800.0, gt=0, le=MAX_LIMIT_S,
        description="Seconds one artifact's model load and export may take before the process is killed.")
    measure_s: float | None = Field(
        default=600.0, gt=0, le=MAX_LIMIT_S,
        description="Seconds one variant's measurement may take before the process is killed.")


class VerifySettings(StrictModel):
    tolerance: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: dict(DEFAULT_TOLERANCE),
        description="Largest allowed max_rel error versus eager float32, per precision; an optimization "
        "recipe's name (e.g. palettize4) may have its own entry, which wins over the precision's.",
    )
    samples: int = Field(
        default=1, ge=1, le=1000,
        description="Seeded input sets each verification runs; the worst max_rel counts, with the signal-to-noise "
        "ratio and, for class scores, top-1 agreement with eager.",
    )
    min_snr_db: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(
        default_factory=lambda: dict(DEFAULT_MIN_SNR_DB),
        description="Least signal-to-noise ratio in dB of every output versus eager float32, per precision; the "
        "scale-aware check beside max_rel, which cannot see a wrong export of small outputs. A recipe's name may "
        f"have its own entry; a recipe without one gets {RECIPE_MIN_SNR_DB:g} dB (or its precision's, if lower).",
    )

    localize_within: float | None = Field(
        default=2.0, ge=1.0,
        description="Localize the error (per op and module, against the float32 program; `mlbench explain`) of every "
        "variant that failed verification or passed within this factor of its limits (max_rel at least tolerance / "
        "factor, or SNR within 20·log10(factor) dB of the floor), where its backend can; null: only when asked.")

    def tolerance_for(self, precision: str, optimization: str | None = None) -> float:
        """The recipe's tolerance if given, else the precision's (the pipeline's, else mlbench's default)."""
        if optimization is not None and optimization in self.tolerance:
            return self.tolerance[optimization]
        return self.tolerance.get(precision, DEFAULT_TOLERANCE.get(precision, DEFAULT_TOLERANCE["float16"]))

    def min_snr_db_for(self, precision: str, optimization: str | None = None) -> float:
        """The recipe's SNR floor if given; else its precision's (the pipeline's, else mlbench's default),
        lowered to RECIPE_MIN_SNR_DB for a variant an optimization recipe compressed."""
        if optimization is not None and optimization in self.min_snr_db:
            return self.min_snr_db[optimization]
        floor = self.min_snr_db.get(precision, DEFAULT_MIN_SNR_DB.get(precision, DEFAULT_MIN_SNR_DB["float16"]))
        if optimization is not None and optimization != NO_OPTIMIZATION:
            return min(floor, RECIPE_MIN_SNR_DB)
        return floor


class ReportSettings(StrictModel):
    dir: Path | None = Field(default=None, description="Where reports go (relative to this file); default reports/NAME.")
    formats: list[Literal["json", "markdown", "html"]] = Field(
        default=["json", "markdown"], min_length=1,
        description="Report formats to write; html is one self-contained file with charts.",
    )
    gate: list[str] = Field(
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


TARGET_MODELS = tuple(spec.target for spec in specs().values())
"""Every registered backend's target model, in the registry's order (the schema lists them so)."""
def _recipe_members(recipes: Any) -> tuple[Any, ...]:
    """The recipe models a backend's `recipes` type holds: one model, or the members of a (discriminated) union."""
    if get_origin(recipes) is Annotated:
        recipes = get_args(recipes)[0]
    return get_args(recipes) if get_origin(recipes) is Union else (recipes,)


_RECIPES = [m for spec in specs().values() if spec.recipes is not None for m in _recipe_members(spec.recipes)]
Recipe: Any = (dict[str, Any] if not _RECIPES else _RECIPES[0] if len(_RECIPES) == 1  # several backends' recipes:
               else Annotated[Union[tuple(_RECIPES)], Field(discriminator="kind")])  # noqa: UP007  one union by kind
"""An `optimizations:` entry: the recipes the registered backends define."""


def _include_model(target: type[TargetBase]) -> type[TargetBase]:
    """An include entry is a one-model target: the target's fields plus `model`."""
    return create_model(
        f"{target.__name__}Include",
        __base__=target,
        __doc__=f"An extra variant of {target.__name__}: its fields plus the model it is for.",
        model=(str, Field(description="Name of a model in `models`.")),
    )


INCLUDE_MODELS = tuple(_include_model(t) for t in TARGET_MODELS)

if TYPE_CHECKING:
    # The unions are built at import time from the registry; to a type checker a target is the
    # backends' common base, and an include entry is one with a `model`.
    class _IncludeTarget(TargetBase):
        model: str

    TargetUnion: TypeAlias = TargetBase
    IncludeUnion: TypeAlias = _IncludeTarget
else:
    TargetUnion = Annotated[Union[tuple(TARGET_MODELS)], Field(discriminator="backend")]  # noqa: UP007
    IncludeUnion = Annotated[Union[tuple(INCLUDE_MODELS)], Field(discriminator="backend")]  # noqa: UP007


class PipelineConfig(StrictModel):
    """A benchmark sweep: models × targets (each list value an axis), minus exclude, plus include.

    This schema checks each key and value on its own. Rules that need the whole file, its folder or mlbench's
    registries only `mlbench validate` checks (run it before committing): a target's optimize names a recipe
    under optimizations that its backend can apply; model names are unique; estimate_on names a known chip (or
    one in chip_profiles); include models and exclude values name models and axis values that exist; verify's
    tolerance and min_snr_db keys are precisions or recipes; model files, modules and their factories exist;
    saved models, values files and existing packages are there; no variant is given twice with different
    options, and the matrix is not empty."""

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
    memory: MemorySettings = Field(default_factory=MemorySettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    seed: int = Field(default=0, description="Seed for model weights and inputs: the same file gives the same numbers.")

    @field_validator("seed", mode="before")
    @classmethod
    def _seed_range(cls, seed: Any) -> Any:
        if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= MAX_SEED:
            raise ValueError(f"the seed must be between 0 and {MAX_SEED} (2^32 - 1), got {seed}")
        return seed

    @field_validator("optimizations")
    @classmethod
    def _recipe_names(cls, recipes: dict[str, Any]) -> dict[str, Any]:
        for name in recipes:
            if name == NO_OPTIMIZATION or not SAFE_NAME_RE.fullmatch(name):
                raise ValueError(f"{name!r} cannot name a recipe: use letters, digits, - _ . and not 'none'")
        return recipes

    @field_validator("models")
    @classmethod
    def _unique_model_names(cls, models: list[ModelSpec]) -> list[ModelSpec]:
        if (name := first_repeat([m.name for m in models])) is not None:
            raise ValueError(f"model name '{name}' is used twice")
        return models


def pipeline_schema() -> dict[str, Any]:
    """JSON schema of the pipeline file, generated from the models above."""
    from mlbench.config.json_schema import tagged_unions_as_if_then

    schema = tagged_unions_as_if_then(PipelineConfig.model_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mlbench pipeline"
    return schema
