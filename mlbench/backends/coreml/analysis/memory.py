"""What a Core ML program needs in memory, estimated from the saved package on any OS: `memory.estimated`.

    estimate = weights as stored + the activation peak

- Weights as stored: the analysis's weight bytes (compressed weights at their compressed size: a 4-bit
  palettized weight counts its packed indices and its table).
- The activation peak, by a liveness pass over each function in program order (nested blocks in their
  place): a value is live from the operation that makes it (a function input: from the start) to the last
  operation that reads it (a function output: to the end); at each operation, the bytes of every live value
  are summed at their declared type (the variant's precision and shape); the largest sum is the function's
  peak and the package's is the largest over its functions (one function runs at a time).

The assumption, said beside the figure: no buffer is reused beyond what liveness allows (a runtime that
aliases a reshape's output or computes in place needs less), constants and the outputs of `constexpr_*`
operations are weights, not activations (the weights stay as stored), and the runtime's own workspace
(its scratch buffers, compiled kernels, the process itself) is left out.

Flexible shapes are estimated at the largest shape they allow (`flexible.py` here): an input's range at its
upper bound, the enumerated shape that gives the largest peak; an unbounded range has no largest shape, and
the figure is absent, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.coreml.analysis.mil import declared_bytes, is_data_op, op_name, tensor_info

if TYPE_CHECKING:
    from mlbench.backends.coreml.analysis.records import ProgramAnalysis
    from mlbench.records import Metric

ASSUMPTION = ("weights as stored + the largest sum of live activations in program order (per function, at the "
              "variant's precision and shape); assumes no buffer reuse beyond liveness, weights kept as stored "
              "(constexpr outputs not counted), and leaves out the runtime's own workspace")


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
    dtype, shape = tensor_info(value_type)
    if value_type.WhichOneof("type") in ("tensorType", "stateType") and (shape is None or None in shape):
        raise NotEstimable(f"the value {name} has a shape unknown until run time")
    if value_type.WhichOneof("type") == "stateType":
        return declared_bytes(value_type.stateType.wrappedType)
    return declared_bytes(value_type)


def _opset(function: Any) -> str:
    opset = function.opset
    return opset if opset in function.block_specializations else next(iter(function.block_specializations))


def program_peaks(spec: Any) -> list[FunctionPeak]:
    """Each function's activation peak, at its declared shapes (NotEstimable where one is unknown)."""
    program = spec.mlProgram
    peaks = []
    for fname, function in program.functions.items():
        values, names = function_values(function, _opset(function))
        peaks.append(peak_of(values, names, fname))
    return peaks


@dataclass
class MemoryEstimate:
    weight_bytes: int
    activation_bytes: int
    peaks: list[FunctionPeak]
    shape: str  # which shape the activations are sized at

    @property
    def total(self) -> int:
        return self.weight_bytes + self.activation_bytes

    def details(self) -> dict[str, Any]:
        return {"source": "estimated", "assumption": ASSUMPTION, "weight_bytes": self.weight_bytes,
                "activation_bytes": self.activation_bytes, "shape": self.shape,
                "functions": [{"function": p.function, "activation_bytes": p.bytes, "peak_at": p.at,
                               "live_at_peak": p.live[:20]} for p in self.peaks]}


def estimate_memory(path: Path, analysis: ProgramAnalysis) -> MemoryEstimate:
    """The estimate for a saved ML program (NotEstimable with the reason when it cannot be had)."""
    from mlbench.backends.coreml.analysis.package import load_spec

    if analysis.model_type != "mlProgram":
        raise NotEstimable(f"{analysis.model_type} model: only ML programs are walked for their activations")
    if analysis.totals.weight_bytes is None:
        raise NotEstimable("the weights were not analysed")
    spec, _spec_file, _root = load_spec(Path(path))
    if any(i.flexible for i in analysis.inputs):
        from mlbench.backends.coreml.analysis.flexible_memory import largest_shape_peaks

        peaks, shape = largest_shape_peaks(path, spec)
    else:
        peaks, shape = program_peaks(spec), "the program's fixed shapes"
    activations = max(p.bytes for p in peaks) if peaks else 0
    return MemoryEstimate(analysis.totals.weight_bytes, activations, peaks, shape)


def memory_metrics(path: Path, analysis: ProgramAnalysis) -> tuple[dict[str, Metric], dict[str, Any]]:
    """`memory.estimated` (absent with the reason where it cannot be had) and its parts for the record's details."""
    from mlbench.records import Metric

    try:
        estimate = estimate_memory(path, analysis)
    except NotEstimable as exc:
        return {"memory.estimated": Metric.absent("bytes", f"not estimated: {exc}")}, {"absent": str(exc)}
    return {"memory.estimated": Metric.estimated(estimate.total, "bytes")}, estimate.details()
