"""The `executorch` target (pydantic only: validating a pipeline never imports torch or executorch).

```yaml
optimizations:
  q8: {kind: xnnpack_quantize, scheme: int8_dynamic}
targets:
  - backend: executorch
    delegate: [xnnpack, portable, coreml]
    precision: [float32]
    optimize: [none, q8]
```

Every axis shapes the `.pte` program: the delegate decides which partitioner lowers the graph, the
precision and the recipe what the graph holds. Measurement settings (warmup, repeats) never enter the key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from mlbench.config.base import NO_OPTIMIZATION, Axis, StrictModel, TargetBase, suggest

DELEGATES = ("xnnpack", "portable", "coreml")


class XnnpackQuantizeRecipe(StrictModel):
    """ExecuTorch's documented XNNPACK quantization.

    - `int8_dynamic`: PT2E with `XNNPACKQuantizer` and `get_symmetric_quantization_config(is_per_channel=True,
      is_dynamic=True)`: int8 per-channel weights, activations quantized at run time;
    - `8da4w`: torchao `quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
      granularity=PerGroup(group_size)))` on the linear layers: int4 grouped weights, int8 dynamic activations.
    """

    kind: Literal["xnnpack_quantize"]
    scheme: Literal["int8_dynamic", "8da4w"] = Field(description="int8_dynamic (PT2E XNNPACKQuantizer) or 8da4w "
                                                     "(torchao, linear layers only).")
    group_size: int | None = Field(default=None, ge=1, description="Input channels per weight group (8da4w only; "
                                   "default 32).")

    @model_validator(mode="after")
    def _group_size_with_8da4w(self) -> XnnpackQuantizeRecipe:
        if self.group_size is not None and self.scheme != "8da4w":
            raise ValueError("group_size is only used with scheme 8da4w")
        return self


class ExecutorchTarget(TargetBase):
    """ExecuTorch: a .pte program per delegate × precision × optimization, run by executorch.runtime."""

    backend: Literal["executorch"] = Field(
        description="ExecuTorch (torch.export → to_edge_transform_and_lower → .pte; xnnpack and portable measured "
        "on Linux and macOS, coreml on macOS).")
    delegate: Axis[Literal["xnnpack", "portable", "coreml"]] = Field(
        default=["xnnpack"],
        description="The partitioner that lowers the graph: xnnpack (CPU), coreml (Core ML delegate) or portable "
        "(no delegate: ExecuTorch's portable kernels). Ops a delegate rejects stay on portable kernels, counted.")
    precision: Axis[Literal["float32", "float16"]] = Field(
        default=["float32"], description="float16 runs the module in half precision (inputs cast inside the "
        "program; outputs cast back to float32); with coreml, the delegate's compute precision.")
    optimize: Axis[str] = Field(
        default=[NO_OPTIMIZATION], description="'none' or names of xnnpack_quantize recipes under `optimizations` "
        "(xnnpack delegate, float32 only).")
    profile_runs: int = Field(
        default=5, ge=1, le=1000,
        description="Runs of a separate, event-traced program that give the per-operator table (ETDump); never "
        "part of the latency figures.")

    estimate_on: list[str] = Field(
        default_factory=list,
        description="Apple chips to estimate the Core ML delegate's embedded programs on (latency.estimated.<chip>, "
        "any OS; the Core ML partitions only): ids from mlbench's chip profiles (a14 a15 a16 a17pro a18pro m1 m1pro "
        "m1max m2 m3 m3max m4).")

    axes = ("delegate", "precision", "optimize")
    artifact_axes = ("delegate", "precision", "optimize")

    def check(self, config: Any) -> list[tuple[tuple[str | int, ...], str]]:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        recipes = config.optimizations
        names = [NO_OPTIMIZATION, *(n for n, r in recipes.items() if isinstance(r, XnnpackQuantizeRecipe))]
        for i, name in enumerate(self.optimize):
            if name not in names:
                problems.append((("optimize", i), f"unknown xnnpack_quantize optimization '{name}'"
                                 f"{suggest(name, names)} (known: {', '.join(names)})"))
        if self.estimate_on:
            from mlbench.backends.apple.chips import builtin_chips, estimate_on_problems  # Core ML's chip profiles

            problems += estimate_on_problems(self.estimate_on, list(builtin_chips()))
            if "coreml" not in self.delegate:
                problems.append((("estimate_on",), "estimate_on estimates the Core ML delegate's programs; add "
                                 "coreml to delegate or drop estimate_on"))
        quantized = [n for n in self.optimize if n != NO_OPTIMIZATION]
        if quantized and self.delegate != ["xnnpack"]:
            problems.append((("optimize",), "xnnpack_quantize recipes need delegate: xnnpack alone; give the other "
                             "delegates a target entry of their own"))
        if quantized and "float16" in self.precision:
            problems.append((("optimize",), "xnnpack_quantize recipes quantize a float32 model; use precision: "
                             "float32 with them"))
        return problems
