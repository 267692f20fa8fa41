"""Core ML's cost model and placement rules applied to a Core AI program, where its ops map soundly.

Core AI gives no placement or timing off macOS 27. The ops of a ``coreai`` program (an IR walk of the saved
asset's function) are mapped onto the Core ML MIL ops with the same arithmetic (``conv2d`` → ``conv``,
``broadcasting_batch_matmul`` → ``matmul``, elementwise, reductions, norms, scaled dot-product attention,
pooling, data movement): each becomes a ``apple.cost.OpDescription`` priced by the shared Apple-silicon cost model, and the
result is a ``apple.analysis.ProgramAnalysis`` that ``apple.placement.estimate_placement`` and
``apple.latency.latency_metrics`` take as they are. That is **Core ML's rules applied to Core AI ops**, said
so in every note: Core AI may place and schedule the same program differently. Where any compute op has no
counterpart in the table, nothing is estimated and the reason names the ops.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlbench.backends.apple.analysis.records import LayerInfo, ProgramAnalysis, TensorDescription, Totals
from mlbench.backends.apple.cost import OpDescription, TensorSpec, op_cost

NOTE = ("Core ML's placement rules and cost model applied to Core AI ops (each mapped to the Core ML op with the "
        "same arithmetic): an estimate of how Core ML would run this program, not of Core AI's own choices")
ELEMENTWISE = {"add": "add", "sub": "sub", "mul": "mul", "div": "real_div", "divide": "real_div", "pow": "pow", "maximum": "maximum",
               "minimum": "minimum", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "gelu": "gelu",
               "silu": "silu", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "erf": "erf",
               "abs": "abs", "sin": "sin", "cos": "cos", "clamp": "clip", "clip": "clip", "floor_divide": "floor_div",
               "modulo": "mod", "equal": "equal", "not_equal": "not_equal", "greater": "greater",
               "greater_equal": "greater_equal", "less": "less", "less_equal": "less_equal", "and": "logical_and",
               "or": "logical_or", "xor": "logical_xor", "not": "logical_not", "floor": "floor", "ceil": "ceil",
               "round": "round", "sign": "sign", "square": "square", "neg": "mul", "negate": "mul"}
MOVEMENT = {"reshape": "reshape", "transpose": "transpose", "pad": "pad", "concat": "concat", "cast": "cast",
            "squeeze": "squeeze", "expand_dims": "expand_dims", "slice": "slice_by_index", "tile": "tile",
            "split": "split", "stack": "stack", "broadcast_in_dims": "tile", "gather_nd": "gather_nd",
            "gather": "gather", "scatter_nd": "scatter_nd", "scatter": "scatter", "slice_update": "slice_update",
            "read_handle": "read_state", "write_handle": "coreml_update_state", "broadcast_to": "tile",
            "where": "select", "get_shape": "shape", "broadcast_shapes": "shape", "range": "range_1d",
            "fill": "fill"}
"""A state (KV cache) is read and written through handles: Core ML's read_state / coreml_update_state."""
OTHER = {"conv2d": "conv", "batch_matmul": "matmul", "matmul": "matmul", "softmax": "softmax",
         "reduce_mean": "reduce_mean", "reduce_sum": "reduce_sum", "reduce_max": "reduce_max",
         "max_pool_2d": "max_pool", "avg_pool_2d": "avg_pool", "layer_norm": "layer_norm",
         "batch_norm": "batch_norm"}
COMPOSITES = {"hard_sigmoid": "sigmoid_hard", "layer_norm": "layer_norm", "rms_norm": "layer_norm", "scaled_dot_product_attention":
              "scaled_dot_product_attention", "sdpa": "scaled_dot_product_attention"}
"""``coreai.invoke`` of a composite: by the callee's name. RMSNorm is priced as a layer norm (one pass more)."""
OPERANDS = {"conv": ("x", "weight"), "matmul": ("x", "y"), "scaled_dot_product_attention": ("query", "key", "value", "attn_mask"),
            "layer_norm": ("x", "gamma", "beta")}
DTYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "i1": "bool", "si32": "int32", "ui32": "uint32",
          "si8": "int8", "ui8": "uint8", "si64": "int64", "i32": "int32", "i64": "int64"}
NOT_COMPUTE = ("coreai.constant", "coreai.output", "coreai.create_token")
CONTROL_FLOW = ("if", "while", "condition")
MAX_INLINE = 8
"""Nesting of invoked graphs inlined at most (a deeper call is left unmapped, by name)."""
WEIGHT_OPS = {"coreai.blockwise_shift_scale": "constexpr_blockwise_shift_scale",
              "coreai.lut_to_dense": "constexpr_lut_to_dense"}
"""Compressed weights rebuilt from constants only: data, as Core ML's constexpr_* ops are; their consumers read
the weights at the stored (compressed) size."""


def _bits(element_type: Any) -> int:
    match = re.search(r"(\d+)", str(element_type))
    return int(match.group(1)) if match else 32


