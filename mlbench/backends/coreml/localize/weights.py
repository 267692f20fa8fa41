"""Bytes each module's compressed weights save: what ``constexpr_*`` decompression stores against the
dense tensor it makes, read from the variant's program (declared types and shapes, as the package holds)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlbench.backends.coreml.emulate import Program
from mlbench.localization import OpOrigin

__all__ = ["module_savings"]

_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp64": 64, "int32": 32, "int16": 16, "uint16": 16, "int8": 8,
         "uint8": 8, "int4": 4, "uint4": 4, "uint6": 6, "uint3": 3, "uint2": 2, "uint1": 1, "bool": 8,
         "fp8e4m3fn": 8, "fp8e5m2": 8, "int64": 64}


def _bytes(info: Any) -> int:
    if info is None or info.shape is None or any(d is None for d in info.shape):
        return 0
    return int(np.prod(info.shape, dtype=np.int64)) * _BITS.get(info.dtype or "", 32) // 8


def module_savings(program: Program, origins: dict[str, OpOrigin]) -> dict[str, int]:
    """Module path -> bytes its ops' compressed weights save over the same weights stored dense."""
    produced: dict[str, Any] = {}  # variable -> (op, its output TypeInfo)
    for op in program.main.ops:
        for name, info in op.outputs:
            produced[name] = (op, info)

    def stored(name: str) -> int:
        op, info = produced[name]
        if op.type == "const":
            return _bytes(info)
        return sum(stored(arg.name) for args in op.inputs.values() for arg in args
                   if arg.name is not None and arg.name in produced)

    savings: dict[str, int] = {}
    for op in program.main.ops:
        if op.type == "const" or op.type.startswith("constexpr_"):
            continue
        origin = origins.get(op.name) or origins.get(op.outputs[0][0] if op.outputs else "")
        if origin is None:
            continue
        for args in op.inputs.values():
            for arg in args:
                source = produced.get(arg.name or "")
                if source is None or not source[0].type.startswith("constexpr_"):
                    continue
                saved = _bytes(source[1]) - stored(arg.name)  # type: ignore[arg-type]
                savings[origin.module] = savings.get(origin.module, 0) + max(saved, 0)
    return savings
