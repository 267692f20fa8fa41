"""How the interpreter treats precision, and the sentence a report quotes about it.

Every kernel computes in float32. After each op the executor stores the op's outputs in their
declared dtype: with ``precision="declared"`` (the default) an output declared float16 is rounded
to float16 (round to nearest even) and kept as float32 holding that float16 value, so a float16
program's every intermediate tensor carries float16 storage error, as on a device. With
``precision="float32"`` nothing is rounded: the float16 program's structure and its float16
weights run at float32, which separates what rounding activations costs from what the exported
graph and its weights cost. ``precision="float64"`` computes everything in float64 from the weights
and inputs as stored (a value declared float16 still holds a float16 value): the conformance lane's reference for telling a test's doubtful expected values
(computed from weights before their float16 cast) from a kernel's error.

Real hardware may accumulate differently: the Neural Engine and GPU may keep partial sums (of a
convolution, a matmul, a reduction) in float16, fuse ops, or reorder sums; none of that is modelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["EMULATION_NOTE", "PRECISIONS", "from_numpy", "store", "to_numpy"]

PRECISIONS = {
    "declared": "each op computes in float32 and its outputs are rounded to their declared dtype "
    "(float16 in a float16 program)",
    "float32": "each op computes in float32 and nothing is rounded to float16 (weights stay as stored)",
    "float64": "each op computes in float64; float16 outputs keep float16 values, nothing else is rounded (weights "
    "and inputs as stored): a reference for judging another's expected values, not what a device computes",
}

EMULATION_NOTE = (
    "Emulated: mlbench ran the saved Core ML program op by op on the CPU (reference kernels in float32). "
    "A float32 program runs in float32; in a float16 program every op computes in float32 and rounds its "
    "outputs to float16, the storage precision. Real hardware (the Neural Engine, the GPU) may accumulate "
    "sums in float16, fuse or reorder ops, so its error can be larger; this figure says whether the "
    "program computes what PyTorch computes, not what the device's own arithmetic adds."
)

_TORCH_INT = {
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "uint16": torch.int32, "uint32": torch.int64, "uint64": torch.int64,
    "int4": torch.int8, "uint1": torch.uint8, "uint2": torch.uint8, "uint3": torch.uint8,
    "uint4": torch.uint8, "uint6": torch.uint8,
}
_NUMPY_OUT = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "bool": np.bool_,
              "int32": np.int32, "int64": np.int64, "int8": np.int8, "uint8": np.uint8, "int16": np.int16}


def store(value: Any, dtype: str | None, precision: str = "declared") -> Any:
    """``value`` as the executor keeps it for a variable declared ``dtype``."""
    if not isinstance(value, torch.Tensor):
        if isinstance(value, np.ndarray) or (np.isscalar(value) and not isinstance(value, str)):
            value = from_numpy(np.asarray(value))
        else:
            return value  # strings, lists (tuples), dicts
    if precision == "float64" and dtype == "fp16":  # the program's float16 values, exact in float64
        return value.to(torch.float16).to(torch.float64)
    if precision == "float64" and dtype in ("fp32", "fp64", "bf16"):
        return value if value.dtype == torch.float64 else value.to(torch.float64)
    if dtype in ("fp32", "fp64", "bf16"):
        return value if value.dtype == torch.float32 else value.to(torch.float32)
    if dtype == "fp16":
        if precision == "float32":
            return value.to(torch.float32)
        return value.to(torch.float16).to(torch.float32)
    if dtype == "bool":
        return value if value.dtype == torch.bool else value.to(torch.bool)
    target = _TORCH_INT.get(dtype or "")
    if target is not None and value.dtype != target:
        return value.to(target)
    return value


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A torch tensor for a decoded numpy value (float16 kept exact as float32)."""
    array = np.asarray(array)
    if array.dtype == np.float16 or array.dtype == np.float64:
        array = array.astype(np.float32)
    elif array.dtype == np.uint16:
        array = array.astype(np.int32)
    elif array.dtype in (np.uint32, np.uint64):
        array = array.astype(np.int64)
    # np.ascontiguousarray makes a 0-d array 1-d: keep the declared rank (a scalar const stays a scalar)
    return torch.from_numpy(np.ascontiguousarray(array).reshape(array.shape))


def to_numpy(value: Any, dtype: str | None) -> np.ndarray:
    """A program output as numpy, in its declared dtype."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    target = _NUMPY_OUT.get(dtype or "")
    return array.astype(target) if target is not None else array
