"""Compression of a converted ML program with ``coremltools.optimize.coreml``: one pass per recipe
kind (palettize, linear_quantize, prune), applied to the whole model (``global_config``); a chain
applies its steps in order, each after the first with ``joint_compression=True`` (iOS18: e.g. sparse
palettized weights); ``linear_quantize_activations`` (W8A8) is ``activation_quantization``.

The recipes themselves are checked in ``deployment`` before anything is converted.
"""

from __future__ import annotations

from typing import Any

from mlbench.backends.apple.coremltools_messages import coremltools_captured, shorten_coremltools_message
from mlbench.backends.coreml.deployment import ExportError, InvalidExportOptions

__all__ = ["compress"]


def compress(ct: Any, mlmodel: Any, optimization: dict, sink: list[str],
             calibration: list[dict[str, Any]] | None = None) -> Any:
    """The model with ``optimization`` applied; a warning lands in ``sink`` when it compressed nothing.
    ``calibration`` (input dicts) feeds activation quantization.

    Raises ExportError (one line) when coremltools fails.
    """
    before = _ml_program_op_types(mlmodel.get_spec())
    try:
        with coremltools_captured(sink):
            if optimization["kind"] == "linear_quantize_activations":
                from mlbench.backends.coreml.activation_quantization import quantize_activations

                mlmodel = quantize_activations(ct, mlmodel, calibration or [], optimization.get("weights", True))
            elif optimization["kind"] == "chain":
                for i, step in enumerate(optimization["steps"]):
                    mlmodel = _compress(ct, mlmodel, step, joint=i > 0)
            else:
                mlmodel = _compress(ct, mlmodel, optimization)
    except InvalidExportOptions:
        raise
    except Exception as exc:  # noqa: BLE001 - any coremltools failure becomes one line
        message = shorten_coremltools_message(exc)
        if "scale cannot be 0" in message:
            message += " (an activation is 0 on every calibration sample; random weights often do this)"
        raise ExportError(f"{optimization['kind']} failed: {message}") from None
    after = _ml_program_op_types(mlmodel.get_spec())
    if optimization["kind"] == "linear_quantize_activations":
        if after.count("quantize") <= before.count("quantize"):
            sink.append("linear_quantize_activations quantized no activations")
    elif sum(t.startswith("constexpr_") for t in after) <= sum(t.startswith("constexpr_") for t in before):
        sink.append(
            f"{optimization['kind']} compressed no weights (only tensors over 2048 elements are compressed)"
        )
    return mlmodel


def _compress(ct: Any, mlmodel: Any, optimization: dict, joint: bool = False) -> Any:
    cto = ct.optimize.coreml
    extra: dict[str, Any] = {"joint_compression": True} if joint else {}
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
        return cto.palettize_weights(mlmodel, config, **extra)
    if kind == "linear_quantize":
        options: dict[str, Any] = {"mode": optimization.get("mode", "linear_symmetric"),
                                   "dtype": optimization.get("dtype", "int8"),
                                   "granularity": optimization.get("granularity", "per_channel")}
        if options["granularity"] == "per_block":
            options["block_size"] = optimization["block_size"]
        config = cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(**options))
        return cto.linear_quantize_weights(mlmodel, config, **extra)
    if kind == "prune":
        config = cto.OptimizationConfig(
            global_config=cto.OpMagnitudePrunerConfig(target_sparsity=float(optimization["target_sparsity"]))
        )
        return cto.prune_weights(mlmodel, config, **extra)
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
