"""Walking the model's operations into ``LayerInfo`` records: an ML program's ops in program order
(nested blocks included) with their output types, MACs, weights and the constant parameters the
placement rules need; or a neural network's layers with their stored weight bytes.

See ``records`` for the definitions (compute op, MACs, FLOPs, precision).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.analysis.dataflow import FLOAT_DTYPES, DataFlow
from mlbench.backends.apple.analysis.mil import Program, numel, op_name, short_type, tensor_info
from mlbench.backends.apple.analysis.records import LayerInfo, Precision, Totals
from mlbench.backends.apple.analysis.weights import WeightAccounting, nn_weight_params
from mlbench.backends.apple.cost import program_cost  # cost model
from mlbench.backends.apple.cost.mil import mil_op_cost  # cost model
from mlbench.errors import UserError

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis.package import BlobReader

#: Ops whose MACs are counted.
MAC_OPS = frozenset({"conv", "conv_transpose", "linear", "matmul", "einsum"})
#: Ops that do many MACs but whose MACs this analysis does not count (a note says so).
_UNCOUNTED_HEAVY_OPS = frozenset({"lstm", "gru", "rnn", "scaled_dot_product_attention"})
# MIL opset name -> OS release (coremltools/__init__.py, _OPSET).
OPSET_OS = {
    "CoreML3": "iOS13",
    "CoreML4": "iOS14",
    "CoreML5": "iOS15",
    "CoreML6": "iOS16",
    "CoreML7": "iOS17",
    "CoreML8": "iOS18",
    "CoreML9": "iOS26",
}
NEURAL_NETWORK_TYPES = frozenset({"neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor"})


def op_macs(op_type: str, op: Any, prog: Program, out_shape: list[int | None] | None) -> int | None:
    out_n = numel(out_shape)
    if op_type == "conv":
        w = prog.input_shape(op, "weight")
        if out_n is None or w is None or len(w) < 2 or numel(w[1:]) is None:
            return None
        return out_n * numel(w[1:])  # type: ignore[operator]
    if op_type == "conv_transpose":
        x = prog.input_shape(op, "x")
        w = prog.input_shape(op, "weight")
        if x is None or w is None or len(w) < 2 or numel(x) is None or numel(w[1:]) is None:
            return None
        return numel(x) * numel(w[1:])  # type: ignore[operator]
    if op_type == "linear":
        w = prog.input_shape(op, "weight")
        if out_n is None or not w or w[-1] is None:
            return None
        return out_n * w[-1]
    if op_type == "matmul":
        x = prog.input_shape(op, "x")
        if out_n is None or not x:
            return None
        tx = prog.const_value(op, "transpose_x")
        k = x[-2] if (tx and tx[0] and len(x) >= 2) else x[-1]
        return None if k is None else out_n * k
    if op_type == "einsum":
        eq = prog.const_value(op, "equation")
        if not eq or "values" not in op.inputs:
            return None
        equation = str(eq[0]).replace(" ", "")
        if "..." in equation or "->" not in equation:
            return None
        lhs = equation.split("->")[0].split(",")
        args = op.inputs["values"].arguments
        if len(lhs) != len(args):
            return None
        sizes: dict[str, int] = {}
        for letters, arg in zip(lhs, args):
            t = prog.arg_type(arg)
            shape = tensor_info(t)[1] if t is not None else None
            if shape is None or len(shape) != len(letters):
                return None
            for letter, dim in zip(letters, shape):
                if dim is None:
                    return None
                sizes[letter] = max(sizes.get(letter, 1), dim)
        return math.prod(sizes.values())
    return None


def analyse_program(spec: Any, blobs: BlobReader, notes: list[str], function_name: str | None = None) -> dict[str, Any]:
    program = spec.mlProgram
    functions = list(program.functions.keys())
    if not functions:
        raise UserError("corrupt Core ML model: the ML program has no functions", file=blobs.origin)
    if function_name is not None and function_name not in program.functions:
        raise UserError(f"the ML program has no function '{function_name}' (it has {', '.join(functions)})",
                        file=blobs.origin)
    fname = function_name or spec.description.defaultFunctionName or ("main" if "main" in program.functions
                                                                      else functions[0])
    if fname not in program.functions:
        fname = functions[0]
    function = program.functions[fname]
    opset = function.opset
    if opset not in function.block_specializations:
        if not function.block_specializations:
            raise UserError(f"corrupt Core ML model: function {fname} has no body", file=blobs.origin)
        opset = next(iter(function.block_specializations.keys()))
    others = [f for f in functions if f != fname]
    if others:
        notes.append(
            f"the package has {len(functions)} functions; only '{fname}' is analysed "
            f"(not: {', '.join(others)})"
        )

    prog = Program(function, opset)
    weights = WeightAccounting(prog, blobs)
    flow = DataFlow(prog)

    op_counts: Counter[str] = Counter()
    weight_ops: Counter[str] = Counter()
    const_count = 0
    dtype_counts: Counter[str] = Counter()  # of the ops that compute (casts and integer paths left out)
    fallback_counts: Counter[str] = Counter()  # of every op but the boundary casts, when none computes
    layers: list[LayerInfo] = []
    unknown_mac_ops: Counter[str] = Counter()
    heavy_uncounted: Counter[str] = Counter()

    for op, depth in prog.ops:
        op_type = short_type(op.type)
        if op_type == "const":
            const_count += 1
            continue
        if op_type.startswith("constexpr_"):
            weight_ops[op_type] += 1
            continue
        op_counts[op_type] += 1
        out_dtype, out_shape = tensor_info(op.outputs[0].type) if op.outputs else (None, None)
        macs = op_macs(op_type, op, prog, out_shape) if op_type in MAC_OPS else None
        if op_type in MAC_OPS and macs is None:
            unknown_mac_ops[op_type] += 1
        if op_type in _UNCOUNTED_HEAVY_OPS:
            heavy_uncounted[op_type] += 1
        params, stored, storage = weights.for_op(op)
        # --- cost model: every weight the op reads, at its stored size (a fresh, unclaimed accounting) ---
        cost = mil_op_cost(op_type, op, prog, WeightAccounting(prog, blobs).for_op(op)[1])
        # --- end cost model ---
        producers, integer_data = flow.add(op, op_type, out_dtype, len(layers))
        attributes = placement_attributes(op_type, op, prog)
        if flow.reads_wide_integer(op):
            attributes["wide_integer_input"] = True
        layers.append(
            LayerInfo(
                name=op_name(op),
                op_type=op_type,
                output_dtype=out_dtype,
                output_shape=out_shape,
                macs=macs,
                flops=cost.flops,  # cost model
                bytes=cost.bytes,  # cost model
                params=params,
                weight_bytes=stored,
                weight_storage=storage,
                depth=depth,
                attributes=attributes,
                inputs=producers,
                integer_data=integer_data,
            )
        )
        if op_type == "cast" and is_boundary_cast(op, prog):
            continue
        dt = next((d for d in (tensor_info(out.type)[0] for out in op.outputs) if d in FLOAT_DTYPES), None)
        if dt is not None:
            fallback_counts[dt] += 1
            if op_type != "cast" and not integer_data:
                dtype_counts[dt] += 1

    dtype_counts = dtype_counts or fallback_counts
    floats = set(dtype_counts)
    if not floats:
        precision: Precision = "UNKNOWN"
        notes.append("no compute op has a floating-point output: precision cannot be told")
    elif floats == {"fp32"}:
        precision = "FLOAT32"
    elif floats == {"fp16"}:
        precision = "FLOAT16"
    else:
        precision = "MIXED"
        notes.append(
            "mixed precision: compute ops by output dtype: "
            + ", ".join(f"{k} {v}" for k, v in sorted(dtype_counts.items()))
        )
    if unknown_mac_ops:
        notes.append(
            "MACs are not counted for ops with unknown shapes ("
            + ", ".join(f"{v} {k}" for k, v in sorted(unknown_mac_ops.items()))
            + "): the MAC total is a lower bound"
        )
    if heavy_uncounted:
        notes.append(
            "MACs of " + ", ".join(f"{v} {k}" for k, v in sorted(heavy_uncounted.items()))
            + " ops are not counted (their FLOPs are, by the cost model)"  # cost model
        )
    if any(layer.macs for layer in layers if layer.depth > 0):
        notes.append(
            "MACs inside nested blocks are counted once per block: a cond runs one of its branches, "
            "a while_loop runs its body as many times as it loops"
        )
    if blobs.missing:
        notes.append("weights stored outside the .mlmodel file are counted at their declared size")

    macs_total = sum(layer.macs for layer in layers if layer.macs is not None)
    program = program_cost(layers)  # cost model
    return {
        "function": fname,
        "functions": functions,
        "opset": opset,
        "opset_os": OPSET_OS.get(opset),
        "precision": precision,
        "dtype_counts": dict(sorted(dtype_counts.items())),
        "op_counts": dict(op_counts.most_common()),
        "const_count": const_count,
        "weight_ops": dict(weight_ops.most_common()),
        "layers": layers,
        "totals": Totals(
            compute_ops=len(layers),
            const_ops=const_count,
            weight_ops=sum(weight_ops.values()),
            params=sum(layer.params or 0 for layer in layers),
            weight_bytes=sum(layer.weight_bytes or 0 for layer in layers),
            macs=macs_total,
            flops=program.flops,  # cost model
            bytes=program.bytes,  # cost model
            arithmetic_intensity=program.arithmetic_intensity,  # cost model
            macs_complete=not unknown_mac_ops,
        ),
    }


# Inputs whose constant values decide Neural Engine eligibility (see placement rules).
_PLACEMENT_INPUTS = {
    "conv": ("dilations", "strides", "groups"),
    "conv_transpose": ("dilations", "strides", "groups"),
    "max_pool": ("kernel_sizes", "strides"),
    "avg_pool": ("kernel_sizes", "strides"),
    "l2_pool": ("kernel_sizes", "strides"),
    "upsample_nearest_neighbor": ("scale_factor_height", "scale_factor_width"),
    "upsample_bilinear": ("scale_factor_height", "scale_factor_width"),
}
_SHAPE_INPUTS = {"reshape": "shape", "tile": "reps", "expand_dims": "axes", "slice_by_index": "begin",
                 "slice_by_size": "begin", "slice_update": "begin"}
_GATHERS = ("gather", "gather_nd", "gather_along_axis")


def _numel(shape: list[int | None] | None) -> int | None:
    if not shape or any(d is None for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d  # type: ignore[operator]
    return n


def placement_attributes(op_type: str, op: Any, prog: Program) -> dict[str, Any]:
    """The few constant parameters the placement rules need, read from the op's inputs."""
    attributes: dict[str, Any] = {}
    for key in _PLACEMENT_INPUTS.get(op_type, ()):
        value = prog.const_value(op, key)
        if value is not None:
            attributes[key] = value
    shape_input = _SHAPE_INPUTS.get(op_type)
    if shape_input and shape_input in op.inputs and prog.const_value(op, shape_input) is None:
        attributes["dynamic_shape"] = True
    if op_type in _GATHERS:
        table, axis = prog.input_shape(op, "x"), prog.const_value(op, "axis")
        if table and (axis is None or list(axis) == [0]):
            attributes["table_rows"] = table[0]
        if "indices" in op.inputs and prog.const_value(op, "indices") is None:
            attributes["runtime_indices"] = True
    if op_type == "scaled_dot_product_attention":
        query = _numel(prog.input_shape(op, "query"))
        if query is not None:
            attributes["query_elements"] = query
    return attributes


