"""The LiteRT interpreter as mlbench runs it: XNNPACK on the CPU, inputs (de)quantized at the boundary, and
which operations the XNNPACK delegate took, read from the interpreter's execution plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlbench.backends.capture import quiet_native_stderr
from mlbench.backends.litert.export import SIGNATURE
from mlbench.records import OpPlacement, Placement

XNNPACK_PROVIDER = "XNNPACK delegate"
DELEGATED_METRIC = "delegated.xnnpack"
REFERENCE_KERNELS = "LiteRT reference (builtin) kernels"
DELEGATE_OP = "DELEGATE"
NO_OP_TIMES = ("ai-edge-litert's Python interpreter exposes no per-operator profiler (the native benchmark_model "
               "tool has one)")


def interpreter(path: Path, threads: int, *, delegate: bool = True) -> Any:
    """An allocated interpreter; with `delegate`, LiteRT's default XNNPACK delegate applies (as on a phone)."""
    with quiet_native_stderr():
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        resolver = (OpResolverType.AUTO if delegate else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        result = Interpreter(model_path=str(path), num_threads=threads, experimental_op_resolver_type=resolver)
        result.allocate_tensors()
    return result


class Runner:
    """One call of the serving signature with float32 inputs and float32 outputs: an int8 model's
    inputs are quantized and its outputs dequantized with the tensors' own scale and zero point."""

    def __init__(self, interp: Any) -> None:
        self.runner = interp.get_signature_runner(SIGNATURE)
        self.inputs = self.runner.get_input_details()
        self.outputs = self.runner.get_output_details()
        self.names = list(interp.get_signature_list()[SIGNATURE]["inputs"])
        self.output_names = sorted(self.outputs, key=_output_order)

    def feed(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        if len(arrays) != len(self.names):
            raise ValueError(f"the .tflite signature takes {len(self.names)} inputs ({', '.join(self.names)}); "
                             f"the model has {len(arrays)}")
        return {name: to_tensor(array, self.inputs[name]) for name, array in zip(self.names, arrays)}

    def __call__(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.runner(**feed)

    def outputs_of(self, result: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [from_tensor(result[name], self.outputs[name]) for name in self.output_names]


def _output_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("_", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def to_tensor(array: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    """A float array as the tensor `detail` takes it: quantized with its own scale and zero point (rounded,
    clipped to its integer range) where it is an integer tensor with a scale; else cast."""
    dtype = np.dtype(detail["dtype"])
    if np.issubdtype(dtype, np.integer) and np.issubdtype(array.dtype, np.floating):
        scale, zero = detail["quantization"]
        if scale:
            info = np.iinfo(dtype)
            return np.clip(np.round(array / scale + zero), info.min, info.max).astype(dtype)
    return array.astype(dtype, copy=False)


def from_tensor(array: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    """A tensor's value in float32: dequantized with its own scale and zero point where it has one."""
    scale, zero = detail["quantization"]
    if np.issubdtype(array.dtype, np.integer) and scale:
        return ((array.astype(np.float32) - zero) * scale).astype(np.float32)
    return np.asarray(array, dtype=np.float32) if np.issubdtype(array.dtype, np.floating) else array


def delegated(ops: list[dict[str, Any]]) -> dict[int, bool]:
    """Which original operations a delegate took, from an execution plan with DELEGATE nodes: walking back
    from each delegate node's outputs to its inputs visits exactly the operations of its partition."""
    originals = [op for op in ops if op["op_name"] != DELEGATE_OP]
    producer = {int(t): op["index"] for op in originals for t in op["outputs"]}
    by_index = {op["index"]: op for op in originals}
    taken: dict[int, bool] = dict.fromkeys(by_index, False)
    for node in (op for op in ops if op["op_name"] == DELEGATE_OP):
        boundary = {int(t) for t in node["inputs"]}
        stack = [int(t) for t in node["outputs"]]
        while stack:
            tensor = stack.pop()
            if tensor in boundary or tensor not in producer or taken[producer[tensor]]:
                continue
            index = producer[tensor]
            taken[index] = True
            stack.extend(int(t) for t in by_index[index]["inputs"] if t >= 0)
    return taken


def build_placement(ops: list[dict[str, Any]], threads: int) -> tuple[Placement, float]:
    """Placement (every operation on the CPU; `provider` says XNNPACK or the reference kernels) and the share
    of the compute operations the XNNPACK delegate took."""
    taken = delegated(ops)
    placed = []
    for op in (op for op in ops if op["op_name"] != DELEGATE_OP):
        on_xnnpack = taken[op["index"]]
        placed.append(OpPlacement(
            name=f"{op['index']}:{op['op_name']}", op_type=op["op_name"].lower(), device="cpu",
            provider=XNNPACK_PROVIDER if on_xnnpack else REFERENCE_KERNELS,
            reason=None if on_xnnpack else "XNNPACK did not take this operation (type or data type unsupported)"))
    on = sum(1 for p in placed if p.provider == XNNPACK_PROVIDER)
    share = on / len(placed) if placed else 0.0
    partitions = sum(1 for op in ops if op["op_name"] == DELEGATE_OP)
    placement = Placement(
        source="measured", method="LiteRT interpreter execution plan (XNNPACK delegate)", preferred="cpu",
        compute_ops=len(placed), constants=0, by_count={"cpu": 1.0} if placed else {}, by_cost=None, cost_basis=None,
        switches=0,
        note=f"{on} of {len(placed)} operations on XNNPACK in {partitions} partition(s), the rest on LiteRT's "
        f"reference kernels; {threads} thread(s); no cost per operation: {NO_OP_TIMES}",
        ops=placed)
    return placement, share


def op_counts(ops: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in ops:
        if op["op_name"] != DELEGATE_OP:
            counts[op["op_name"]] = counts.get(op["op_name"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
