"""The `coreml` target and the named optimization recipes it refers to (pydantic only, no coremltools).

```yaml
targets:
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]
    optimize: [none, palettize4]
    deployment_target: macOS14      # default: the lowest all these variants need
    estimate_on: [a17pro, m1]       # latency.estimated.<chip> per variant (chips.yaml or chip_profiles)
optimizations:
  palettize4: {kind: palettize, nbits: 4, mode: kmeans}
```
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, Field, model_validator

from mlbench.backends.apple.chips import ChipId, ChipProfile, builtin_chips, estimate_on_problems
from mlbench.backends.coreml.deployment import InvalidExportOptions, check_deployment_target, valid_deployment_targets
from mlbench.config.base import NO_OPTIMIZATION, Axis, StrictModel, TargetBase, suggest, unknown_recipe

ComputeUnits = Literal["cpu_only", "cpu_and_gpu", "cpu_and_ne", "all"]
LOCAL_DEVICE = "local"
DEVICE_NAME = re.compile(r"^(local|connected:(iphone|ipad)|[A-Za-z0-9][A-Za-z0-9 ._'’()-]{0,63})$")


def _device_name(value: str) -> str:
    if not DEVICE_NAME.fullmatch(value):
        raise ValueError(f"'{value}' names no device: use local, connected:iphone, connected:ipad, or a connected "
                         "device's name or UDID (letters, digits, spaces and . _ ' ( ) -)")
    return value


DeviceName = Annotated[str, AfterValidator(_device_name)]
"""local, connected:iphone, connected:ipad, or a device's name or UDID (as `xcrun devicectl list devices` shows)."""


class PalettizeRecipe(StrictModel):
    """Weight palettization: each weight becomes indices into a look-up table of 2^nbits values."""

    kind: Literal["palettize"]
    nbits: Literal[1, 2, 3, 4, 6, 8] = Field(description="Bits per index (3 needs iOS18).")
    mode: Literal["kmeans", "uniform"] = Field(default="kmeans", description="How the table is chosen.")
    granularity: Literal["per_tensor", "per_grouped_channel"] = Field(
        default="per_tensor", description="One table per tensor, or per group of channels (iOS18)."
    )
    group_size: int | None = Field(default=None, ge=1, description="Channels per table with per_grouped_channel.")
    exclude: list[str] = Field(
        default_factory=list, description="PyTorch module paths (e.g. encoder.layer.3.attention) whose weights stay "
        "uncompressed, with every module under them; or Core ML op names. `mlbench explain` advises them.")

    @model_validator(mode="after")
    def _group_size_with_groups(self) -> PalettizeRecipe:
        if self.granularity == "per_grouped_channel" and self.group_size is None:
            raise ValueError("per_grouped_channel needs group_size")
        if self.granularity == "per_tensor" and self.group_size is not None:
            raise ValueError("group_size is only allowed with granularity per_grouped_channel")
        return self


class LinearQuantizeRecipe(StrictModel):
    """Weight-only linear quantization (activations stay floating point)."""

    kind: Literal["linear_quantize"]
    dtype: Literal["int8", "uint8", "int4", "uint4"] = Field(default="int8", description="Stored weight type (4-bit "
                                                            "needs iOS18).")
    mode: Literal["linear_symmetric", "linear"] = Field(default="linear_symmetric")
    granularity: Literal["per_tensor", "per_channel", "per_block"] = Field(
        default="per_channel", description="One scale per tensor, per output channel, or per block of input "
        "channels (per_block needs iOS18).")
    block_size: int | None = Field(default=None, ge=1, description="Input channels per block with per_block.")
    exclude: list[str] = Field(
        default_factory=list, description="PyTorch module paths (e.g. encoder.layer.3.attention) whose weights stay "
        "uncompressed, with every module under them; or Core ML op names. `mlbench explain` advises them.")

    @model_validator(mode="after")
    def _block_size_with_blocks(self) -> LinearQuantizeRecipe:
        if self.granularity == "per_block" and self.block_size is None:
            raise ValueError("per_block needs block_size")
        if self.granularity != "per_block" and self.block_size is not None:
            raise ValueError("block_size is only allowed with granularity per_block")
        return self


