"""Estimated Core ML latency per Apple chip: a roofline per operation on its placed device, plus
dispatch, device switches and a fixed cost per prediction (DESIGN.md, "How Core ML figures are
estimated": the *roofline* link).

    op       = max(FLOPs / (peak[device, dtype] × efficiency[device]),
                   bytes / (bandwidth × bandwidth_factor[device])) + dispatch[device]
    switch   = bytes of the tensor that crosses (the producing op's output) / bandwidth + switch overhead
    latency  = Σ op + Σ switch + fixed

FLOPs and bytes come from the cost model (bytes count weights at their stored size, so palettized
weights are read at their compressed size); the device of each op from the variant's placement
(estimated by the rules, or measured by a compute plan on macOS); peaks and bandwidth from the
chip's profile (``chips.yaml``); efficiency, bandwidth factor and dispatch per device, switch overhead
and the fixed cost are fitted
per device class, never per model, by ``benchmarks/calibrate_latency.py`` (the fixed cost and the dispatch
per chip and OS), or by ``mlbench calibrate`` on the team's measured runs (``calibration/``). Every
estimate carries the calibration's error band.

Precision: a float32 program never runs on the Neural Engine (the placement sees to it); ops run at
their output dtype's peak. Compression changes an op's time through the named rules of
``compression_rules.yaml`` (``compression_rules.py``), per Neural Engine generation: compressed weights are
read at their stored size (decompressed at load on the CPU), grouped look-up tables cost time, a W8A8
program's activations move as int8 from the A16 generation on and compute at the int8 rate only on chips
that publish one (A17 Pro, M4 and newer); before A16 its quantize/dequantize ops run on their own; weights 75% or
more sparse skip part of their arithmetic on the Neural Engine in iOS17 / macOS14 programs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.calibration.profile import UNCALIBRATED, chip_parameters
from mlbench.backends.apple.chips import DEVICES, ChipProfile, Fit, Parameters, builtin_chips, calibration
from mlbench.backends.apple.compression_rules import op_adjustment, variant_kind
from mlbench.backends.apple.cost.base import DTYPE_BITS
from mlbench.records import Band, Metric

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis
    from mlbench.backends.apple.calibration.profile import LoadedProfile
    from mlbench.records import Placement

__all__ = ["Estimate", "LatencyTerms", "estimate_latency", "latency_band", "latency_metrics", "latency_terms"]

METRIC_PREFIX = "latency.estimated."
NOT_CALIBRATED = "the latency model is not calibrated: run benchmarks/calibrate_latency.py"
OVERHEAD_SHARE = 0.5
"""An estimate whose fixed and per-op costs are this share of it or more takes, on a chip without rows, the band of
the calibration rows that were so (overhead_band)."""


@dataclass
class Estimate:
    """One chip's estimate, in milliseconds, with its parts."""

    total_ms: float
    compute_ms: dict[str, float] = field(default_factory=dict)  # roofline time per device
    dispatch_ms: float = 0.0
    switch_ms: float = 0.0
    fixed_ms: float = 0.0
    switches: int = 0
    unplaced_ops: int = 0  # ops the placement did not place: counted on the preferred device
    rules: list[str] = field(default_factory=list)  # the compression rules that changed some op


def output_bytes(layer: LayerInfo) -> int:
    """Bytes of an op's (first) output; 0 when its shape or dtype is unknown."""
    shape, bits = layer.output_shape, DTYPE_BITS.get(layer.output_dtype or "")
    if shape is None or bits is None or any(d is None for d in shape):
        return 0
    n = 1
    for d in shape:
        n *= d  # type: ignore[operator]
    return (n * bits + 7) // 8


def compute_dtype(layer: LayerInfo, device: str, program_fp16: bool, int8_activations: bool) -> str:
    """The arithmetic an op runs at: its output's float type; the Neural Engine never runs fp32 (int8 where a
    compression rule says so)."""
    if device == "neural_engine":
        return "int8" if int8_activations else "fp16"
    if layer.output_dtype in ("fp16", "fp32"):
        return layer.output_dtype
    return "fp16" if program_fp16 else "fp32"


