"""Fit the Core ML latency model's parameters to published latencies, and say how far off it is.

    PYTHONPATH=. python benchmarks/calibrate_latency.py [--write] [--rows CSV]

Each prediction-latency row of ../shared/calibration/ (coreml_latency.csv and published_apple.csv, the only
figures the model may be fitted to; generation and load-time rows are left out and counted, and a float16
baseline printed on three pages is one row, paired with the variants of each page) is rebuilt with random
weights (MobileCLIP's image encoders as timm's image towers; a W8A8 row's batch norms recalibrated on seeded
inputs), exported through mlbench's Core ML exporter at the row's precision and analysed (calibration_models.py;
analyses cached beside the mlbench cache), placed for the row's compute units by mlbench's rules, and
estimated on the row's chip profile. Stable Diffusion 2.1's UNet stands for its diffusion-speed rows
(calibration_diffusion.py: a layer-reduced UNet scaled by FLOPs, said in its row): the later table's rows on
A14, A15, A16, M1 and M2 (Neural Engine) and the superseded June 2023 table's rows on the chips the later one
does not measure (M1 Ultra, M2 Ultra: the GPU).

The fit is mlbench's own (mlbench/backends/apple/calibration/fitting.py, the one `mlbench calibrate` uses on
measured runs): efficiency and bandwidth factor per device class and the switch overhead are shared by every chip; the fixed cost per prediction, the dispatch per op and the
Neural Engine's efficiency are per chip and OS (`fit.calibrated` + `fit.per_chip`). A chip without rows takes
the fixed and per-op costs of the nearest calibrated Neural Engine generation, as they are within one
generation, else scaled by the generations' published peaks (calibration/profile.py: transferred,
cost_scale), and its band is leave-one-chip-out computed the same way. Compressed variants are exported with
the row's compression (palettization in coremltools' uniform mode: the stored format is what latency depends
on) and their band is the compressed rows' leave-one-out. A parameter is fitted only where the rows determine
it (it moves some row, adds a direction the others do not, and one row is left for leave-one-out); the others
keep their sourced priors, with a weak pull towards them all the same.

Prints every row, the median and worst ratio, leave-one-out (each row predicted by a fit without it),
leave-one-chip-out (each chip's rows predicted by a fit that saw none of them: the band of a chip without rows,
"uncalibrated chip"), the compressed rows' band, and pairwise order agreement over pairs of rows of one model
on one chip printed on one page. `--write` stores the fit in chips.yaml's `fit` section.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from calibration_diffusion import analysis_for_unet, load_diffusion
from calibration_models import ROWS_PATH, Row, analysis_for, load_all, load_rows

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
from mlbench.backends.apple.calibration.profile import cost_scale, transfer_donor
from mlbench.backends.apple.chips import CHIPS_PATH, DEVICES, ChipFit, Fit, FitRow, SplitBand, builtin_chips
from mlbench.backends.apple.latency import OVERHEAD_SHARE, estimate_latency, overhead_share
from mlbench.backends.apple.placement import estimate_placement

PRIOR_WEIGHT = 0.3  # residual weight of log(parameter / prior): weak next to a row's log ratio

__all__ = ["PRIORS", "Row", "case_for", "decidable", "fit", "main", "parameters"]


def case_for(row: Row, analysis, placement) -> Case:
    return Case(label=row.label, group=f"{row.chip} {row.os}".strip(), chip=builtin_chips()[row.chip],
                analysis=analysis, placement=placement, measured_ms=row.latency_ms, model=row.model,
                compute_units=row.compute_units, precision=row.variant or row.precision)


def decidable(cases: list[Case]) -> list[str]:
    """The parameters the rows determine (per chip and OS for the fixed and dispatch costs)."""
    names = candidates(cases, grouped=True)
    return determinable(cases, with_groups(prior_values(), names), names)[0]


def fit(cases: list[Case], free: list[str]) -> dict[str, float]:
    return fit_values(cases, free, with_groups(prior_values(), candidates(cases, grouped=True)), PRIOR_WEIGHT)


def pooled(cases: list[Case]) -> dict[str, float]:
    """One set of parameters for every chip (round 2's structure): what a chip without rows uses."""
    return calibrate_cases(cases, prior_values(), prior_weight=PRIOR_WEIGHT, leave_one_out=False).values


def transfer_values(values: dict[str, float], free: list[str], group: str, groups: dict[str, str]) -> tuple[
        dict[str, float], str]:
    """`values` with what `group` (a chip without rows in this fit) takes from the calibrated chips, as an estimate
    on a chip without rows does (profile.transferred): the fixed cost and the Neural Engine's per-op cost, each from
    the nearest generation whose rows decided that cost (profile.cost_scale: as it is within a generation, else
    scaled by the generations' published peaks), and the Neural Engine efficiency of the nearest generation whose
    rows decided it. `groups`: chip -> its group in the fit."""
    chips = builtin_chips()
    chip = group.split()[0]
    out, how = dict(values), []
    for name, words in (("fixed_ms", "fixed cost"), ("dispatch_ms.neural_engine", "per-op cost"),
                        ("efficiency.neural_engine", "efficiency")):
        donor = transfer_donor(chip, sorted(c for c, g in groups.items() if f"{name}@{g}" in free), chips)
        if donor is None:
            continue
        scale = 1.0 if name.startswith("efficiency") else cost_scale(donor, chip, chips)
        out[f"{name}@{group}"] = values[f"{name}@{groups[donor]}"] * scale
        how.append(f"{words} from {donor}")
    return out, ", ".join(how) or "the shared parameters"


def leave_one_chip_out(cases: list[Case]) -> tuple[list[float], list[str], list[float]]:
    """Each chip's rows predicted by a fit of the other chips' rows, what it takes carried from the nearest
    calibrated Neural Engine generation: what a chip without rows gets. Returns the ratios, per chip where its
    parameters came from, and per row the share of its estimate that was fixed and per-op cost; rows and shares
    come chip by chip (sorted groups), each chip's in the cases' order."""
    ratios, how, shares = [], [], []
    for group in sorted({c.group for c in cases}):
        rest = [c for c in cases if c.group != group]
        result = calibrate_cases(rest, prior_values(), prior_weight=PRIOR_WEIGHT, grouped=True, leave_one_out=False)
        groups = {c.group.split()[0]: c.group for c in rest}
        values, words = transfer_values(result.values, result.free, group, groups)
        mine = [estimated_ms(c, values) / c.measured_ms for c in cases if c.group == group]
        ratios += mine
        shares += [overhead_of(c, values) for c in cases if c.group == group]
        how.append(f"{group} ({len(mine)} rows) with {words}: median "
                   f"×{statistics.median(folded(r) for r in mine):.2f}, worst ×{max(folded(r) for r in mine):.2f}")
    return ratios, how, shares


def overhead_of(case: Case, values: dict[str, float]) -> float:
    """The share of the case's estimate under `values` that is fixed cost, per-op cost and device switches, as an
    estimate reports it (latency.overhead_share)."""
    return overhead_share(estimate_latency(case.analysis, case.placement, case.chip, parameters(values, case.group)))


def split_bands(cases: list[Case], ratios: list[float], shares: list[float]) -> dict[str, SplitBand | None]:
    """The leave-one-chip-out band of the rows whose estimate was mostly fixed and per-op cost, and of the others."""
    order = [c for group in sorted({c.group for c in cases}) for c in cases if c.group == group]
    out: dict[str, SplitBand | None] = {}
    for name, side in (("uncalibrated_overhead_bound", True), ("uncalibrated_compute_bound", False)):
        picked = [(c, folded(r)) for c, r, s in zip(order, ratios, shares) if (s >= OVERHEAD_SHARE) == side]
        out[name] = SplitBand(rows=len(picked), models=len({c.model for c, _ in picked}),
                              chips=len({c.group for c, _ in picked}),
                              median_ratio=round(statistics.median(r for _, r in picked), 3),
                              worst_ratio=round(max(r for _, r in picked), 3)) if picked else None
    return out


def calibration_pairs(cases: list[Case], sources: list[frozenset[str]]):
    """Index pairs of rows of one model on one chip printed on one page (a float16 baseline shared by three pages
    pairs with the variants of each): what order agreement is judged on."""
    for i in range(len(cases)):
        for j in range(i + 1, len(cases)):
            if (cases[i].model, cases[i].group) == (cases[j].model, cases[j].group) and sources[i] & sources[j]:
                yield i, j


def order_agreement(cases: list[Case], sources: list[frozenset[str]], estimates: list[float],
                    threshold: float = 1.1) -> tuple[int, int, int, int]:
    """Pairs of rows of one model on one chip from one source: (pairs whose published figures differ by
    `threshold` or more, of them ordered alike by the estimate, all pairs, all ordered alike or tied alike)."""
    decisive = agree = total = agree_all = 0
    for i, j in calibration_pairs(cases, sources):
        a, b = cases[i], cases[j]
        total += 1
        pub = a.measured_ms / b.measured_ms
        est = estimates[i] / estimates[j]
        same = (pub > 1) == (est > 1) if pub != 1 else abs(math.log(est)) < math.log(threshold)
        agree_all += same
        if max(pub, 1 / pub) >= threshold:
            decisive += 1
            agree += (pub > 1) == (est > 1)
    return decisive, agree, total, agree_all


def order_evidence(cases: list[Case], sources: list[frozenset[str]], estimates: list[float],
                   threshold: float = 1.1) -> dict[str, list[int]]:
    """Per pair of variant kinds ('float16 vs palettized'): [ordered alike, pairs] over the pairs of rows of one
    model on one chip from one source whose published figures differ by `threshold` or more. Reports state an
    estimated order with it (mlbench/report/estimate_order.py)."""
    from mlbench.backends.apple.compression_rules import variant_kind
    from mlbench.report.estimate_order import pair_kind

    kinds = [variant_kind(c.analysis) for c in cases]
    out: dict[str, list[int]] = {}
    for i, j in calibration_pairs(cases, sources):
        a, b = cases[i], cases[j]
        pub = a.measured_ms / b.measured_ms
        if max(pub, 1 / pub) < threshold:
            continue
        tally = out.setdefault(pair_kind(kinds[i], kinds[j]), [0, 0])
        tally[0] += (pub > 1) == (estimates[i] > estimates[j])
        tally[1] += 1
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, default=None,
                    help=f"one CSV in {ROWS_PATH.name}'s format (default: both files of the calibration folder)")
    ap.add_argument("--write", action="store_true", help="store the fit in chips.yaml")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("timm") is None:  # the rows' models are rebuilt with timm and keyed by its version
        print('calibrate_latency: needs timm and diffusers: pip install -e ".[calibration]"', file=sys.stderr)
        return 2

    cases, left_out, sources = [], [], []
    rows_in, skipped = (load_rows(args.rows), []) if args.rows else load_all()
    left_out += skipped
    for row in rows_in:
        try:
            analysis = analysis_for(row)
        except Exception as exc:  # noqa: BLE001 - a model that does not export is recorded, the rest fit
            left_out.append(f"{row.label}: export failed ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        cases.append(case_for(row, analysis, estimate_placement(analysis, row.compute_units)))
        sources.append(row.pages)
    if not args.rows:
        diffusion, skipped = load_diffusion()
        left_out += skipped
        if diffusion:
            try:
                unet = analysis_for_unet()
            except Exception as exc:  # noqa: BLE001 - the diffusion rows are recorded as left out, the rest fit
                left_out.append(f"{len(diffusion)} diffusion rows: UNet export failed ({type(exc).__name__})")
                diffusion = []
        for item in diffusion:
            case = case_for(item.row, unet, estimate_placement(unet, item.row.compute_units))
            cases.append(dataclasses.replace(case, scale=item.scale, label=f"{case.label} (×{item.scale:.2f} layers)"))
            sources.append(item.row.pages)
    if not cases:
        print("calibrate_latency: no row to fit: " + "; ".join(left_out or ["the calibration files hold no rows"]),
              file=sys.stderr)
        return 1
    result = calibrate_cases(cases, prior_values(), prior_weight=PRIOR_WEIGHT, grouped=True)
    values, free = result.values, result.free
    shared_pool = pooled(cases)
    loco, loco_how, loco_shares = leave_one_chip_out(cases)
    uncalibrated = [folded(r) for r in loco]
    split = split_bands(cases, loco, loco_shares)

    rows = []
    print(f"{'row':<44} {'published':>9} {'estimated':>9} {'ratio':>6} {'LOO':>6}  placement (ANE/GPU/CPU ops)")
    for case, ratio, loo_ratio in zip(cases, result.ratios, result.loo):
        est = ratio * case.measured_ms
        shares = "/".join(str(sum(op.device == d for op in case.placement.ops)) for d in DEVICES)
        loo_text = f"{loo_ratio:>6.2f}" if loo_ratio is not None else f"{'-':>6}"
        print(f"{case.label:<44} {case.measured_ms:>9.2f} {est:>9.2f} {ratio:>6.2f} {loo_text}  {shares}")
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
    for line in loco_how:
        print(f"  {line}")
    for name, words in (("uncalibrated_overhead_bound", f"estimates {OVERHEAD_SHARE:.0%} or more fixed and per-op cost"),
                        ("uncalibrated_compute_bound", f"estimates under {OVERHEAD_SHARE:.0%} so")):
        if (band := split[name]) is not None:
            print(f"  {words} ({name}): median ×{band.median_ratio:.2f}, worst ×{band.worst_ratio:.2f} over "
                  f"{band.rows} rows, {band.models} model(s) on {band.chips} chip(s)")
    compressed = [folded(r) for c, r in zip(cases, result.loo) if r is not None and c.precision not in
                  ("float16", "float32")]
    if compressed:
        print(f"compressed rows, leave-one-out: median ×{statistics.median(compressed):.2f}, "
              f"worst ×{max(compressed):.2f} over {len(compressed)} rows")
    estimates = [r * c.measured_ms for c, r in zip(cases, result.ratios)]
    decisive, agree, total, agree_all = order_agreement(cases, sources, estimates)
    loo_estimates = [(r if r is not None else q) * c.measured_ms for c, r, q in zip(cases, result.loo, result.ratios)]
    loo_decisive, loo_agree, _, _ = order_agreement(cases, sources, loo_estimates)
    print(f"pairwise order (same model, chip and source): {agree} of {decisive} pairs whose published figures "
          f"differ by 10% or more ordered alike ({100 * agree / max(decisive, 1):.0f}%; leave-one-out "
          f"{loo_agree} of {loo_decisive}); {agree_all} of {total} pairs of any difference ordered or tied alike")
    evidence = order_evidence(cases, sources, loo_estimates)
    print("order evidence (leave-one-out; pairs differing by 10% or more): " + ", ".join(
        f"{k} {a}/{n}" for k, (a, n) in evidence.items()))
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
                fixed_ms=values[f"fixed_ms@{group}"] if f"fixed_ms@{group}" in free else None,
                dispatch_ms={d: values[f"dispatch_ms.{d}@{group}"] for d in DEVICES
                             if f"dispatch_ms.{d}@{group}" in free},
                efficiency={d: values[f"efficiency.{d}@{group}"] for d in DEVICES
                            if f"efficiency.{d}@{group}" in free})
        shared = parameters({n: v for n, v in values.items() if "@" not in n})
        everywhere = parameters(shared_pool)
        stored = Fit(
            date=datetime.date.today().isoformat(),
            method=f"least squares on log(estimated / published) over the parameters the rows determine, with a "
                   f"weak pull (weight {PRIOR_WEIGHT}) towards each parameter's prior; fixed and dispatch costs per "
                   "chip and OS; placement by mlbench's rules for the row's compute units",
            data=str(args.rows) if args.rows else "../shared/calibration/ (coreml_latency.csv, published_apple.csv)",
            parameters=everywhere, calibrated=shared, fitted=free,
            priors={name: f"{prior:g}: {why}" for name, (prior, why) in PRIORS.items()}, rows=rows,
            left_out=left_out, per_chip=per_chip,
            median_ratio=summary["median_ratio"], worst_ratio=summary["worst_ratio"],
            loo_median_ratio=summary["loo_median_ratio"], loo_worst_ratio=summary["loo_worst_ratio"],
            uncalibrated_median_ratio=round(statistics.median(uncalibrated), 3),
            uncalibrated_worst_ratio=round(max(uncalibrated), 3),
            uncalibrated_chips=sorted({c.group for c in cases}),
            uncalibrated_overhead_bound=split["uncalibrated_overhead_bound"],
            uncalibrated_compute_bound=split["uncalibrated_compute_bound"],
            compressed_median_ratio=round(statistics.median(compressed), 3) if compressed else None,
            compressed_worst_ratio=round(max(compressed), 3) if compressed else None,
            order_evidence=evidence)
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
