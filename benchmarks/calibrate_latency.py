"""Fit the Core ML latency model's few parameters to published latencies, and say how far off it is.

    PYTHONPATH=. python benchmarks/calibrate_latency.py [--write] [--rows CSV]

Each row of benchmarks/calibration/coreml_latency.csv (the only figures the model may be fitted to)
is rebuilt with random weights, exported through mlbench's Core ML exporter at the row's precision
and analysed (calibration_models.py; analyses cached), placed for the row's compute units by
mlbench's rules, and estimated on the row's chip profile. The parameters (efficiency and dispatch
and bandwidth factor per device class, switch overhead, fixed cost per prediction) are fitted by least squares on log
ratios, with a weak pull towards their sourced priors so that parameters the rows cannot decide
stay where the research puts them. Prints every row, the median and worst ratio, and leave-one-out
(each row predicted by a fit without it). `--write` stores the fit in chips.yaml's `fit` section.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from calibration_models import ROWS_PATH, Row, analysis_for, load_rows

from mlbench.backends.coreml.chips import CHIPS_PATH, DEVICES, Fit, FitRow, Parameters, builtin_chips
from mlbench.backends.coreml.latency import estimate_latency
from mlbench.backends.coreml.placement import estimate_placement

# Priors, each with its reason (chips_notes.md in mlbench's research, sections 4 and 5).
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
PRIOR_WEIGHT = 0.3  # residual weight of log(parameter / prior): weak next to a row's log ratio
BOUNDS = {"efficiency": (0.02, 5.0), "bandwidth_factor": (0.2, 20.0), "dispatch_ms": (1e-5, 0.2), "switch_overhead_ms": (1e-4, 1.0),
          "fixed_ms": (1e-3, 3.0)}


def parameters(values: dict[str, float]) -> Parameters:
    return Parameters(efficiency={d: values[f"efficiency.{d}"] for d in DEVICES},
                      bandwidth_factor={d: values[f"bandwidth_factor.{d}"] for d in DEVICES},
                      dispatch_ms={d: values[f"dispatch_ms.{d}"] for d in DEVICES},
                      switch_overhead_ms=values["switch_overhead_ms"], fixed_ms=values["fixed_ms"])


def decidable(cases: list[tuple[Row, object, object]]) -> list[str]:
    """Parameters some row's estimate depends on: devices the rows' placements use, switches if any."""
    used = {op.device for _row, _analysis, placement in cases for op in placement.ops}
    names = [f"{kind}.{d}" for d in DEVICES if d in used for kind in ("efficiency", "bandwidth_factor", "dispatch_ms")]
    if any(placement.switches for _r, _a, placement in cases):
        names.append("switch_overhead_ms")
    return [*names, "fixed_ms"]


def fit(cases, free: list[str]) -> dict[str, float]:
    from scipy.optimize import least_squares

    chips = builtin_chips()
    values = {name: prior for name, (prior, _why) in PRIORS.items()}

    def residuals(x):
        trial = dict(values, **{name: math.exp(v) for name, v in zip(free, x)})
        params = parameters(trial)
        out = [math.log(estimate_latency(a, p, chips[row.chip], params).total_ms / row.latency_ms)
               for row, a, p in cases]
        return out + [PRIOR_WEIGHT * (v - math.log(PRIORS[n][0])) for n, v in zip(free, x)]

    lower = [math.log(BOUNDS[n.split(".")[0]][0]) for n in free]
    upper = [math.log(BOUNDS[n.split(".")[0]][1]) for n in free]
    start = [min(max(math.log(values[n]), lo + 1e-9), hi - 1e-9) for n, lo, hi in zip(free, lower, upper)]
    result = least_squares(residuals, start, bounds=(lower, upper))
    return dict(values, **{name: math.exp(v) for name, v in zip(free, result.x)})


def folded(ratio: float) -> float:
    return max(ratio, 1 / ratio)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, default=ROWS_PATH)
    ap.add_argument("--write", action="store_true", help="store the fit in chips.yaml")
    args = ap.parse_args(argv)

    chips = builtin_chips()
    cases, left_out = [], []
    for row in load_rows(args.rows):
        try:
            analysis = analysis_for(row)
        except Exception as exc:  # noqa: BLE001 - a model that does not export is recorded, the rest fit
            left_out.append(f"{row.label}: export failed ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        cases.append((row, analysis, estimate_placement(analysis, row.compute_units)))
    free = decidable(cases)
    values = {name: float(f"{v:.4g}") for name, v in fit(cases, free).items()}  # as stored in chips.yaml
    params = parameters(values)
    loo = []
    for i, (row, analysis, placement) in enumerate(cases):
        without = fit(cases[:i] + cases[i + 1:], free)
        loo.append(estimate_latency(analysis, placement, chips[row.chip], parameters(without)).total_ms / row.latency_ms)

    rows = []
    print(f"{'row':<40} {'published':>9} {'estimated':>9} {'ratio':>6} {'LOO':>6}  placement (ANE/GPU/CPU ops)")
    for (row, analysis, placement), loo_ratio in zip(cases, loo):
        est = estimate_latency(analysis, placement, chips[row.chip], params).total_ms
        shares = "/".join(str(sum(op.device == d for op in placement.ops)) for d in DEVICES)
        print(f"{row.label:<40} {row.latency_ms:>9.2f} {est:>9.2f} {est / row.latency_ms:>6.2f} {loo_ratio:>6.2f}  {shares}")
        rows.append(FitRow(model=row.model, chip=row.chip, compute_units=row.compute_units, precision=row.precision,
                           published_ms=row.latency_ms, estimated_ms=round(est, 4),
                           ratio=round(est / row.latency_ms, 4), loo_ratio=round(loo_ratio, 4)))
    ratios = [folded(r.ratio) for r in rows]
    loo_folded = [folded(r) for r in loo]
    print(f"\nfit: median ×{statistics.median(ratios):.2f}, worst ×{max(ratios):.2f} over {len(rows)} rows")
    print(f"leave-one-out: median ×{statistics.median(loo_folded):.2f}, worst ×{max(loo_folded):.2f}; "
          f"{sum(r <= 1.5 for r in loo_folded)} of {len(rows)} rows within 1.5×")
    print("parameters (fitted: " + ", ".join(free) + "):")
    for name, value in values.items():
        print(f"  {name:<28} {value:.4g}{'' if name in free else '  (prior: ' + PRIORS[name][1] + ')'}")
    for line in left_out:
        print(f"left out: {line}")
    if args.write:
        result = Fit(
            date=datetime.date.today().isoformat(),
            method=f"least squares on log(estimated / published) with a weak pull (weight {PRIOR_WEIGHT}) towards "
                   "each parameter's prior; placement by mlbench's rules for the row's compute units",
            data=f"benchmarks/calibration/{args.rows.name}", parameters=params, fitted=free,
            priors={name: f"{prior:g}: {why}" for name, (prior, why) in PRIORS.items()}, rows=rows,
            left_out=left_out, median_ratio=round(statistics.median(ratios), 3), worst_ratio=round(max(ratios), 3),
            loo_median_ratio=round(statistics.median(loo_folded), 3), loo_worst_ratio=round(max(loo_folded), 3))
        write_fit(result)
        print(f"wrote the fit to {CHIPS_PATH}")
    return 0


def write_fit(result: Fit) -> None:
    """Replace chips.yaml's `fit:` section (the last one in the file), keeping the profiles as written."""
    import yaml

    text = CHIPS_PATH.read_text(encoding="utf-8")
    head = text[: text.index("\nfit:") + 1]
    body = yaml.safe_dump({"fit": result.model_dump(mode="json")}, sort_keys=False, width=110, allow_unicode=True,
                          default_flow_style=None)
    CHIPS_PATH.write_text(head + body, encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