@dataclass
class LatencyTerms:
    """What an estimate of one program, placement and chip is made of before the fitted parameters come in: per op
    its device, its FLOPs over the peak and its bytes over the bandwidth (seconds at efficiency and bandwidth
    factor 1), and the compression rules' time factor; dispatches per device; the switches. The calibration
    evaluates these for many parameter sets, so the rules and lookups run once."""

    device: Any  # numpy int array: index into DEVICES per costed op
    flop_s: Any
    byte_s: Any
    time_factor: Any
    dispatches: Any  # per device
    switch_s: float
    switches: int
    unplaced_ops: int
    rules: list[str]

    def parts(self, params: Parameters) -> tuple[Any, float, float]:
        """(seconds per device, dispatch ms, switch ms) under `params`."""
        import numpy as np

        eff = np.array([params.efficiency[d] for d in DEVICES])[self.device]
        factor = np.array([params.bandwidth_factor[d] for d in DEVICES])[self.device]
        seconds = np.maximum(self.flop_s / eff, self.byte_s / factor) * self.time_factor
        per_device = np.bincount(self.device, weights=seconds, minlength=len(DEVICES))
        dispatch = float(self.dispatches @ np.array([params.dispatch_ms[d] for d in DEVICES]))
        return per_device, dispatch, 1e3 * self.switch_s + self.switches * params.switch_overhead_ms

    def total_ms(self, params: Parameters) -> float:
        per_device, dispatch, switch = self.parts(params)
        return 1e3 * float(per_device.sum()) + dispatch + switch + params.fixed_ms


def latency_terms(analysis: ProgramAnalysis, placement: Placement, chip: ChipProfile) -> LatencyTerms:
    """The parameter-free part of `estimate_latency` (see LatencyTerms)."""
    import numpy as np

    layers = analysis.layers
    by_name = {layer.name: layer for layer in layers}
    aligned = len(placement.ops) == len(layers)
    fallback = placement.preferred or "cpu"
    program_fp16 = analysis.precision in ("FLOAT16", "MIXED")
    int8_activations = "quantize" in analysis.op_counts  # W8A8: activations quantized in the program
    device_ix, flop_s, byte_s, factors, rules = [], [], [], [], []
    dispatches = [0] * len(DEVICES)
    switch_s, switches, unplaced = 0.0, 0, 0
    previous: tuple[str, LayerInfo] | None = None
    for i, op in enumerate(placement.ops):
        layer = by_name.get(op.name) or (layers[i] if aligned else None)
        if layer is None:
            continue
        device = op.device if op.device in DEVICES else fallback
        unplaced += op.device is None
        adj = op_adjustment(layer, device, chip, int8_activations, analysis.opset_os)
        rules += [rule for rule in adj.rules if rule not in rules]
        if adj.free:  # a quantize/dequantize fused into its neighbour
            continue
        dtype = compute_dtype(layer, device, program_fp16, adj.int8)
        device_ix.append(DEVICES.index(device))
        flop_s.append(layer.flops * adj.flops_factor / chip.peak(device, dtype) if layer.flops is not None else 0.0)
        byte_s.append((layer.bytes * adj.bytes_factor + adj.extra_bytes) / chip.memory.bandwidth
                      if layer.bytes is not None else 0.0)
        factors.append(adj.time_factor)
        dispatches[DEVICES.index(device)] += 1
        if previous is not None and previous[0] != device:
            switches += 1
            switch_s += output_bytes(previous[1]) / chip.memory.bandwidth
        previous = (device, layer)
    return LatencyTerms(device=np.array(device_ix, dtype=int), flop_s=np.array(flop_s), byte_s=np.array(byte_s),
                        time_factor=np.array(factors), dispatches=np.array(dispatches, dtype=float),
                        switch_s=switch_s, switches=switches, unplaced_ops=unplaced, rules=rules)


def estimate_latency(analysis: ProgramAnalysis, placement: Placement, chip: ChipProfile,
                     params: Parameters) -> Estimate:
    """The latency of one prediction of `analysis` placed as `placement`, on `chip`."""
    terms = latency_terms(analysis, placement, chip)
    per_device, dispatch, switch = terms.parts(params)
    estimate = Estimate(total_ms=0.0, compute_ms={d: 1e3 * float(v) for d, v in zip(DEVICES, per_device)},
                        dispatch_ms=dispatch, switch_ms=switch, fixed_ms=params.fixed_ms, switches=terms.switches,
                        unplaced_ops=terms.unplaced_ops, rules=terms.rules)
    estimate.total_ms = (sum(estimate.compute_ms.values()) + estimate.dispatch_ms + estimate.switch_ms
                         + estimate.fixed_ms)
    return estimate


def latency_band(fit: Fit) -> Band:
    """The error every estimate carries: how far the calibration's rows were, each predicted without it
    (leave-one-out) where the fit recorded that, else with every row in the fit."""
    if fit.loo_median_ratio is not None and fit.loo_worst_ratio is not None:
        return Band(median_ratio=fit.loo_median_ratio, worst_ratio=fit.loo_worst_ratio,
                    basis=f"{len(fit.rows)} published Core ML latencies, each predicted by a fit without it"
                    f"; calibrated {fit.date}")
    return Band(median_ratio=fit.median_ratio, worst_ratio=fit.worst_ratio,
                basis=f"{len(fit.rows)} published Core ML latencies the model was fitted to; calibrated {fit.date}")