def is_boundary_cast(op: Any, prog: Program) -> bool:
    """A cast coremltools inserts at the program edge (fp32 input -> fp16, fp16 -> fp32 output)."""
    xs = op.inputs["x"].arguments if "x" in op.inputs else []
    if any(a.WhichOneof("binding") == "name" and a.name in prog.input_names for a in xs):
        return True
    return any(out.name in prog.output_names for out in op.outputs)


def analyse_neural_network(spec: Any, model_type: str, notes: list[str]) -> dict[str, Any]:
    nn = getattr(spec, model_type)
    op_counts: Counter[str] = Counter()
    layers: list[LayerInfo] = []
    total_bytes = 0
    for layer in nn.layers:
        kind = layer.WhichOneof("layer") or "unknown"
        op_counts[kind] += 1
        stored = 0
        params_layer = getattr(layer, kind) if kind != "unknown" else None
        if params_layer is not None:
            for w in nn_weight_params(params_layer):
                stored += 4 * len(w.floatValue) + len(w.float16Value) + len(w.rawValue) + len(w.int8RawValue)
        total_bytes += stored
        layers.append(LayerInfo(name=layer.name, op_type=kind, params=None, weight_bytes=stored))
    notes.append(
        "neural-network model: per-layer dtypes, shapes, parameters and MACs are not analysed; "
        "only layer types and stored weight bytes are counted"
    )
    notes.append("neural-network model: the compute precision is chosen at run time, not stored in the model")
    return {
        "precision": "UNKNOWN",
        "op_counts": dict(op_counts.most_common()),
        "const_count": 0,
        "layers": layers,
        "totals": Totals(
            compute_ops=len(layers), const_ops=0, weight_ops=0, params=None,
            weight_bytes=total_bytes, macs=None, flops=None, macs_complete=False,
        ),
    }
