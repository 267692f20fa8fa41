"""Reading MIL protobuf values: dtypes, tensor types, immediate values, and an index of one
program function (its ops in order, who produces each value, each value's type).

The weight accounting and the program walk both read the spec through these.
"""

from __future__ import annotations

import math
from typing import Any

# MIL DataType enum (coremltools/proto/MIL_pb2.py) -> (short name, bits per element).
_MIL_DTYPES: dict[int, tuple[str, int]] = {
    1: ("bool", 8),
    2: ("string", 0),
    10: ("fp16", 16),
    11: ("fp32", 32),
    12: ("fp64", 64),
    13: ("bf16", 16),
    21: ("int8", 8),
    22: ("int16", 16),
    23: ("int32", 32),
    24: ("int64", 64),
    25: ("int4", 4),
    31: ("uint8", 8),
    32: ("uint16", 16),
    33: ("uint32", 32),
    34: ("uint64", 64),
    35: ("uint4", 4),
    36: ("uint2", 2),
    37: ("uint1", 1),
    38: ("uint6", 6),
    39: ("uint3", 3),
    40: ("fp8e4m3fn", 8),
    41: ("fp8e5m2", 8),
}


def short_type(op_type: str) -> str:
    """Op type without an opset prefix ("ios17.conv" -> "conv")."""
    return op_type.rsplit(".", 1)[-1]


def is_data_op(op_type: str) -> bool:
    t = short_type(op_type)
    return t == "const" or t.startswith("constexpr_")


def tensor_info(value_type: Any) -> tuple[str | None, list[int | None] | None]:
    """(dtype name, shape) of a MIL ValueType; shape None when not a tensor or rank unknown."""
    which = value_type.WhichOneof("type")
    if which == "stateType":
        return tensor_info(value_type.stateType.wrappedType)
    if which != "tensorType":
        return None, None
    tt = value_type.tensorType
    dtype = _MIL_DTYPES.get(tt.dataType, (f"dtype{tt.dataType}", 0))[0]
    if tt.rank < 0:
        return dtype, None
    dims: list[int | None] = []
    for d in tt.dimensions:
        dims.append(int(d.constant.size) if d.WhichOneof("dimension") == "constant" else None)
    if len(dims) != tt.rank:  # rank given without dimensions: unknown
        return dtype, None
    return dtype, dims


def numel(shape: list[int | None] | None) -> int | None:
    if shape is None or any(d is None for d in shape):
        return None
    return math.prod(shape)  # type: ignore[arg-type]


def declared_bytes(value_type: Any) -> int:
    if value_type.WhichOneof("type") != "tensorType":
        return 0
    bits = _MIL_DTYPES.get(value_type.tensorType.dataType, ("", 0))[1]
    n = numel(tensor_info(value_type)[1])
    if n is None:
        return 0
    return (n * bits + 7) // 8



def immediate(value: Any) -> list[Any] | None:
    """Python values of an immediate tensor value, or None."""
    if value.WhichOneof("value") != "immediateValue":
        return None
    iv = value.immediateValue
    if iv.WhichOneof("value") != "tensor":
        return None
    t = iv.tensor
    which = t.WhichOneof("value")
    if which in ("floats", "ints", "bools", "strings", "longInts", "doubles"):
        return list(getattr(t, which).values)
    return None


class Program:
    """Index of one ML program function: ops in order, producers, var types."""

    def __init__(self, function: Any, opset: str) -> None:
        self.var_types: dict[str, Any] = {}
        self.producer: dict[str, Any] = {}
        self.ops: list[tuple[Any, int]] = []  # (op, depth)
        self.input_names = {nv.name for nv in function.inputs}
        for nv in function.inputs:
            self.var_types[nv.name] = nv.type
        block = function.block_specializations[opset]
        self.output_names = set(block.outputs)
        self._walk(block, 0)

    def _walk(self, block: Any, depth: int) -> None:
        for nv in block.inputs:
            self.var_types[nv.name] = nv.type
        for op in block.operations:
            for out in op.outputs:
                self.var_types[out.name] = out.type
                self.producer[out.name] = op
            self.ops.append((op, depth))
            for sub in op.blocks:
                self._walk(sub, depth + 1)

    def arg_type(self, arg: Any) -> Any | None:
        if arg.WhichOneof("binding") == "name":
            return self.var_types.get(arg.name)
        return arg.value.type

    def input_shape(self, op: Any, key: str, index: int = 0) -> list[int | None] | None:
        if key not in op.inputs or len(op.inputs[key].arguments) <= index:
            return None
        t = self.arg_type(op.inputs[key].arguments[index])
        return tensor_info(t)[1] if t is not None else None

    def const_value(self, op: Any, key: str) -> list[Any] | None:
        if key not in op.inputs or not op.inputs[key].arguments:
            return None
        arg = op.inputs[key].arguments[0]
        if arg.WhichOneof("binding") == "value":
            return immediate(arg.value)
        prod = self.producer.get(arg.name)
        if prod is None or short_type(prod.type) != "const" or "val" not in prod.attributes:
            return None
        return immediate(prod.attributes["val"])


def op_name(op: Any) -> str:
    if "name" in op.attributes:
        vals = immediate(op.attributes["name"])
        if vals:
            return str(vals[0])
    return op.outputs[0].name if op.outputs else short_type(op.type)