def latency_metrics(analysis: ProgramAnalysis, placement: Placement, chip_ids: list[str],
                    own_profiles: dict[str, ChipProfile] | None = None,
                    this_machine: str | None = None,
                    calibrations: dict[str, LoadedProfile] | None = None) -> tuple[dict[str, Metric], dict[str, dict]]:
    """`latency.estimated.<chip>` per chip (ms, estimated, with the band), and each estimate's parts.

    `this_machine` is the chip id of the Mac measuring the variant, if it has a profile: that
    estimate names the measured median it predicts, so reports show their ratio. `calibrations`: the
    target's calibration profiles by chip id (``mlbench calibrate``); a chip without one uses the shipped
    per-chip fit, or the priors and the wider band of an uncalibrated chip.
    """
    profiles = {**builtin_chips(), **(own_profiles or {})}
    fit = calibration()
    metrics: dict[str, Metric] = {}
    parts: dict[str, dict] = {}
    kind = variant_kind(analysis)
    for chip_id in chip_ids:
        name = METRIC_PREFIX + chip_id
        if fit is None:
            metrics[name] = Metric.absent("ms", NOT_CALIBRATED)
            continue
        params, band = chip_parameters(fit, chip_id, calibrations)
        estimate = estimate_latency(analysis, placement, profiles[chip_id], params)
        if calibrations is None or chip_id not in calibrations:
            band = compressed_band(fit, kind, overhead_band(fit, estimate, band or latency_band(fit)))
        metrics[name] = Metric(value=round(estimate.total_ms, 4), unit="ms", source="estimated",
                               band=band or latency_band(fit),
                               measured_as="latency.median" if chip_id == this_machine else None)
        parts[chip_id] = {"compute_ms": {d: round(v, 4) for d, v in estimate.compute_ms.items() if v},
                          "dispatch_ms": round(estimate.dispatch_ms, 4), "switch_ms": round(estimate.switch_ms, 4),
                          "fixed_ms": estimate.fixed_ms, "overhead_share": round(overhead_share(estimate), 3),
                          "switches": estimate.switches, "chip": profiles[chip_id].name,
                          "rules": estimate.rules, "kind": kind, "order_evidence": fit.order_evidence}
    return metrics, parts


def overhead_share(estimate: Estimate) -> float:
    """How much of an estimate is the fixed cost per prediction, the per-op cost and the device switches."""
    overhead = estimate.fixed_ms + estimate.dispatch_ms + estimate.switch_ms
    return overhead / estimate.total_ms if estimate.total_ms > 0 else 1.0


def overhead_band(fit: Fit, estimate: Estimate, band: Band) -> Band:
    """A chip without rows: the leave-one-chip-out band of the rows whose estimate was, like this one, mostly fixed
    and per-op cost (OVERHEAD_SHARE or more), or of the others. Those costs are what carries worst between chips
    (they differ by harness as much as by chip), so a 0.13 ms model's estimate is far less sure than a 2 ms one's."""
    if UNCALIBRATED not in band.basis:
        return band
    share = overhead_share(estimate)
    over = share >= OVERHEAD_SHARE
    side = fit.uncalibrated_overhead_bound if over else fit.uncalibrated_compute_bound
    if side is None:
        return band
    which = "at least" if over else "under"
    # the share itself is the estimate's (its parts' `overhead_share`), not the band's: every estimate on one side
    # carries the same band, so a report names it once
    return Band(median_ratio=side.median_ratio, worst_ratio=side.worst_ratio,
                basis=f"{band.basis}; an estimate {which} {OVERHEAD_SHARE:.0%} fixed and per-op cost takes the band "
                f"of the {side.rows} rows ({side.models} model{'s' if side.models != 1 else ''} on {side.chips} "
                f"chip{'s' if side.chips != 1 else ''}) whose estimate without their chip was so")


def compressed_band(fit: Fit, kind: str, band: Band) -> Band:
    """A compressed variant's band: the compressed rows' own leave-one-out, not the pooled one; on a chip without
    rows, the wider of that and the chip's leave-one-chip-out band, naming both."""
    if kind in ("float16", "float32") or fit.compressed_median_ratio is None or fit.compressed_worst_ratio is None:
        return band
    words = (f"{kind} variant: the compressed calibration rows, each predicted by a fit without it "
             f"(×{fit.compressed_median_ratio:.2f} typical, ×{fit.compressed_worst_ratio:.2f} worst)")
    if "uncalibrated chip" in band.basis:
        return Band(median_ratio=max(band.median_ratio, fit.compressed_median_ratio),
                    worst_ratio=max(band.worst_ratio, fit.compressed_worst_ratio),
                    basis=f"{band.basis}; and, wider where it is, {words}")
    return Band(median_ratio=fit.compressed_median_ratio, worst_ratio=fit.compressed_worst_ratio,
                basis=f"{words}; calibrated {fit.date}")
