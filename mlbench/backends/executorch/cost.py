"""FLOPs of an edge-dialect node by the Core ML cost model's conventions, where the op is the same.

The node's ATen op is described as the MIL op it corresponds to (``convolution`` → ``conv``, ``linear`` →
``linear``, ``addmm``/``mm``/``bmm``/``matmul`` → ``matmul``, and ops whose ATen name is a MIL op type of
the cost model, e.g. ``add``, ``mul``, ``relu``, ``sigmoid``, ``softmax``), with its tensors' shapes from
the node's ``meta["val"]``; the cost model's family gives the FLOPs (2 × MACs for the matrix ops, 1 per
output element for element-wise ones). Other ops (data movement, ops without a MIL twin) are ``None``:
never guessed.
"""

from __future__ import annotations

from typing import Any

MATRIX = {"convolution": ("conv", ("x", "weight")), "linear": ("linear", ("x", "weight")),
          "mm": ("matmul", ("x", "y")), "bmm": ("matmul", ("x", "y")), "matmul": ("matmul", ("x", "y"))}
DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "int8", "uint8": "uint8",
          "int32": "int32", "int64": "int64", "bool": "bool"}


def _spec(value: Any) -> Any:
    from mlbench.backends.apple.cost import TensorSpec

    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):  # a symbolic size
        return None
    return TensorSpec(shape=dims, dtype=DTYPES.get(str(getattr(value, "dtype", "")).removeprefix("torch.")))


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if hasattr(arg, "meta") else None


def node_flops(node: Any, op_type: str) -> int | None:
    """FLOPs of one compute node (its ATen op name without overload), or None where unknown."""
    from mlbench.backends.apple.cost import OpDescription, op_cost, registered_op_types

    out = _spec(_val(node))
    if out is None:
        return None
    args = list(node.args)
    if op_type == "addmm":  # bias + x @ w: the product's MACs, the bias add not counted (as linear's)
        mil, names, args = "matmul", ("x", "y"), args[1:3]
    elif op_type in MATRIX:
        mil, names = MATRIX[op_type]
    elif op_type in registered_op_types():
        mil, names = op_type, ("x", "y")
    else:
        return None
    inputs = {}
    for name, arg in zip(names, args):
        spec = _spec(_val(arg))
        if spec is not None:
            inputs[name] = (spec,)
    return op_cost(OpDescription(op_type=mil, inputs=inputs, outputs=(out,))).flops
