"""The cost model's records, its op registry and the byte accounting every family shares.

Backend-neutral: an op is described by plain data (``OpDescription``) that any walker can build,
and a family function turns it into an ``OpCost``. Nothing here reads a Core ML file.

Byte convention (every family unless it says otherwise):

* ``bytes_read`` = the variable input tensors (produced by another op or a program input), each
  at dtype size x elements, + ``weight_bytes``: the op's weights **as stored** (a palettized or
  quantized weight counts at its compressed size, a weight that is also an input tensor counts
  once). Inputs held in consts that are not weights (scalars, int32 shapes/axes/indices) are
  parameters of the op and count 0.
* ``bytes_written`` = the output tensors at dtype size x elements.
* Intermediate values an op keeps internally (an attention's score matrix, a recurrent state
  between time steps) are not counted: they are assumed to stay on chip.

Unknown shapes are never guessed: a figure that needs an unknown dimension is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DTYPE_BITS",
    "OpCost",
    "OpDescription",
    "ProgramCost",
    "TensorSpec",
    "default_bytes",
    "op_cost",
    "program_cost",
    "register",
    "registered_op_types",
]

#: Bits per element of the MIL dtypes, by their short names.
DTYPE_BITS: dict[str, int] = {
    "bool": 8, "fp16": 16, "fp32": 32, "fp64": 64, "bf16": 16,
    "int8": 8, "int16": 16, "int32": 32, "int64": 64, "int4": 4,
    "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "uint4": 4, "uint2": 2, "uint1": 1,
    "uint6": 6, "uint3": 3, "fp8e4m3fn": 8, "fp8e5m2": 8,
}


@dataclass(frozen=True)
class TensorSpec:
    """A tensor an op reads or writes: its shape (None: rank unknown; a None dim: unknown size)."""

    shape: tuple[int | None, ...] | None
    dtype: str | None
    const: bool = False  # held in a const/constexpr: a weight (read via weight_bytes) or an op parameter

    @property
    def numel(self) -> int | None:
        if self.shape is None or any(d is None for d in self.shape):
            return None
        return math.prod(self.shape)  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        bits = DTYPE_BITS.get(self.dtype or "")
        if n is None or bits is None:
            return None
        return (n * bits + 7) // 8


@dataclass(frozen=True)
class OpDescription:
    """What the cost model needs to know about one operation.

    ``inputs`` maps MIL parameter names (x, y, weight, bias, values...) to their tensors;
    ``attributes`` holds the constant parameters (axes, kernel_sizes, output_sequence...), a
    scalar for a rank-0 const and a list otherwise; ``weight_bytes`` is the stored size of the
    weights the op reads (None: unknown).
    """

    op_type: str
    inputs: Mapping[str, Sequence[TensorSpec]] = field(default_factory=dict)
    outputs: Sequence[TensorSpec] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)
    weight_bytes: int | None = 0

    def input(self, name: str, index: int = 0) -> TensorSpec | None:
        tensors = self.inputs.get(name) or ()
        return tensors[index] if len(tensors) > index else None

    def shape(self, name: str, index: int = 0) -> tuple[int | None, ...] | None:
        t = self.input(name, index)
        return None if t is None else t.shape

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.attributes.get(name, default)
        return default if value is None else value

    @property
    def out(self) -> TensorSpec | None:
        return self.outputs[0] if self.outputs else None

    @property
    def out_numel(self) -> int | None:
        return None if self.out is None else self.out.numel


@dataclass(frozen=True)
class OpCost:
    """FLOPs and memory traffic of one operation; None where it cannot be computed."""

    flops: int | None
    bytes_read: int | None
    bytes_written: int | None

    @property
    def bytes(self) -> int | None:
        """Bytes read + written; None when either is unknown."""
        if self.bytes_read is None or self.bytes_written is None:
            return None
        return self.bytes_read + self.bytes_written


Family = Callable[[OpDescription], OpCost]
_REGISTRY: dict[str, Family] = {}


def register(*op_types: str) -> Callable[[Family], Family]:
    """Register a family function for the given op types (without opset prefix)."""

    def decorate(fn: Family) -> Family:
        for op_type in op_types:
            if op_type in _REGISTRY:
                raise ValueError(f"cost of {op_type!r} registered twice")
            _REGISTRY[op_type] = fn
        return fn

    return decorate


def registered_op_types() -> frozenset[str]:
    return frozenset(_REGISTRY)


def _sum(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def read_inputs(desc: OpDescription, skip: Sequence[str] = ()) -> int | None:
    """Bytes of the variable (non-const) input tensors, leaving out the named inputs."""
    return _sum([t.nbytes for key, ts in desc.inputs.items() if key not in skip for t in ts if not t.const])


def written(desc: OpDescription) -> int | None:
    return _sum([t.nbytes for t in desc.outputs])


def default_bytes(desc: OpDescription) -> tuple[int | None, int | None]:
    """(bytes read, bytes written) by the module convention."""
    inputs = read_inputs(desc)
    weights = desc.weight_bytes
    read = None if inputs is None or weights is None else inputs + weights
    return read, written(desc)


def with_flops(desc: OpDescription, flops: int | None) -> OpCost:
    read, wrote = default_bytes(desc)
    return OpCost(flops, read, wrote)


def times(n: int | None, per: float) -> int | None:
    """n x per (rounded), None when n is unknown."""
    return None if n is None else round(n * per)


def op_cost(desc: OpDescription) -> OpCost:
    """The cost of one op. Never raises.

    Unknown op types (and ops whose description does not fit their family, e.g. a malformed
    spec) get ``flops=None`` with bytes still counted by the module convention.
    """
    # the families register themselves when the package is imported (mlbench/backends/apple/cost/__init__.py)
    if desc.op_type.startswith("constexpr_"):  # weights materialised at load time: data, not computation
        return OpCost(0, 0, 0)
    fn = _REGISTRY.get(desc.op_type)
    if fn is not None:
        try:
            return fn(desc)
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
            pass
    try:
        return with_flops(desc, None)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        return OpCost(None, None, None)


@dataclass(frozen=True)
class ProgramCost:
    """Sums over a program's ops. flops and bytes leave out the ops where they are unknown."""

    flops: int
    bytes: int
    arithmetic_intensity: float | None  # flops / bytes
    unknown_flops: int  # ops whose FLOPs are unknown
    unknown_bytes: int  # ops whose bytes are unknown


def program_cost(costs: Iterable[Any]) -> ProgramCost:
    """Totals over anything with ``flops`` and ``bytes`` (OpCost, the analysis' LayerInfo)."""
    flops = nbytes = unknown_flops = unknown_bytes = 0
    for c in costs:
        if c.flops is None:
            unknown_flops += 1
        else:
            flops += c.flops
        if c.bytes is None:
            unknown_bytes += 1
        else:
            nbytes += c.bytes
    return ProgramCost(flops, nbytes, flops / nbytes if nbytes else None, unknown_flops, unknown_bytes)
