"""Fit the Core ML latency model's parameters to published latencies, and say how far off it is.

    PYTHONPATH=. python benchmarks/calibrate_latency.py [--write] [--rows CSV]

Each row of benchmarks/calibration/coreml_latency.csv (the only figures the model may be fitted to)
is rebuilt with random weights, exported through mlbench's Core ML exporter at the row's precision
and analysed (calibration_models.py; analyses cached), placed for the row's compute units by
mlbench's rules, and estimated on the row's chip profile. The fit is mlbench's own
(mlbench/backends/apple/calibration/fitting.py, the one `mlbench calibrate` uses on measured runs):
efficiency and bandwidth factor per device class and the switch overhead are shared by every chip; the
fixed cost per prediction and the dispatch per op are per chip and OS (`fit.calibrated` + `fit.per_chip`).
A chip without rows uses one set of parameters pooled over every row (`fit.parameters`, round 2's
structure), and its band is leave-one-chip-out. A parameter is fitted only where
the rows determine it (it moves some row, adds a direction the others do not, and one row is left for
leave-one-out); the others keep their sourced priors, with a weak pull towards them all the same.
Prints every row, the median and worst ratio, leave-one-out (each row predicted by a fit without it)
and leave-one-chip-out (each chip's rows predicted by a fit that saw none of them: the band of a chip
without rows, "uncalibrated chip"). `--write` stores the fit in chips.yaml's `fit` section.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from calibration_models import ROWS_PATH, Row, analysis_for, load_rows

from mlbench.backends.apple.calibration.fitting import (
    Case,
    calibrate_cases,
    candidates,
    determinable,
    estimated_ms,
    folded,
    parameters,
    with_groups,
)
from mlbench.backends.apple.calibration.fitting import fit as fit_values
from mlbench.backends.apple.calibration.priors import PRIORS, prior_values
from mlbench.backends.apple.chips import CHIPS_PATH, DEVICES, ChipFit, Fit, FitRow, builtin_chips
from mlbench.backends.apple.placement import estimate_placement

PRIOR_WEIGHT = 0.3  # residual weight of log(parameter / prior): weak next to a row's log ratio

__all__ = ["PRIORS", "Row", "case_for", "decidable", "fit", "main", "parameters"]


def case_for(row: Row, analysis, placement) -> Case:
    return Case(label=row.label, group=f"{row.chip} {row.os}".strip(), chip=builtin_chips()[row.chip],
                analysis=analysis, placement=placement, measured_ms=row.latency_ms, model=row.model,
                compute_units=row.compute_units, precision=row.precision)


def decidable(cases: list[Case]) -> list[str]:
    """The parameters the rows determine (per chip and OS for the fixed and dispatch costs)."""
    names = candidates(cases, grouped=True)
    return determinable(cases, with_groups(prior_values(), names), names)[0]


def fit(cases: list[Case], free: list[str]) -> dict[str, float]:
    return fit_values(cases, free, with_groups(prior_values(), candidates(cases, grouped=True)), PRIOR_WEIGHT)


def pooled(cases: list[Case]) -> dict[str, float]:
    """One set of parameters for every chip (round 2's structure): what a chip without rows uses."""
    return calibrate_cases(cases, prior_values(), prior_weight=PRIOR_WEIGHT, leave_one_out=False).values


def leave_one_chip_out(cases: list[Case]) -> list[float]:
    """Each chip's rows predicted by the pooled fit of the other chips' rows: what a chip without rows gets."""
    ratios = []
    for group in sorted({c.group for c in cases}):
        values = pooled([c for c in cases if c.group != group])
        ratios += [estimated_ms(c, values) / c.measured_ms for c in cases if c.group == group]
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, default=ROWS_PATH)
    ap.add_argument("--write", action="store_true", help="store the fit in chips.yaml")
    args = ap.parse_args(argv)

    cases, left_out = [], []
    for row in load_rows(args.rows):
        try:
            analysis = analysis_for(row)
        except Exception as exc:  # noqa: BLE001 - a model that does not export is recorded, the rest fit
            left_out.append(f"{row.label}: export failed ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        cases.append(case_for(row, analysis, estimate_placement(analysis, row.compute_units)))
    result = calibrate_cases(cases, prior_values(), prior_weight=PRIOR_WEIGHT, grouped=True)
    values, free = result.values, result.free
    shared_pool = pooled(cases)
    uncalibrated = [folded(r) for r in leave_one_chip_out(cases)]

    rows = []
    print(f"{'row':<40} {'published':>9} {'estimated':>9} {'ratio':>6} {'LOO':>6}  placement (ANE/GPU/CPU ops)")
    for case, ratio, loo_ratio in zip(cases, result.ratios, result.loo):
        est = ratio * case.measured_ms
        shares = "/".join(str(sum(op.device == d for op in case.placement.ops)) for d in DEVICES)
        loo_text = f"{loo_ratio:>6.2f}" if loo_ratio is not None else f"{'-':>6}"
        print(f"{case.label:<40} {case.measured_ms:>9.2f} {est:>9.2f} {ratio:>6.2f} {loo_text}  {shares}")
        rows.append(FitRow(model=case.model, chip=case.group.split()[0],
                           compute_units=case.compute_units, precision=case.precision, published_ms=case.measured_ms,
                           estimated_ms=round(est, 4), ratio=round(ratio, 4),
                           loo_ratio=None if loo_ratio is None else round(loo_ratio, 4)))
    summary = result.summary()
    loo_folded = [folded(r) for r in result.loo if r is not None]
    print(f"\nfit: median ×{summary['median_ratio']:.2f}, worst ×{summary['worst_ratio']:.2f} over {len(rows)} rows")
    print(f"leave-one-out: median ×{statistics.median(loo_folded):.2f}, worst ×{max(loo_folded):.2f}; "
          f"{sum(r <= 1.5 for r in loo_folded)} of {len(rows)} rows within 1.5×")
    print(f"leave-one-chip-out (uncalibrated chip): median ×{statistics.median(uncalibrated):.2f}, "
          f"worst ×{max(uncalibrated):.2f} over {len(uncalibrated)} rows")
    print("pooled fit for chips without rows: " + ", ".join(f"{n} {v:.4g}" for n, v in shared_pool.items()))
    print("parameters (fitted: " + ", ".join(free) + "):")
    for name, value in values.items():
        why = result.refused.get(name) or "not determined by the rows"
        print(f"  {name:<40} {value:.4g}{'' if name in free else '  (prior; ' + why + ')'}")
    for line in left_out:
        print(f"left out: {line}")
    if args.write:
        groups = sorted({c.group for c in cases})
        per_chip = {}
        for group in groups:
            chip, _, os_name = group.partition(" ")
            per_chip[chip] = ChipFit(
                os=os_name or "?", rows=sum(c.group == group for c in cases),
                fixed_ms=values.get(f"fixed_ms@{group}", values["fixed_ms"]),
                dispatch_ms={d: values[f"dispatch_ms.{d}@{group}"] for d in DEVICES
                             if f"dispatch_ms.{d}@{group}" in free})
        shared = parameters({n: v for n, v in values.items() if "@" not in n})
        everywhere = parameters(shared_pool)
        stored = Fit(
            date=datetime.date.today().isoformat(),
            method=f"least squares on log(estimated / published) over the parameters the rows determine, with a "
                   f"weak pull (weight {PRIOR_WEIGHT}) towards each parameter's prior; fixed and dispatch costs per "
                   "chip and OS; placement by mlbench's rules for the row's compute units",
            data=f"benchmarks/calibration/{args.rows.name}", parameters=everywhere, calibrated=shared, fitted=free,
            priors={name: f"{prior:g}: {why}" for name, (prior, why) in PRIORS.items()}, rows=rows,
            left_out=left_out, per_chip=per_chip,
            median_ratio=summary["median_ratio"], worst_ratio=summary["worst_ratio"],
            loo_median_ratio=summary["loo_median_ratio"], loo_worst_ratio=summary["loo_worst_ratio"],
            uncalibrated_median_ratio=round(statistics.median(uncalibrated), 3),
            uncalibrated_worst_ratio=round(max(uncalibrated), 3))
        write_fit(stored)
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
