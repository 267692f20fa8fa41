"""The op registry: one kernel function per MIL op type, registered by name.

A kernel takes the op's inputs as keyword arguments (MIL input names; literal and const inputs
already decoded) and returns one value, or a tuple for an op with several outputs. Floating-point
tensors arrive as float32 torch tensors whatever the program's precision: the executor rounds
every op's outputs to their declared dtype (see ``precision.py``), so kernels never see float16.

    @kernel("relu")
    def relu(x, **_):
        return torch.relu(x)

Inputs that MIL declares as tuples (``concat.values``) are passed as lists: name them in
``variadic``. Unknown inputs go to ``**_`` so a newer opset's extra optional input does not
break an older kernel; a kernel that must refuse an input value raises ``KernelError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "CONTROL_FLOW_OPS",
    "KERNELS",
    "Kernel",
    "KernelError",
    "as_bool",
    "as_float",
    "as_int",
    "as_ints",
    "as_str",
    "kernel",
]


@dataclass(frozen=True)
class Kernel:
    op_type: str
    fn: Callable[..., Any]
    variadic: frozenset[str]


KERNELS: dict[str, Kernel] = {}

#: Ops with nested blocks, run by the executor itself (not kernels).
CONTROL_FLOW_OPS = frozenset({"cond", "while_loop"})


class KernelError(ValueError):
    """A kernel met an input value it does not implement (e.g. an unknown mode string)."""


def kernel(*op_types: str, variadic: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the kernel of each op type named."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op_type in op_types:
            if op_type in KERNELS:
                raise ValueError(f"two kernels for op type {op_type!r}")
            KERNELS[op_type] = Kernel(op_type, fn, frozenset(variadic))
        return fn

    return register




# ------------------------------------------------------------------ parameter helpers


def as_ints(value: Any) -> list[int]:
    """A list of Python ints from a tensor, array, list or scalar."""
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def as_int(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.reshape(-1)[0].item())
    return int(value)


def as_float(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        return float(value.reshape(-1)[0].item())
    return float(value)


def as_bool(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(value.reshape(-1)[0].item())
    return bool(value)


def as_str(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return str(value[0])
    return str(value)