class ActivationQuantizeRecipe(StrictModel):
    """W8A8: activations quantized to int8 from calibration statistics, then the weights to int8 (iOS17).

    coremltools calibrates by predicting; off macOS mlbench's interpreter computes the activations it
    needs. Calibration data: the model's `values:` samples if it has any, else the verify.samples
    seeded input sets."""

    kind: Literal["linear_quantize_activations"]
    weights: bool = Field(default=True, description="Also quantize the weights to int8 (W8A8); false: A8 only.")


class ChainRecipe(StrictModel):
    """Joint compression: other recipes applied in order (e.g. prune then palettize: sparse palettized
    weights, iOS18), each step after the first keeping what the earlier ones made."""

    kind: Literal["chain"]
    steps: list[str] = Field(min_length=2, description="Names of recipes under `optimizations`, applied in order.")


class PruneRecipe(StrictModel):
    """Magnitude pruning: the smallest weights become zeros stored sparsely."""

    kind: Literal["prune"]
    target_sparsity: float = Field(ge=0.0, le=1.0, description="Share of each weight set to zero.")
    exclude: list[str] = Field(
        default_factory=list, description="PyTorch module paths (e.g. encoder.layer.3.attention) whose weights stay "
        "uncompressed, with every module under them; or Core ML op names. `mlbench explain` advises them.")


Recipe = Annotated[Union[PalettizeRecipe, LinearQuantizeRecipe, PruneRecipe, ActivationQuantizeRecipe,  # noqa: UP007
                         ChainRecipe], Field(discriminator="kind")]
COREML_RECIPES = (PalettizeRecipe, LinearQuantizeRecipe, PruneRecipe, ActivationQuantizeRecipe, ChainRecipe)
"""The recipe classes Core ML's exporter applies: another backend's recipe kind is refused when validating."""
COREML_KINDS = ("palettize", "linear_quantize", "prune", "linear_quantize_activations", "chain")


