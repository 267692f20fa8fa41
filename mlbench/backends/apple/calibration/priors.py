"""The latency model's priors, each with its reason (chips_notes.md in mlbench's research, sections 4
and 5): where the calibration rows cannot determine a parameter, it stays here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlbench.backends.apple.chips import Parameters

PRIORS: dict[str, tuple[float, str]] = {
    "efficiency.neural_engine": (0.5, "single ANE ops reach ~30% of peak, fused conv chains 60-98% (maderix M4/M3 Pro)"),
    "efficiency.gpu": (0.75, "M4 GPU fp32 GEMM reaches 2.9 of ~3.8 TFLOPS (arXiv 2502.05317)"),
    "efficiency.cpu": (1.0, "NEON peak; Accelerate's AMX/SME units can exceed it on conv/matmul"),
    "bandwidth_factor.neural_engine": (1.0, "DRAM bandwidth; activations kept in the ANE's ~32 MB SRAM make it "
                                       "higher (maderix M4 SRAM cliff), so the rows decide"),
    "bandwidth_factor.gpu": (0.85, "M-series GPUs reach ~85-100% of spec bandwidth in STREAM (arXiv 2502.05317)"),
    "bandwidth_factor.cpu": (0.85, "M-series reach ~85-100% of spec bandwidth in STREAM (arXiv 2502.05317)"),
    "dispatch_ms.neural_engine": (0.005, "ANE runs a compiled graph at once: small per-op cost (assumption)"),
    "dispatch_ms.gpu": (0.01, "assumption: one Metal kernel per op; no public figure"),
    "dispatch_ms.cpu": (0.01, "assumption: one BNNS call per op; no public figure"),
    "switch_overhead_ms": (0.05, "assumption: no published figure for a device switch"),
    "fixed_ms": (0.2, "a per-prediction floor of ~0.1-0.3 ms through Core ML (maderix, M4 direct API + Core ML overhead)"),
}


def prior_values() -> dict[str, float]:
    return {name: value for name, (value, _why) in PRIORS.items()}


def flat(params: Parameters) -> dict[str, float]:
    """`Parameters` as the fit's flat names."""
    values = {f"{kind}.{d}": v for kind in ("efficiency", "bandwidth_factor", "dispatch_ms")
              for d, v in getattr(params, kind).items()}
    return {**values, "switch_overhead_ms": params.switch_overhead_ms, "fixed_ms": params.fixed_ms}
