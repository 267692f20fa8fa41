"""The `optimizations:` vocabulary (Core ML's recipe kinds) applied to a Core AI program with coreai-opt's
graph-side passes (``coreai_opt.coreai_utils``), so one recipe name means the same compression on both
backends. Pure Python here: `unsupported` is asked when a pipeline is validated; `apply` imports coreai-opt.

| recipe | coreai-opt call |
|---|---|
| palettize (kmeans) | ``palettize_weights(program, None, n_bits=, granularity=PER_TENSOR / PER_GROUPED_CHANNEL, group_size=)`` |
| linear_quantize | ``quantize_weights(program, DType.INT8/UINT8/INT4/UINT4, qscheme=SYMMETRIC / ASYMMETRIC, granularity=PER_TENSOR / PER_CHANNEL / PER_BLOCK, block_size=)`` |
| prune | ``sparsify_weights(program, target_sparsity=)`` |
| chain [prune, palettize] | ``sparsify_weights(program, target_sparsity=, palettize_nbits=)`` (sparse palettized weights) |
| chain [prune, linear_quantize int8/uint8 per_channel] | ``sparsify_weights(program, target_sparsity=, quantize_dtype=)`` |
| linear_quantize_activations (W8A8) | before conversion: ``Quantizer(module, QuantizerConfig())`` → ``prepare`` → calibration runs in ``calibration_mode()`` → ``finalize()`` (``quantize_torch``) |

Every pass compresses only weights of at least ``WEIGHT_THRESHOLD`` elements: coremltools' default (2048),
not coreai-opt's (1024), so both backends leave the same small tensors alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

WEIGHT_THRESHOLD = 2048
"""Smallest weight (elements) a pass compresses: coremltools.optimize.coreml's default weight_threshold."""

_QSCHEME = {"linear_symmetric": "SYMMETRIC", "linear": "ASYMMETRIC"}


def as_dict(recipe: Any) -> dict[str, Any] | None:
    """A recipe entry (a registered backend's pydantic model, or a dict) as a plain dict, unset keys left out."""
    if recipe is None:
        return None
    data = recipe.model_dump(exclude_none=True) if hasattr(recipe, "model_dump") else {
        k: v for k, v in dict(recipe).items() if v is not None}
    if not data.get("exclude"):  # Core ML's per-module exclusion, unset: the recipe (and key) as before it
        data.pop("exclude", None)
    return data


def resolve(name: str, recipes: dict[str, Any]) -> dict[str, Any] | None:
    """The named recipe as the exporter takes it: a chain's steps resolved by name."""
    data = as_dict(recipes.get(name))
    if data is not None and data.get("kind") == "chain":
        data["steps"] = [as_dict(recipes.get(step)) or {"kind": step} for step in data["steps"]]
    return data


def unsupported(recipe: dict[str, Any]) -> str | None:
    """Why coreai-opt cannot apply `recipe` (resolved), in a few words; None when it can."""
    kind = recipe.get("kind")
    if recipe.get("exclude") or any(step.get("exclude") for step in recipe.get("steps", []) if isinstance(step, dict)):
        return "exclude (modules left uncompressed) is applied by Core ML's exporter only, not yet by coreai-opt"
    if kind == "palettize":
        if recipe.get("mode", "kmeans") != "kmeans":
            return "coreai-opt palettizes by k-means only (mode: uniform has no Core AI pass)"
        return None
    if kind == "linear_quantize":
        return None
    if kind == "prune":
        return None
    if kind == "linear_quantize_activations":
        if not recipe.get("weights", True):
            return "coreai-opt's quantizer is applied here as W8A8 only (weights: false has no Core AI recipe yet)"
        return None
    if kind == "chain":
        steps = recipe.get("steps", [])
        kinds = [step.get("kind") for step in steps]
        if len(steps) == 2 and kinds[0] == "prune":
            second = steps[1]
            if second.get("kind") == "palettize" and second.get("mode", "kmeans") == "kmeans" \
                    and second.get("granularity", "per_tensor") == "per_tensor":
                return None
            if second.get("kind") == "linear_quantize" and second.get("dtype", "int8") in ("int8", "uint8") \
                    and second.get("granularity", "per_channel") == "per_channel" \
                    and second.get("mode", "linear_symmetric") == "linear_symmetric":
                return None
        return ("coreai-opt joins only prune then palettize (kmeans, per_tensor) or prune then linear_quantize "
                f"(int8/uint8, per_channel, symmetric); this chain is {' then '.join(str(k) for k in kinds)}")
    return f"unknown optimization kind {kind!r}"