def recipe_dict(recipe: StrictModel | None, recipes: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The recipe as the exporter takes it (unset optional keys left out; a chain's steps resolved by name
    from `recipes`)."""
    if recipe is None:
        return None
    data = recipe.model_dump(exclude_none=True)
    if not data.get("exclude"):  # no exclusion: the same recipe (and cache key) as before the field existed
        data.pop("exclude", None)
    if isinstance(recipe, ChainRecipe):
        data["steps"] = [recipe_dict((recipes or {}).get(step)) or {"kind": step} for step in recipe.steps]
    return data


class CoremlTarget(TargetBase):
    """Core ML via coremltools: an ML program per precision × optimization, measured per compute unit."""

    backend: Literal["coreml"] = Field(description="Core ML (coremltools export; measured on macOS).")
    precision: Axis[Literal["float32", "float16"]] = Field(default=["float16"], description="Compute precision.")
    compute_units: Axis[ComputeUnits] = Field(
        default=["all"], description="Core ML compute units, chosen at load time (one export serves all)."
    )
    optimize: Axis[str] = Field(
        default=[NO_OPTIMIZATION], description="'none' or names of recipes under `optimizations`."
    )
    deployment_target: str | None = Field(
        default=None, description="e.g. iOS17, macOS14; default: the lowest every variant of the model in this target "
        "needs, so they differ only in precision and optimization (a float16 program takes float16 inputs from iOS16 "
        "on, float32 inputs cast on the CPU before)."
    )
    package: Path | None = Field(
        default=None,
        description="An existing .mlpackage (relative to this file) to measure as it is: no export. precision "
        "names its precision; optimize stays none. With several models, give it as an include entry.",
    )
    reshape_frequency: Literal["frequent", "infrequent"] | None = Field(
        default=None,
        description="Core ML's reshape-frequency hint for flexible inputs (iOS17.4+/macOS14.4+), given when the "
        "model is loaded: infrequent lets Core ML specialise for a shape and keep it. Recorded with each variant.",
    )

    device: Axis[DeviceName] = Field(
        default=[LOCAL_DEVICE],
        description="Where the variant is measured: local (this Mac), connected:iphone or connected:ipad (the first "
        "such device devicectl lists as connected), or a connected device's name or UDID; through coremltools' remote "
        "device (macOS with Xcode, the ModelRunner app signed from MLBENCH_DEVICE_TEAM or the devices file, never "
        "from this file). One export serves every device; elsewhere its variants are skipped, saying why.",
    )
    estimate_on: list[ChipId] = Field(
        default_factory=list,
        description="Apple chips to estimate each variant's latency on (metric latency.estimated.<chip>, any OS): "
        "ids from mlbench's chip profiles (a14 a15 a16 a17pro a18pro m1 m1pro m1max m2 m3 m3max m4) or chip_profiles.",
    )
    chip_profiles: dict[ChipId, ChipProfile] = Field(
        default_factory=dict, description="Your own chip profiles by id (peaks and bandwidth, each with its source), "
        "usable in estimate_on beside the built-in ones.",
    )

    calibration: Path | None = Field(
        default=None, description="A calibration profile written by `mlbench calibrate` from measured Mac runs, or "
        "a folder of them (relative to this file): estimates on a chip with a profile use its fitted parameters "
        "and say so; placement follows the profile's observations before the rules (ops marked `observed`).",
    )

    axes = ("precision", "compute_units", "optimize", "device")
    artifact_axes = ("precision", "optimize")

    def axis_values(self) -> dict[str, list[Any]]:
        """The device axis only where a target names a device: local-only variants keep the ids they had."""
        values = super().axis_values()
        if self.device == [LOCAL_DEVICE]:
            del values["device"]
        return values
    measurement_options = ("estimate_on", "chip_profiles", "reshape_frequency")  # load-time hints and estimates: the package stays the same

    def existing_artifact(self) -> tuple[str, Path] | None:
        return None if self.package is None else ("package", self.package)

    def check(self, config: Any) -> list[tuple[tuple[str | int, ...], str]]:
        """Cross-field checks: recipe names exist; the deployment target suits every combination."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.package is not None:
            if self.optimize != [NO_OPTIMIZATION]:
                problems.append((("optimize",), "an existing package is measured as it is: optimize stays none"))
            if len(self.precision) > 1:
                problems.append((("precision",), "an existing package has one precision: give one value"))
            if self.deployment_target is not None:
                problems.append((("deployment_target",), "an existing package keeps its own deployment target"))
            return problems
        recipes = config.optimizations
        for i, name in enumerate(self.optimize):
            if (unknown := unknown_recipe(name, recipes)) is not None:
                problems.append((("optimize", i), unknown))
            elif name != NO_OPTIMIZATION and not isinstance(recipes[name], COREML_RECIPES):
                problems.append((("optimize", i), f"recipe '{name}' is of kind '{recipes[name].kind}', which Core ML "
                                 f"cannot apply (Core ML's kinds: {', '.join(COREML_KINDS)})"))
        builtin = builtin_chips()
        for chip_id in self.chip_profiles:
            if chip_id in builtin:
                problems.append((("chip_profiles", chip_id), f"chip '{chip_id}' is one of mlbench's profiles; "
                                 "give yours another id"))
        problems += estimate_on_problems(self.estimate_on, [*builtin, *self.chip_profiles],
                                         "; add your own under chip_profiles")
        for name in self.optimize:
            recipe = recipes.get(name)
            if isinstance(recipe, ChainRecipe):
                for step in recipe.steps:
                    if step not in recipes or not isinstance(recipes[step], (PalettizeRecipe, LinearQuantizeRecipe,
                                                                            PruneRecipe)):
                        known = [n for n, r in recipes.items()
                                 if isinstance(r, (PalettizeRecipe, LinearQuantizeRecipe, PruneRecipe))]
                        problems.append(((), f"recipe '{name}' step '{step}' must name a palettize, linear_quantize "
                                         f"or prune recipe{suggest(step, known)}"))
        if problems:
            return problems
        if self.deployment_target is not None:
            enumerated = max((m.enumerated_inputs for m in config.models
                              if getattr(self, "model", m.name) == m.name), default=0)
            for precision in self.precision:
                for name in self.optimize:
                    try:
                        check_deployment_target(self.deployment_target, precision,
                                                recipe_dict(recipes.get(name), recipes),
                                                enumerated_inputs=enumerated)
                    except InvalidExportOptions as exc:
                        message = str(exc)
                        if message.startswith("unknown deployment target"):
                            message = (f"unknown deployment target '{self.deployment_target}'"
                                       f"{suggest(self.deployment_target, valid_deployment_targets())}")
                        return [(("deployment_target",), message)]
        return problems
