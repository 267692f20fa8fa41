"""The `litert` target and its quantization recipes (pydantic only: validating never imports litert-torch).

```yaml
targets:
  - backend: litert
    precision: [float32, float16]   # float16: weights stored as float16, computed in float32 by XNNPACK
    optimize: [none, dyn8, int8]    # names of recipes under `optimizations` (kind litert_quantize)
    threads: [1, 4]                 # the interpreter's num_threads; default 1, as a phone benchmark runs
optimizations:
  dyn8: {kind: litert_quantize, scheme: dynamic_int8}
  int8: {kind: litert_quantize, scheme: full_int8}
```

`precision` and `optimize` shape the exported .tflite file; `threads` is chosen when the interpreter is
created, so one export serves every thread count.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from mlbench.config.base import NO_OPTIMIZATION, SHAPE_AXIS, Axis, StrictModel, TargetBase, unknown_recipe

SCHEMES = ("dynamic_int8", "weight_only_int8", "full_int8", "weight_only_int4")


class LitertQuantizeRecipe(StrictModel):
    """LiteRT post-training quantization, applied by litert-torch's PT2E quantizer while converting.

    dynamic_int8: int8 weights, activations quantized on the fly (dynamic range); weight_only_int8 and
    weight_only_int4: int8 / int4 weights, float computation; full_int8: int8 weights and activations, the
    activation ranges calibrated on the model's `values:` samples if it has any, else the verify.samples
    seeded input sets."""

    kind: Literal["litert_quantize"]
    scheme: Literal["dynamic_int8", "weight_only_int8", "full_int8", "weight_only_int4"] = Field(
        description="Which quantization (see docs/backends/litert.md for the API each uses).")


class LitertTarget(TargetBase):
    """LiteRT: a .tflite file per precision × optimization (litert-torch), measured through the LiteRT
    interpreter with the XNNPACK delegate on this machine's CPU."""

    backend: Literal["litert"] = Field(
        description="LiteRT (litert-torch export, ai-edge-litert interpreter with XNNPACK; measured on Linux/macOS).")
    precision: Axis[Literal["float32", "float16"]] = Field(
        default=["float32"],
        description="float16 stores the weights as float16 (the converter's float16 weight quantization); "
        "inputs and outputs stay float32.",
    )
    optimize: Axis[str] = Field(
        default=[NO_OPTIMIZATION], description="'none' or names of litert_quantize recipes under `optimizations`.")
    threads: Axis[Annotated[int, Field(ge=1)]] = Field(
        default=[1], description="The interpreter's num_threads (and XNNPACK's); default 1, what a phone benchmark "
        "uses. Chosen when the interpreter is created: one export serves every value.")

    axes = ("precision", "optimize", "threads")
    artifact_axes = ("precision", "optimize", SHAPE_AXIS)  # one static export per shape (backend.PER_SHAPE)

    def check(self, config: Any) -> list[tuple[tuple[str | int, ...], str]]:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        recipes = config.optimizations
        ours = [name for name, recipe in recipes.items() if isinstance(recipe, LitertQuantizeRecipe)]
        names = [NO_OPTIMIZATION, *ours]
        for i, name in enumerate(self.optimize):
            if name == NO_OPTIMIZATION:
                continue
            if (unknown := unknown_recipe(name, recipes, ours)) is not None:
                problems.append((("optimize", i), unknown))
            elif name not in ours:
                problems.append((("optimize", i), (f"optimization '{name}' is not a litert_quantize recipe "
                                 f"(litert takes: {', '.join(names)})")))
        return problems
