"""Fitting the latency model's parameters to measured (or published) latencies, with the checks that
keep it honest: a parameter is fitted only when the rows determine it, else it keeps its prior and the
reason is stated; every row is also predicted by a fit without it (leave-one-out).

Parameters are named as in ``Parameters``: ``efficiency.<device>``, ``bandwidth_factor.<device>``,
``dispatch_ms.<device>``, ``switch_overhead_ms``, ``fixed_ms``. A name followed by ``@<group>`` (a chip
and OS) holds that group's own value: the fixed cost per prediction and the dispatch per op are per
chip and OS, the efficiencies and bandwidth factors shared (``GROUPED``).

The fit: least squares on log(estimated / measured), parameters in log space within ``BOUNDS``, with a
pull of weight ``prior_weight`` towards each parameter's prior.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.chips import DEVICES, ChipProfile, Parameters
from mlbench.backends.apple.latency import LatencyTerms, latency_terms

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import ProgramAnalysis
    from mlbench.records import Placement

GROUPED = ("fixed_ms", "dispatch_ms", "efficiency.neural_engine")  # per chip and OS (a name or its family)
BOUNDS = {"efficiency": (0.02, 5.0), "bandwidth_factor": (0.2, 20.0), "dispatch_ms": (1e-5, 0.2),
          "switch_overhead_ms": (1e-4, 1.0), "fixed_ms": (1e-3, 3.0)}
SENSITIVITY = math.log(1.02) / math.log(2)  # d log(latency) / d log(parameter) under which it is not determined:
# doubling it moves no row by 2% (timings of a real Mac scatter by about that much)
RANK_TOLERANCE = 1e-3  # relative singular value under which a parameter adds nothing the others do not


@dataclass
class Case:
    """One row: a program, where its ops ran, the chip, the latency it took, and the chip/OS group."""

    label: str
    group: str
    chip: ChipProfile
    analysis: ProgramAnalysis
    placement: Placement
    measured_ms: float
    model: str = ""
    compute_units: str = ""
    precision: str = ""
    scale: float = 1.0  # the estimate's multiplier: a layer-reduced model standing for its full size (its FLOPs ratio)
    terms: LatencyTerms | None = field(default=None, repr=False, compare=False)  # computed once, on first use


def parameters(values: dict[str, float], group: str | None = None) -> Parameters:
    """The Parameters of `group` (its own values where `values` has them, else the shared ones)."""

    def get(name: str) -> float:
        return values.get(f"{name}@{group}", values[name]) if group is not None else values[name]

    return Parameters(efficiency={d: get(f"efficiency.{d}") for d in DEVICES},
                      bandwidth_factor={d: get(f"bandwidth_factor.{d}") for d in DEVICES},
                      dispatch_ms={d: get(f"dispatch_ms.{d}") for d in DEVICES},
                      switch_overhead_ms=get("switch_overhead_ms"), fixed_ms=get("fixed_ms"))


def estimated_ms(case: Case, values: dict[str, float]) -> float:
    if case.terms is None:  # a fit evaluates every row hundreds of times: the rules and lookups run once
        case.terms = latency_terms(case.analysis, case.placement, case.chip)
    return case.scale * case.terms.total_ms(parameters(values, case.group))


def base_name(name: str) -> str:
    return name.partition("@")[0]


def candidates(cases: list[Case], grouped: bool) -> list[str]:
    """Parameters in the order they are tried: fixed cost, then per device in order of use, then switches."""
    used: dict[str, int] = {}
    for case in cases:
        for op in case.placement.ops:
            if op.device in DEVICES:
                used[op.device] = used.get(op.device, 0) + 1
    devices = [*sorted(used, key=lambda d: -used[d]), *(d for d in DEVICES if d not in used)]
    groups = sorted({c.group for c in cases})

    def named(name: str) -> list[str]:
        own = base_name(name) in GROUPED or base_name(name).split(".")[0] in GROUPED
        return [f"{name}@{g}" for g in groups] if grouped and own else [name]

    names = named("fixed_ms")
    for d in devices:
        names += [*named(f"efficiency.{d}"), *named(f"bandwidth_factor.{d}"), *named(f"dispatch_ms.{d}")]
    return [*names, *named("switch_overhead_ms")]


def _jacobian(cases: list[Case], values: dict[str, float], names: list[str]) -> list[list[float]]:
    """d log(estimate) / d log(parameter), per row and parameter (central differences)."""
    step = 1e-4
    columns = []
    for name in names:
        up = dict(values, **{name: values[name] * math.exp(step)})
        down = dict(values, **{name: values[name] * math.exp(-step)})
        columns.append([(math.log(estimated_ms(c, up)) - math.log(estimated_ms(c, down))) / (2 * step)
                        for c in cases])
    return [list(row) for row in zip(*columns)] if columns else [[] for _ in cases]


def determinable(cases: list[Case], values: dict[str, float], names: list[str],
                 max_free: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The parameters the rows determine, in `names`' order, and why each other one keeps its prior."""
    import numpy as np

    limit = len(cases) - 1 if max_free is None else max_free
    jac = np.array(_jacobian(cases, values, names)) if cases else np.zeros((0, len(names)))
    free: list[int] = []
    refused: dict[str, str] = {}
    runs = f"{len(cases)} measured run{'s' if len(cases) != 1 else ''}"
    for j, name in enumerate(names):
        column = jac[:, j] if len(cases) else np.zeros(0)
        device = base_name(name).split(".")[1] if "." in base_name(name) else None
        if not len(column) or float(np.max(np.abs(column))) < SENSITIVITY:
            refused[name] = (f"no measured op ran on the {device.replace('_', ' ')}" if device and not _uses(cases, name)
                             else "no device switch in the runs" if base_name(name) == "switch_overhead_ms"
                             and not _switches(cases, name)
                             else "doubling it changes no run's latency by 2%")
            continue
        if len(free) >= limit:
            refused[name] = (f"{runs} determine at most {limit} parameter{'s' if limit != 1 else ''} "
                             "(one run is kept apart for leave-one-out)")
            continue
        trial = jac[:, [*free, j]]
        scaled = trial / np.linalg.norm(trial, axis=0)
        singular = np.linalg.svd(scaled, compute_uv=False)
        if singular[-1] < RANK_TOLERANCE * singular[0]:
            refused[name] = "the runs cannot tell it apart from the parameters fitted before it"
            continue
        free.append(j)
    return [names[j] for j in free], refused


