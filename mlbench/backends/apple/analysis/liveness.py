"""The liveness pass behind `memory.estimated` (`memory.py`): which values of an ML program function are live
at each operation, in program order, and the largest sum of their bytes.

A value is live from the operation that makes it (a function input: from the start) to the last operation that
reads it (a function output: to the end; a nested block's result: to the block's end). Constants and the
outputs of `constexpr_*` operations are weights, not activations, and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlbench.backends.apple.analysis.mil import declared_bytes, is_data_op, op_name, tensor_info


class NotEstimable(Exception):
    """The program's activations cannot be sized (a value of unknown shape): the reason, one line."""


@dataclass
class Value:
    """One value of the program: its bytes, where it is made and last read (positions in program order)."""

    bytes: int
    made: int
    last: int


@dataclass
class FunctionPeak:
    """A function's activation peak: its bytes, the operation it is reached at and the values live there."""

    function: str
    bytes: int
    at: str | None
    live: list[str] = field(default_factory=list)


def peak_of(values: dict[str, Value], op_names: list[str], function: str) -> FunctionPeak:
    """The largest sum of live bytes over the operations (a value is live at positions made..last)."""
    if not op_names:
        total = sum(v.bytes for v in values.values())
        return FunctionPeak(function, total, None, sorted(values))
    delta = [0] * (len(op_names) + 1)
    for value in values.values():
        delta[max(value.made, 0)] += value.bytes
        delta[min(value.last, len(op_names) - 1) + 1] -= value.bytes
    best, at, running = -1, 0, 0
    for position in range(len(op_names)):
        running += delta[position]
        if running > best:
            best, at = running, position
    live = sorted(name for name, v in values.items() if max(v.made, 0) <= at <= max(v.last, v.made, 0))
    return FunctionPeak(function, best, op_names[at], live)


def _arguments(op: Any) -> list[str]:
    return [arg.name for binding in op.inputs.values() for arg in binding.arguments
            if arg.WhichOneof("binding") == "name"]


def function_values(function: Any, opset: str, sizes: Any = None) -> tuple[dict[str, Value], list[str]]:
    """The activations of one function (inputs and computed values; constants are weights) and the names
    of its operations in program order. `sizes(name, value_type)` gives a value's bytes (default: its
    declared type's); NotEstimable when a value's shape is unknown."""
    size = sizes or (lambda name, value_type: _declared(name, value_type))
    values: dict[str, Value] = {}
    names: list[str] = []

    def use(name: str, position: int) -> None:
        if name in values:
            values[name].last = max(values[name].last, position)

    def walk(block: Any) -> None:
        for op in block.operations:
            position = len(names)
            names.append(op_name(op))
            for name in _arguments(op):
                use(name, position)
            if not is_data_op(op.type):
                for out in op.outputs:
                    values[out.name] = Value(size(out.name, out.type), position, position)
            for sub in op.blocks:
                walk(sub)
                for name in sub.outputs:  # a block's results are read when it ends
                    use(name, len(names) - 1)

    for nv in function.inputs:
        values[nv.name] = Value(size(nv.name, nv.type), -1, -1)
    block = function.block_specializations[opset]
    walk(block)
    for name in block.outputs:
        use(name, len(names))
    return values, names


def _declared(name: str, value_type: Any) -> int:
    _dtype, shape = tensor_info(value_type)
    if value_type.WhichOneof("type") in ("tensorType", "stateType") and (shape is None or None in shape):
        raise NotEstimable(f"the value {name} has a shape unknown until run time")
    if value_type.WhichOneof("type") == "stateType":
        return declared_bytes(value_type.stateType.wrappedType)
    return declared_bytes(value_type)


def opset_of(function: Any) -> str:
    opset = function.opset
    return opset if opset in function.block_specializations else next(iter(function.block_specializations))
