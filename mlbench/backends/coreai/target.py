"""The `coreai` target (pydantic only: validating a pipeline never imports Core AI).

```yaml
targets:
  - backend: coreai
    precision: [float32, float16]
    optimize: [none, int4_block, palettize4]   # recipes under `optimizations:`, the same words as coreml's
    compute_units: [all]                       # macOS 27 only; the Linux reference runtime is the CPU
    estimate_on: [a17pro, m1]                  # Core ML's cost model and rules applied to the Core AI ops
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mlbench.backends.apple.chips import ChipId, builtin_chips, estimate_on_problems
from mlbench.backends.coreai.recipes import resolve, unsupported
from mlbench.config.base import NO_OPTIMIZATION, Axis, TargetBase, unknown_recipe

ComputeUnits = Literal["cpu_only", "cpu_and_gpu", "cpu_and_ne", "all"]


class CoreaiTarget(TargetBase):
    """Core AI via coreai-torch: a `.aimodel` asset per precision × optimization, verified by Core AI's
    reference runtime on Linux, measured on macOS 27."""

    backend: Literal["coreai"] = Field(description="Core AI (coreai-torch conversion; reference numerics on "
                                       "Linux x86_64, measured on macOS 27).")
    precision: Axis[Literal["float32", "float16"]] = Field(
        default=["float16"], description="float16 casts the exported program with coreai-opt's "
        "cast_fp32_to_fp16 (weights, inputs and ops; ops that would overflow stay float32).")
    compute_units: Axis[ComputeUnits] = Field(
        default=["all"], description="Compute units preferred through SpecializationOptions when the asset is "
        "loaded on macOS 27 (one export serves all); the Linux reference runtime runs on the CPU whatever is set.")
    optimize: Axis[str] = Field(
        default=[NO_OPTIMIZATION], description="'none' or names of recipes under `optimizations` (the coreml "
        "target's vocabulary), applied with coreai-opt's graph-side passes.")
    package: Path | None = Field(
        default=None, description="An existing .aimodel asset (relative to this file) to analyse and verify as it "
        "is: no export; optimize stays none. With several models, give it as an include entry.")

    estimate_on: list[ChipId] = Field(
        default_factory=list,
        description="Apple chips to estimate each variant's latency on (latency.estimated.<chip>) by Core ML's cost "
        "model and placement rules applied to the Core AI ops, where every op maps onto a Core ML op: ids of "
        "mlbench's built-in chip profiles (a14 a15 a16 a17pro a18pro m1 m1pro m1max m2 m3 m3max m4).",
    )

    axes = ("precision", "compute_units", "optimize")
    artifact_axes = ("precision", "optimize")
    measurement_options = ("estimate_on",)  # load-time hints and estimates: the package stays the same

    def existing_artifact(self) -> tuple[str, Path] | None:
        return None if self.package is None else ("package", self.package)

    def check(self, config: Any) -> list[tuple[tuple[str | int, ...], str]]:
        """Recipe names exist and coreai-opt can apply each of them."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        problems += estimate_on_problems(self.estimate_on, list(builtin_chips()))
        if self.package is not None:
            if self.optimize != [NO_OPTIMIZATION]:
                problems.append((("optimize",), "an existing asset is verified as it is: optimize stays none"))
            if len(self.precision) > 1:
                problems.append((("precision",), "an existing asset has one precision: give one value"))
            return problems
        recipes = config.optimizations
        for i, name in enumerate(self.optimize):
            if name == NO_OPTIMIZATION:
                continue
            if (unknown := unknown_recipe(name, recipes)) is not None:
                problems.append((("optimize", i), unknown))
                continue
            why_not = unsupported(resolve(name, recipes) or {})
            if why_not is not None:
                problems.append((("optimize", i), f"the coreai backend cannot apply recipe '{name}': {why_not}"))
        return problems