def _stored_bytes(value_type: Any) -> int:
    """Bytes a constant takes at its element type's width (a 4-bit index is half a byte)."""
    n = 1
    for d in value_type.shape:
        n *= max(int(d), 0)
    return (n * _bits(value_type.element_type) + 7) // 8


def _label(op: Any) -> str:
    """An op as the reason names it: a composite by its callee, without the converter's random suffix."""
    if op.name == "coreai.invoke":
        match = re.search(r"@([A-Za-z0-9_]+?)(?:_[a-z]{8}|_[0-9a-f]{8})?\b", _callee(op) or "")
        return f"invoke @{match.group(1)}" if match else "invoke"
    return op.name.removeprefix("coreai.")


def mil_type(name: str, callee: str | None) -> str | None:
    """The Core ML op a Core AI op is priced and placed as, or None when it has no sound counterpart."""
    short = name.removeprefix("coreai.").removeprefix("decomposable.").removeprefix("broadcasting_")
    if short == "invoke":
        match = re.search(r"@([A-Za-z0-9_]+)", callee or "")  # #param.constant<@layer_norm_kjgyehhb> : …
        key = match.group(1).lower() if match else ""
        return next((mil for composite, mil in COMPOSITES.items() if composite in key), None)
    return ELEMENTWISE.get(short) or MOVEMENT.get(short) or OTHER.get(short)


def _tensor(value_type: Any, const: bool = False) -> TensorSpec:
    shape = tuple(None if d < 0 else int(d) for d in value_type.shape) if getattr(value_type, "has_rank", False) \
        else None
    element = getattr(value_type, "element_type", None)  # a state's token or handle has none
    return TensorSpec(shape=shape, dtype=DTYPES.get(str(element)) if element is not None else None, const=const)


def _callee(op: Any) -> str | None:
    try:
        return str(op.attributes["callee"])
    except (KeyError, ValueError):
        return None


def walk_function(asset: Path, function: str = "main") -> tuple[ProgramAnalysis | None, str | None]:
    """The function's compute ops as a Core ML analysis, or None and why (the Core AI ops without a Core ML
    counterpart, by name). Needs Core AI (``coreai.authoring``)."""
    from coreai.authoring import AIModelAsset

    program = AIModelAsset.load(Path(asset)).program  # kept referenced while its graph is walked
    graph = program._get_graph(function)  # the only way to a function graph in 1.0.0b3
    if graph is None:
        return None, f"the asset has no function {function!r}"
    layers, _, unmapped, weight_ops = cost_layers(graph, program._get_graph)
    return (None, unmapped_reason(unmapped)) if unmapped else (_analysis(asset, function, layers, graph, weight_ops),
                                                               None)


def unmapped_reason(unmapped: Counter[str]) -> str:
    """Why nothing is estimated: control flow first (its cost depends on values known only when it runs), then
    the ops without a counterpart, by name."""
    flow = [name for name in unmapped if name in CONTROL_FLOW]
    names = ", ".join(f"{name} ×{n}" for name, n in unmapped.most_common())
    if flow:
        return (f"control flow ({', '.join(flow)}): which branch runs and how often a loop turns are known only "
                f"when it runs, so no cost is sound; unmapped: {names}")
    return f"Core AI ops without a Core ML counterpart in mlbench's table: {names}"