@contextmanager
def serial_kmeans() -> Iterator[None]:
    """While active, coreai-opt's k-means runs in this process. Its sparse palettization hard-codes a pool of 4
    forked workers (`_utils.palettize_utils._compress_pool`), which hangs when forked from a process whose
    threads torch and Core AI already started; a serial stand-in with the pool's `starmap` avoids the fork."""
    from coreai_opt.coreai_utils._utils import palettize_utils

    class _Serial:
        @staticmethod
        def starmap(func: Any, iterable: Any) -> list[Any]:
            return [func(*args) for args in iterable]

    saved = palettize_utils._compress_pool
    palettize_utils._compress_pool = _Serial()
    try:
        yield
    finally:
        palettize_utils._compress_pool = saved


def apply(program: Any, recipe: dict[str, Any]) -> Any:
    """`program` (an AIProgram) with `recipe` applied by coreai-opt; raises ValueError for what it cannot apply."""
    from coreai_opt.coreai_utils import (
        CompressionGranularity,
        DType,
        QScheme,
        palettize_weights,
        quantize_weights,
        sparsify_weights,
    )

    why_not = unsupported(recipe)
    if why_not is not None:
        raise ValueError(why_not)
    kind = recipe["kind"]
    if kind == "linear_quantize_activations":
        return program  # applied to the torch module before conversion (quantize_torch)
    with serial_kmeans():
        if kind == "palettize":
            grouped = recipe.get("granularity", "per_tensor") == "per_grouped_channel"
            return palettize_weights(
                program, None, n_bits=int(recipe["nbits"]),
                granularity=CompressionGranularity.PER_GROUPED_CHANNEL if grouped else CompressionGranularity.PER_TENSOR,
                group_size=int(recipe.get("group_size") or 32), weight_num_threshold=WEIGHT_THRESHOLD,
                num_kmeans_workers=1)
        if kind == "linear_quantize":
            granularity = recipe.get("granularity", "per_channel")
            return quantize_weights(
                program, DType(recipe.get("dtype", "int8")),
                qscheme=QScheme[_QSCHEME[recipe.get("mode", "linear_symmetric")]],
                granularity=CompressionGranularity(granularity), block_size=int(recipe.get("block_size") or 32),
                weight_num_threshold=WEIGHT_THRESHOLD)
        if kind == "prune":
            return sparsify_weights(program, target_sparsity=float(recipe["target_sparsity"]),
                                    weight_num_threshold=WEIGHT_THRESHOLD)
        prune, second = recipe["steps"]
        if second["kind"] == "palettize":
            return sparsify_weights(program, target_sparsity=float(prune["target_sparsity"]),
                                    palettize_nbits=int(second["nbits"]), weight_num_threshold=WEIGHT_THRESHOLD)
        return sparsify_weights(program, target_sparsity=float(prune["target_sparsity"]),
                                quantize_dtype=DType(second.get("dtype", "int8")), weight_num_threshold=WEIGHT_THRESHOLD)


def quantize_torch(module: Any, example_inputs: list[Any], calibration: list[list[Any]]) -> Any:
    """W8A8 by coreai-opt's quantizer (graph mode, int8 weights and activations, its defaults): the module
    prepared on `example_inputs`, calibrated on each input list of `calibration`, finalized for Core AI (its
    quantize/dequantize become Core AI custom ops the converter lowers)."""
    import torch
    from coreai_opt.quantization import Quantizer, QuantizerConfig

    if not calibration:
        raise ValueError("activation quantization needs calibration samples (the model's values or seeded inputs)")
    quantizer = Quantizer(module, QuantizerConfig())
    prepared = quantizer.prepare(tuple(example_inputs))
    with torch.no_grad(), quantizer.calibration_mode():
        for inputs in calibration:
            prepared(*inputs)
    return quantizer.finalize()
