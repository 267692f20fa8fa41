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

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.analysis.liveness import FunctionPeak, NotEstimable, function_values, opset_of, peak_of
from mlbench.backends.coreml.flexible_memory import largest_shape_peaks

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis.records import ProgramAnalysis
    from mlbench.records import Metric

ASSUMPTION = ("weights as stored + the largest sum of live activations in program order (per function, at the "
              "variant's precision and shape); assumes no buffer reuse beyond liveness, weights kept as stored "
              "(constexpr outputs not counted), and leaves out the runtime's own workspace")


def program_peaks(spec: Any) -> list[FunctionPeak]:
    """Each function's activation peak, at its declared shapes (NotEstimable where one is unknown)."""
    program = spec.mlProgram
    peaks = []
    for fname, function in program.functions.items():
        values, names = function_values(function, opset_of(function))
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
    from mlbench.backends.apple.analysis.package import load_spec

    if analysis.model_type != "mlProgram":
        raise NotEstimable(f"{analysis.model_type} model: only ML programs are walked for their activations")
    if analysis.totals.weight_bytes is None:
        raise NotEstimable("the weights were not analysed")
    spec, _spec_file, _root = load_spec(Path(path))
    if any(i.flexible for i in analysis.inputs):
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
