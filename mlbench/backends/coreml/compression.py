"""Weight compression of a converted ML program with ``coremltools.optimize.coreml``: one pass per
recipe kind (palettize, linear_quantize, prune), applied to the whole model (``global_config``).

The recipes themselves are checked in ``deployment`` before anything is converted.
"""

from __future__ import annotations

from typing import Any

from mlbench.backends.coreml.deployment import ExportError, InvalidExportOptions
from mlbench.backends.coreml.messages import coremltools_captured, shorten_coremltools_message

__all__ = ["compress"]


def compress(ct: Any, mlmodel: Any, optimization: dict, sink: list[str]) -> Any:
    """The model with ``optimization`` applied; a warning lands in ``sink`` when it compressed nothing.

    Raises ExportError (one line) when coremltools fails.
    """
    before = _ml_program_op_types(mlmodel.get_spec())
    try:
        with coremltools_captured(sink):
            mlmodel = _compress(ct, mlmodel, optimization)
    except InvalidExportOptions:
        raise
    except Exception as exc:  # noqa: BLE001 - any coremltools failure becomes one line
        raise ExportError(
            f"{optimization['kind']} failed: {shorten_coremltools_message(exc)}"
        ) from None
    after = _ml_program_op_types(mlmodel.get_spec())
    if sum(t.startswith("constexpr_") for t in after) <= sum(t.startswith("constexpr_") for t in before):
        sink.append(
            f"{optimization['kind']} compressed no weights (only tensors over 2048 elements are compressed)"
        )
    return mlmodel


def _compress(ct: Any, mlmodel: Any, optimization: dict) -> Any:
    cto = ct.optimize.coreml
    kind = optimization["kind"]
    if kind == "palettize":
        granularity = optimization.get("granularity", "per_tensor")
        kwargs: dict[str, Any] = {
            "mode": optimization.get("mode", "kmeans"),
            "nbits": optimization["nbits"],
            "granularity": granularity,
        }
        if granularity == "per_grouped_channel":
            kwargs["group_size"] = optimization["group_size"]
        config = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(**kwargs))
        return cto.palettize_weights(mlmodel, config)
    if kind == "linear_quantize":
        config = cto.OptimizationConfig(
            global_config=cto.OpLinearQuantizerConfig(
                mode=optimization.get("mode", "linear_symmetric"),
                dtype=optimization.get("dtype", "int8"),
            )
        )
        return cto.linear_quantize_weights(mlmodel, config)
    if kind == "prune":
        config = cto.OptimizationConfig(
            global_config=cto.OpMagnitudePrunerConfig(target_sparsity=float(optimization["target_sparsity"]))
        )
        return cto.prune_weights(mlmodel, config)
    raise InvalidExportOptions(f"unknown optimization kind {kind!r}")  # validated earlier


def _ml_program_op_types(spec: Any) -> list[str]:
    """Every op type in the ML program's functions (nested blocks included)."""
    types: list[str] = []

    def walk(block: Any) -> None:
        for op in block.operations:
            types.append(op.type)
            for inner in op.blocks:
                walk(inner)

    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            walk(block)
    return types
