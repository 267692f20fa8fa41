"""Bytes each module's compressed weights save: what ``constexpr_*`` decompression stores against the
dense tensor it makes, read from the variant's program (declared types and shapes, as the package holds)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlbench.backends.coreml.emulate import Program
from mlbench.localization import OpOrigin

__all__ = ["module_savings", "saved_bytes", "weight_readers"]

_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp64": 64, "int32": 32, "int16": 16, "uint16": 16, "int8": 8,
         "uint8": 8, "int4": 4, "uint4": 4, "uint6": 6, "uint3": 3, "uint2": 2, "uint1": 1, "bool": 8,
         "fp8e4m3fn": 8, "fp8e5m2": 8, "int64": 64}


def _bytes(info: Any) -> int:
    if info is None or info.shape is None or any(d is None for d in info.shape):
        return 0
    return int(np.prod(info.shape, dtype=np.int64)) * _BITS.get(info.dtype or "", 32) // 8


def saved_bytes(weights: dict[str, dict[str, int]], modules: list[str] | None = None) -> int:
    """Bytes the compressed weights of ``modules`` (all when None) save, a weight shared by two counted once."""
    chosen: dict[str, int] = {}
    for module in weights if modules is None else modules:
        chosen.update(weights.get(module, {}))
    return sum(chosen.values())


def module_savings(program: Program, origins: dict[str, OpOrigin]) -> dict[str, dict[str, int]]:
    """Module path -> {compressed weight: bytes it saves over the same weight stored dense}. A weight two
    modules read (tied embeddings) is in both: leaving either uncompressed gives up all of it."""
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

    savings: dict[str, dict[str, int]] = {}
    for _op, origin, name in _compressed_reads(program, origins, produced):
        savings.setdefault(origin.module, {})[name] = max(_bytes(produced[name][1]) - stored(name), 0)
    return savings


def weight_readers(program: Program, origins: dict[str, OpOrigin]) -> dict[str, list[str]]:
    """Module path -> the names of its ops that read a compressed weight (what an op-level exclude names)."""
    produced = {name: (op, info) for op in program.main.ops for name, info in op.outputs}
    readers: dict[str, list[str]] = {}
    for op, origin, _name in _compressed_reads(program, origins, produced):
        names = readers.setdefault(origin.module, [])
        if op.name not in names:
            names.append(op.name)
    return readers


def _compressed_reads(program: Program, origins: dict[str, OpOrigin], produced: dict[str, Any]) -> list:
    """(op, its origin, the compressed weight it reads) for every such read, in program order."""
    reads = []
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
                reads.append((op, origin, arg.name))
    return reads
