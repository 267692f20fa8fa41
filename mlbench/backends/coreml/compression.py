"""Compression of a converted ML program with ``coremltools.optimize.coreml``: one pass per recipe
kind (palettize, linear_quantize, prune), applied to the whole model (``global_config``); a chain
applies its steps in order, each after the first with ``joint_compression=True`` (iOS18: e.g. sparse
palettized weights); a recipe's ``exclude`` (module paths) becomes ``op_name_configs={op: None}``, which
coremltools reads as "leave this op's weights as they are"; ``linear_quantize_activations`` (W8A8) is ``activation_quantization``.

The recipes themselves are checked in ``deployment`` before anything is converted.
"""

from __future__ import annotations

from typing import Any

from mlbench.backends.apple.coremltools_messages import coremltools_captured, shorten_coremltools_message
from mlbench.backends.coreml.deployment import ExportError, InvalidExportOptions
from mlbench.localization import OpOrigin

__all__ = ["compress", "excluded_ops", "with_shared_weights"]


def compress(ct: Any, mlmodel: Any, optimization: dict, sink: list[str],
             calibration: list[dict[str, Any]] | None = None, origins: dict[str, OpOrigin] | None = None) -> Any:
    """The model with ``optimization`` applied; a warning lands in ``sink`` when it compressed nothing.
    ``calibration`` (input dicts) feeds activation quantization; ``origins`` (op name -> module, as the
    conversion recorded them) turn a recipe's ``exclude`` (module paths) into op names.

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
                    skip = with_shared_weights(mlmodel.get_spec(), excluded_ops(step, origins or {}), sink)
                    mlmodel = _compress(ct, mlmodel, step, joint=i > 0, skip=skip)
            else:
                skip = with_shared_weights(mlmodel.get_spec(), excluded_ops(optimization, origins or {}), sink)
                mlmodel = _compress(ct, mlmodel, optimization, skip=skip)
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


def excluded_ops(optimization: dict, origins: dict[str, OpOrigin]) -> list[str]:
    """The op names whose weights ``optimization["exclude"]`` leaves uncompressed: every op converted from an
    excluded module or one under it, or named by it. Raises InvalidExportOptions for an entry naming none."""
    exclude = optimization.get("exclude") or []
    chosen: list[str] = []
    for entry in exclude:
        names = [name for name, origin in origins.items()
                 if name == entry or origin.module == entry or origin.module.startswith(entry + ".")]
        if not names:
            if not origins:
                raise InvalidExportOptions(f"{optimization['kind']} exclude '{entry}': this export recorded no op "
                                           "origins, so no module can be excluded")
            modules = sorted({o.module for o in origins.values() if o.module})
            raise InvalidExportOptions(f"{optimization['kind']} exclude '{entry}' names no module of the model "
                                       f"(modules: {', '.join(modules[:8])}{' ...' if len(modules) > 8 else ''})")
        chosen += [n for n in names if n not in chosen]
    return chosen


def with_shared_weights(spec: Any, names: list[str], sink: list[str]) -> list[str]:
    """``names`` and every other op reading a weight one of them reads (tied weights, e.g. an embedding and
    the output layer): coremltools refuses to compress a constant for one reader and not another."""
    if not names:
        return names
    readers: dict[str, list[str]] = {}  # constant -> the ops reading it
    constants: set[str] = set()
    ops = [op for function in spec.mlProgram.functions.values()
           for block in function.block_specializations.values() for op in block.operations]
    for op in ops:
        if op.type == "const":
            constants.update(o.name for o in op.outputs)
    for op in ops:
        name = op.attributes["name"].immediateValue.tensor.strings.values[0] if "name" in op.attributes else ""
        for argument in op.inputs.values():
            for binding in argument.arguments:
                if binding.WhichOneof("binding") == "name" and binding.name in constants:
                    readers.setdefault(binding.name, []).append(name)
    chosen = list(names)
    for constant, ops_reading in readers.items():
        if any(n in names for n in ops_reading):
            added = [n for n in ops_reading if n and n not in chosen]
            if added:
                sink.append(f"exclude also leaves {', '.join(added)} uncompressed: they share the weight {constant}")
                chosen += added
    return chosen


def _compress(ct: Any, mlmodel: Any, optimization: dict, joint: bool = False, skip: list[str] | None = None) -> Any:
    cto = ct.optimize.coreml
    extra: dict[str, Any] = {"joint_compression": True} if joint else {}
    kind = optimization["kind"]
    skipped: dict[str, Any] = {"op_name_configs": dict.fromkeys(skip)} if skip else {}
    if kind == "palettize":
        granularity = optimization.get("granularity", "per_tensor")
        kwargs: dict[str, Any] = {
            "mode": optimization.get("mode", "kmeans"),
            "nbits": optimization["nbits"],
            "granularity": granularity,
        }
        if granularity == "per_grouped_channel":
            kwargs["group_size"] = optimization["group_size"]
        config = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(**kwargs), **skipped)
        return cto.palettize_weights(mlmodel, config, **extra)
    if kind == "linear_quantize":
        options: dict[str, Any] = {"mode": optimization.get("mode", "linear_symmetric"),
                                   "dtype": optimization.get("dtype", "int8"),
                                   "granularity": optimization.get("granularity", "per_channel")}
        if options["granularity"] == "per_block":
            options["block_size"] = optimization["block_size"]
        config = cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(**options), **skipped)
        return cto.linear_quantize_weights(mlmodel, config, **extra)
    if kind == "prune":
        config = cto.OptimizationConfig(
            global_config=cto.OpMagnitudePrunerConfig(target_sparsity=float(optimization["target_sparsity"])),
            **skipped)
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