def cost_layers(graph: Any, resolve: Callable[[str], Any] | None = None, *, depth: int = 0, base: int = 0,
                outer: dict[Any, tuple[tuple[str, int | None], int | None]] | None = None
                ) -> tuple[list[LayerInfo], list[Any], Counter[str], int]:
    """Every compute op of a graph's body as a Core ML layer priced by the shared Apple-silicon cost model (an op without a
    counterpart: op_type "" and no FLOPs), the ops themselves in the same order, the unmapped ops by name,
    and the number of compressed-weight ops (data, not compute).

    A ``coreai.invoke`` of a composite Core ML has as one op (layer norm, RMSNorm, SDPA) is that op; of any
    other graph (an externalized module: RoPE, RMSNorm or GatherMM by its module's name, a user's block) it
    is its body, inlined: each of its ops priced and placed as Core ML would run the same decomposition
    (``resolve`` finds a graph by name; ``outer`` carries the caller's producers and stored constants)."""
    ops = [op.operation for op in graph.entry_block.operations]
    stored: dict[Any, int] = {}  # value of a constant or a rebuilt compressed weight -> its stored bytes
    producers: dict[Any, tuple[str, int | None]] = {}  # value -> (producing op's name, compute index)
    for value, (producer, size) in (outer or {}).items():
        producers[value] = producer
        if size is not None:
            stored[value] = size
    for op in ops:
        if op.name == "coreai.constant":
            stored[op.results[0]] = _stored_bytes(op.results[0].type)
        elif op.name in WEIGHT_OPS and all(v in stored for v in op.operands):
            stored[op.results[0]] = sum(stored[v] for v in op.operands)
    unmapped: Counter[str] = Counter()
    layers: list[LayerInfo] = []
    compute: list[Any] = []
    weight_ops = 0
    for op in ops:
        if op.results and op.results[0] in stored:
            producers[op.results[0]] = ("constant", None)
            weight_ops += op.name in WEIGHT_OPS
            continue
        if op.name in NOT_COMPUTE:
            continue
        kind = mil_type(op.name, _callee(op)) or ""
        body = _body(op, resolve) if not kind and op.name == "coreai.invoke" and depth < MAX_INLINE else None
        if body is not None:
            seed = {arg: (producers.get(v, ("", None)), stored.get(v)) for arg, v in
                    zip(body.entry_block.arguments, op.operands, strict=False)}
            inner, inner_ops, inner_unmapped, inner_weights = cost_layers(body, resolve, depth=depth + 1,
                                                                          base=base + len(layers), outer=seed)
            offset, prefix = len(layers), _label(op).removeprefix("invoke @")
            layers += [layer.model_copy(update={"name": f"{prefix}/{layer.name}"}) for layer in inner]
            compute += inner_ops
            unmapped.update(inner_unmapped)
            weight_ops += inner_weights
            for result in op.results:
                producers[result] = (op.name, base + len(layers) - 1 if len(layers) > offset else None)
            continue
        if not kind and op.results and op.name not in NOT_COMPUTE:
            unmapped[_label(op)] += 1
        consts = [producers.get(v, ("", None))[0] == "constant" for v in op.operands]
        specs = [_tensor(v.type, const) for v, const in zip(op.operands, consts, strict=True)]
        names = OPERANDS.get(kind, ("x", "y"))
        inputs = {name: [spec] for name, spec in zip(names, specs, strict=False)}
        weight_bytes = sum(stored[v] for v, s in zip(op.operands, specs, strict=True)
                           if s.const and s.dtype in ("fp32", "fp16", "bf16") and (s.numel or 0) > 1)
        params = sum(s.numel or 0 for s in specs if s.const and (s.numel or 0) > 1)
        outputs = [_tensor(r.type) for r in op.results]
        cost = op_cost(OpDescription(op_type=kind, inputs=inputs, outputs=outputs, weight_bytes=weight_bytes)) \
            if kind else None
        out = outputs[0] if outputs else None
        index = base + len(layers)
        layers.append(LayerInfo(
            name=f"{op.name.removeprefix('coreai.')}_{index}", op_type=kind, output_dtype=out.dtype if out else None,
            output_shape=list(out.shape) if out and out.shape is not None else None,
            flops=cost.flops if cost else None, bytes=cost.bytes if cost else None, weight_bytes=weight_bytes,
            params=params,
            inputs=sorted({i for v in op.operands if (i := producers.get(v, ("", None))[1]) is not None}),
            integer_data=bool(out and out.dtype not in ("fp32", "fp16", "bf16"))))
        compute.append(op)
        for result in op.results:
            producers[result] = (op.name, index)
    return layers, compute, unmapped, weight_ops


def _body(op: Any, resolve: Callable[[str], Any] | None) -> Any:
    """The graph an invoke calls, when it can be found."""
    match = re.search(r"@([A-Za-z0-9_.$]+)", _callee(op) or "")
    return resolve(match.group(1)) if resolve is not None and match else None


def _analysis(asset: Path, function: str, layers: list[LayerInfo], graph: Any, weight_ops: int) -> ProgramAnalysis:
    floats = Counter(layer.output_dtype for layer in layers if not layer.integer_data and layer.output_dtype)
    precision = ("MIXED" if len(floats) > 1 else {"fp32": "FLOAT32", "fp16": "FLOAT16"}.get(next(iter(floats), ""),
                                                                                            "UNKNOWN"))
    flops = [layer.flops for layer in layers if layer.flops is not None]
    moved = [layer.bytes for layer in layers if layer.bytes is not None]
    weights = sum(layer.weight_bytes or 0 for layer in layers)
    inputs = [TensorDescription(name=f"input{i}", kind="tensor", shape=list(spec.shape or []), dtype=spec.dtype)
              for i, spec in enumerate(_tensor(arg.type) for arg in graph.entry_block.arguments)]
    return ProgramAnalysis(
        path=str(asset), model_type="coreaiProgram", spec_version=0, function=function, functions=[function],
        precision=precision, dtype_counts=dict(floats), op_counts=dict(Counter(layer.op_type for layer in layers)),
        const_count=0, layers=layers,
        totals=Totals(compute_ops=len(layers), const_ops=0, weight_ops=weight_ops, params=None, weight_bytes=weights,
                      macs=None, flops=sum(flops), bytes=sum(moved), macs_complete=False),
        package_size_bytes=sum(f.stat().st_size for f in Path(asset).rglob("*") if f.is_file()),
        inputs=inputs, outputs=[], notes=[NOTE])