def _group_cases(cases: list[Case], name: str) -> list[Case]:
    group = name.partition("@")[2]
    return [c for c in cases if not group or c.group == group]


def _uses(cases: list[Case], name: str) -> bool:
    device = base_name(name).split(".")[1]
    return any(op.device == device for c in _group_cases(cases, name) for op in c.placement.ops)


def _switches(cases: list[Case], name: str) -> bool:
    return any(c.placement.switches for c in _group_cases(cases, name))


def fit(cases: list[Case], free: list[str], priors: dict[str, float], prior_weight: float) -> dict[str, float]:
    """Least squares on log ratios over `free`, the others at `priors` (which name every parameter used)."""
    from scipy.optimize import least_squares

    values = dict(priors)
    if not free or not cases:
        return values
    prior_log = [math.log(priors.get(n, priors[base_name(n)])) for n in free]

    def residuals(x: Any) -> list[float]:
        trial = dict(values, **{name: math.exp(v) for name, v in zip(free, x)})
        out = [math.log(estimated_ms(c, trial) / c.measured_ms) for c in cases]
        return out + [prior_weight * (v - p) for v, p in zip(x, prior_log)]

    lower = [math.log(BOUNDS[base_name(n).split(".")[0]][0]) for n in free]
    upper = [math.log(BOUNDS[base_name(n).split(".")[0]][1]) for n in free]
    start = [min(max(p, lo + 1e-9), hi - 1e-9) for p, lo, hi in zip(prior_log, lower, upper)]
    result = least_squares(residuals, start, bounds=(lower, upper), x_scale=1.0, xtol=1e-12, ftol=1e-12)
    return dict(values, **{name: math.exp(v) for name, v in zip(free, result.x)})


def with_groups(priors: dict[str, float], free: list[str]) -> dict[str, float]:
    """`priors` plus a prior for each grouped name in `free` (its shared parameter's)."""
    return {**priors, **{n: priors[base_name(n)] for n in free if "@" in n}}


def folded(ratio: float) -> float:
    return max(ratio, 1 / ratio)


@dataclass
class FitResult:
    values: dict[str, float]
    free: list[str]
    refused: dict[str, str]
    ratios: list[float]  # estimated / measured, all rows in the fit
    loo: list[float | None]  # the same, each row by a fit without it

    def summary(self) -> dict[str, float | None]:
        fits = [folded(r) for r in self.ratios]
        loo = [folded(r) for r in self.loo if r is not None]
        return {"median_ratio": round(statistics.median(fits), 3) if fits else None,
                "worst_ratio": round(max(fits), 3) if fits else None,
                "loo_median_ratio": round(statistics.median(loo), 3) if loo else None,
                "loo_worst_ratio": round(max(loo), 3) if loo else None}


def calibrate_cases(cases: list[Case], priors: dict[str, float], *, prior_weight: float, grouped: bool = False,
                    max_free: int | None = None, leave_one_out: bool = True) -> FitResult:
    """Choose the determinable parameters (at the priors, then again at the fit), fit, and leave each row out."""
    names = candidates(cases, grouped)
    values = with_groups(priors, names)
    free, refused = determinable(cases, values, names, max_free)
    values = fit(cases, free, values, prior_weight)
    again, refused_again = determinable(cases, values, names, max_free)  # the regime may change at the fit
    if again != free:
        free, refused = again, refused_again
        values = fit(cases, free, with_groups(priors, names), prior_weight)
    values = {n: float(f"{v:.4g}") for n, v in values.items()}  # as stored
    ratios = [estimated_ms(c, values) / c.measured_ms for c in cases]
    loo: list[float | None] = []
    for i, case in enumerate(cases if leave_one_out else []):
        rest = cases[:i] + cases[i + 1:]
        # a parameter only this row decided (its group's own) goes back to the prior without it
        kept = [n for n in free if "@" not in n or any(c.group == n.partition("@")[2] for c in rest)]
        without = fit(rest, kept, with_groups(priors, names), prior_weight) if rest else None
        loo.append(estimated_ms(case, without) / case.measured_ms if without is not None else None)
    return FitResult(values=values, free=free, refused=refused, ratios=ratios, loo=loo)
