"""Builds the cost model's ``OpDescription`` from a MIL op of a saved ML program.

The only part of the cost package that knows the MIL protobuf; it uses the analysis walker's
helpers (its program index, tensor types and constant values).
"""

from __future__ import annotations

from typing import Any

from mlbench.backends.apple.cost.base import OpCost, OpDescription, TensorSpec, op_cost

__all__ = ["describe_mil_op", "mil_op_cost"]

#: Constant inputs with more values than this are data, not parameters worth keeping.
MAX_ATTRIBUTE_VALUES = 64


def describe_mil_op(op_type: str, op: Any, prog: Any, weight_bytes: int | None) -> OpDescription:
    """``op`` is a MIL Operation message, ``prog`` the walker's program index; ``weight_bytes`` the
    stored size of every weight the op reads (the weight accounting's figure)."""
    from mlbench.backends.apple.analysis.mil import immediate, is_data_op, short_type, tensor_info

    inputs: dict[str, list[TensorSpec]] = {}
    attributes: dict[str, Any] = {}
    for key, argument in op.inputs.items():
        tensors: list[TensorSpec] = []
        for arg in argument.arguments:
            value = None
            if arg.WhichOneof("binding") == "name":
                value_type = prog.var_types.get(arg.name)
                producer = prog.producer.get(arg.name)
                const = producer is not None and is_data_op(producer.type)
                if const and short_type(producer.type) == "const" and "val" in producer.attributes:
                    value = producer.attributes["val"]
            else:  # an inline value
                value_type, const, value = arg.value.type, True, arg.value
            dtype, shape = tensor_info(value_type) if value_type is not None else (None, None)
            tensors.append(TensorSpec(None if shape is None else tuple(shape), dtype, const))
            if value is not None and len(argument.arguments) == 1:
                values = immediate(value)
                if values is not None and len(values) <= MAX_ATTRIBUTE_VALUES:
                    attributes[key] = values[0] if shape == [] and values else list(values)
        inputs[key] = tensors
    outputs = []
    for out in op.outputs:
        dtype, shape = tensor_info(out.type)
        outputs.append(TensorSpec(None if shape is None else tuple(shape), dtype))
    return OpDescription(op_type=op_type, inputs=inputs, outputs=outputs, attributes=attributes,
                         weight_bytes=weight_bytes)


def mil_op_cost(op_type: str, op: Any, prog: Any, weight_bytes: int | None) -> OpCost:
    """The cost of a MIL op; never raises."""
    try:
        desc = describe_mil_op(op_type, op, prog, weight_bytes)
    except Exception:  # noqa: BLE001 (a spec that parses but does not hold together: nothing can be said)
        return OpCost(None, None, None)
    return op_cost(desc)
