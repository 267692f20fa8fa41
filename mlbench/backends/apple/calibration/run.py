"""`mlbench calibrate`'s Python API: measured Core ML runs in, one calibration profile per chip and OS out.

Per chip and OS: the latency model's parameters fitted to the measured runs (each run's program as
analysed, placed as its compute plan said, on the chip's profile), starting from and pulled weakly towards
the shipped estimate's parameters for that chip; a parameter the runs cannot determine keeps that prior
and the profile says why. Beside them, the placement observations: per op signature, where the Mac ran
such ops. Every run is also predicted by a fit without it (leave-one-out): that is the profile's band.
"""

from __future__ import annotations

import datetime
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from mlbench.backends.apple.calibration.fitting import calibrate_cases, folded, parameters
from mlbench.backends.apple.calibration.measured import Group, gather
from mlbench.backends.apple.calibration.priors import flat
from mlbench.backends.apple.calibration.profile import CalibrationProfile, ProfileRow, chip_parameters
from mlbench.backends.apple.calibration.signature import observations
from mlbench.errors import UserError

PRIOR_WEIGHT = 1e-3  # measured runs of the team's own models: the runs lead, the prior only breaks ties
METHOD = (f"least squares on log(estimated / measured) with a pull (weight {PRIOR_WEIGHT}) towards the shipped "
          "estimate's parameters for this chip; each run placed as its compute plan said")
NO_RUNS = ("no measured Core ML runs in {what}: calibrate reads Core ML records measured on a Mac (macOS 14.4+: "
           "a compute plan and Core ML's own latency)")


@dataclass
class Calibrated:
    profile: CalibrationProfile
    path: Path
    lines: list[str]


def profile_name(group: Group) -> str:
    return f"{group.chip}-{re.sub(r'[^a-z0-9.]+', '-', group.os.lower()).strip('-')}.yaml"


def calibrate_group(group: Group, data: list[str]) -> CalibrationProfile:
    from mlbench.backends.apple.chips import calibration

    fit = calibration()
    if fit is None:
        raise UserError("the shipped latency model is not calibrated: run benchmarks/calibrate_latency.py --write")
    prior_params, _band = chip_parameters(fit, group.chip)
    priors = flat(prior_params)
    result = calibrate_cases(group.cases, priors, prior_weight=PRIOR_WEIGHT)
    rows = [ProfileRow(model=c.model, variant=c.label, compute_units=c.compute_units, precision=c.precision,
                       measured_ms=round(c.measured_ms, 4), estimated_ms=round(r * c.measured_ms, 4), ratio=round(r, 4),
                       loo_ratio=None if loo is None else round(loo, 4))
            for c, r, loo in zip(group.cases, result.ratios, result.loo)]
    return CalibrationProfile(
        chip=group.chip, chip_name=group.chip_name, os=group.os, created=datetime.date.today().isoformat(),
        method=METHOD, data=data, runs=len(group.cases), parameters=parameters(result.values), fitted=result.free,
        kept_prior={n: f"kept the prior {priors[n]:.4g}: {why}" for n, why in result.refused.items()},
        rows=rows, placements=observations(group.counts), **result.summary())


def describe(profile: CalibrationProfile, path: Path) -> list[str]:
    """The fit's residuals and leave-one-out figures, and what it kept, as printed lines."""
    lines = [f"{profile.chip} ({profile.chip_name}, {profile.os}): {profile.runs} measured runs -> {path}"]
    if profile.rows:
        lines.append(f"  {'run':<44} {'measured':>9} {'estimated':>9} {'ratio':>6} {'LOO':>6}")
        for row in profile.rows:
            loo_text = f"{row.loo_ratio:>6.2f}" if row.loo_ratio is not None else f"{'-':>6}"
            lines.append(f"  {row.variant[:44]:<44} {row.measured_ms:>9.3f} {row.estimated_ms:>9.3f} "
                         f"{row.ratio:>6.2f} {loo_text}")
    if profile.median_ratio is not None:
        lines.append(f"  fit: median ×{profile.median_ratio:.2f}, worst ×{profile.worst_ratio:.2f} "
                     f"over {profile.runs} runs")
    loo = [folded(r.loo_ratio) for r in profile.rows if r.loo_ratio is not None]
    if loo:
        lines.append(f"  leave-one-out: median ×{statistics.median(loo):.2f}, worst ×{max(loo):.2f}; "
                     f"{sum(r <= 1.5 for r in loo)} of {len(loo)} runs within 1.5×")
    values = {f"{k}.{d}": v for k in ("efficiency", "bandwidth_factor", "dispatch_ms")
              for d, v in getattr(profile.parameters, k).items()}
    values |= {"switch_overhead_ms": profile.parameters.switch_overhead_ms, "fixed_ms": profile.parameters.fixed_ms}
    if profile.fitted:
        lines.append("  fitted: " + ", ".join(f"{n} = {values[n]:.4g}" for n in profile.fitted))
    lines += [f"  {name}: {why}" for name, why in profile.kept_prior.items()]
    differ = [o for o in profile.placements if o.rules_said is not None and o.rules_said != o.device]
    lines.append(f"  placement: {len(profile.placements)} op signatures observed; {len(differ)} where the Mac "
                 "differs from mlbench's rules" + (":" if differ else ""))
    lines += [f"    {o.op_type} {o.dtype} {o.shape} [{o.rule}] under {o.compute_units}: rules said {o.rules_said}, "
              f"the Mac ran {o.agreed} of {o.seen} on the {o.device}" for o in differ[:12]]
    return lines


def calibrate(paths: list[Path], out: Path) -> tuple[list[Calibrated], list[str]]:
    """Write a profile per chip and OS found in `paths` (reports or history databases) into folder `out`.

    Returns what was written (with the lines to print) and a line per report or record left out."""
    import yaml

    groups, left_out = gather(paths)
    if not groups:
        raise UserError(NO_RUNS.format(what=", ".join(str(p) for p in paths)))
    if out.exists() and not out.is_dir():
        raise UserError("--out must be a folder (profiles are written into it, one per chip and OS)", file=out)
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for group in groups.values():
        profile = calibrate_group(group, group.sources)
        path = out / profile_name(group)
        text = yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, width=110, allow_unicode=True)
        path.write_text("# mlbench calibration profile (`mlbench calibrate`): review it like a pipeline\n" + text,
                        encoding="utf-8")
        done.append(Calibrated(profile, path, describe(profile, path)))
    return done, left_out
