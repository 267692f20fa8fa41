"""The op signature placement observations are keyed by, gathering them from measured placements, and
using them in an estimate: an op whose signature the Mac was seen placing takes that device, marked
``observed`` instead of the rule's id.

    signature = (op type, output dtype, shape class, the rule that decided it in mlbench's estimate,
                 compute units)

The shape class is the output's rank and order of magnitude of its elements ('4d:1e5'), coarse enough
that the team's other models share it, fine enough to keep size-dependent choices apart.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from mlbench.backends.apple.calibration.profile import CalibrationProfile, Observation

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis
    from mlbench.records import Placement

OBSERVED = "observed"
ELIGIBLE = "eligible"
Key = tuple[str, str, str, str, str]


def shape_class(shape: list[int | None] | None) -> str:
    if shape is None or any(d is None for d in shape):
        return "?"
    n = math.prod(d for d in shape if d is not None)
    return f"{len(shape)}d:1e{int(math.log10(n)) if n > 0 else 0}"


def signature(layer: LayerInfo, rule: str | None, compute_units: str) -> Key:
    return (layer.op_type, layer.output_dtype or "?", shape_class(layer.output_shape), rule or ELIGIBLE,
            compute_units)


def aligned_layers(analysis: ProgramAnalysis, placement: Placement) -> list[LayerInfo | None]:
    """Each placed op's layer: by name, else by position when the two lists line up."""
    by_name = {layer.name: layer for layer in analysis.layers}
    aligned = len(placement.ops) == len(analysis.layers)
    return [by_name.get(op.name) or (analysis.layers[i] if aligned else None) for i, op in enumerate(placement.ops)]


def tally(counts: dict[Key, Counter[str]], analysis: ProgramAnalysis, measured: Placement,
          compute_units: str) -> None:
    """Add what a measured placement did, op by op, under the signature mlbench's rules give each op (and
    what the rules said, counted as `rules:<device>`)."""
    from mlbench.backends.apple.placement import estimate_placement

    estimated = {op.name: op for op in estimate_placement(analysis, compute_units).ops}
    for op, layer in zip(measured.ops, aligned_layers(analysis, measured)):
        guess = estimated.get(layer.name) if layer is not None else None
        if layer is not None and op.device is not None and guess is not None:
            key = signature(layer, guess.rule, compute_units)
            counts[key][op.device] += 1
            counts[key][f"rules:{guess.device}"] += 1


def observations(counts: dict[Key, Counter[str]]) -> list[Observation]:
    out = []
    for key, tallied in sorted(counts.items()):
        devices = Counter({d: n for d, n in tallied.items() if not d.startswith("rules:")})
        rules = Counter({d[6:]: n for d, n in tallied.items() if d.startswith("rules:")})
        device, agreed = devices.most_common(1)[0]
        op_type, dtype, shape, rule, units = key
        out.append(Observation(op_type=op_type, dtype=dtype, shape=shape, rule=rule, compute_units=units,
                               device=device, seen=sum(devices.values()), agreed=agreed,
                               rules_said=rules.most_common(1)[0][0] if rules else None))
    return out


def empty_counts() -> dict[Key, Counter[str]]:
    return defaultdict(Counter)


def apply_observations(placement: Placement, analysis: ProgramAnalysis, compute_units: str,
                       profile: CalibrationProfile, where: str) -> Placement:
    """`placement` (mlbench's estimate) with every op whose signature `profile` observed on the Mac's device."""
    from mlbench.backends.apple.cost.roofline import time_like_cost
    from mlbench.backends.apple.placement import summarise

    seen = profile.observations()
    ops = [op.model_copy() for op in placement.ops]
    changed = 0
    layers = aligned_layers(analysis, placement)
    for op, layer in zip(ops, layers):
        found = seen.get(signature(layer, op.rule, compute_units)) if layer is not None else None
        if found is None:
            continue
        changed += 1
        op.device, op.rule = found.device, OBSERVED
        op.reason = (None if found.device == placement.preferred else
                     f"observed on {profile.chip_name} ({profile.os}): {found.agreed} of {found.seen} such ops ran "
                     f"on the {found.device.replace('_', ' ')}")
    if not changed:
        return placement
    times = [time_like_cost(layer, op.device) or 0.0 if layer is not None else 0.0 for op, layer in zip(ops, layers)]
    total = sum(times)
    for op, t in zip(ops, times):
        op.cost = t / total if total else None
    note = (f"{changed} of {len(ops)} operations placed as observed on {profile.chip_name} ({profile.os}; "
            f"calibration profile {where}), the others by rules.")
    result = summarise(ops, source="estimated", method=f"{placement.method} + observations ({where})",
                       preferred=placement.preferred, constants=placement.constants,
                       note=f"{note} {placement.note}" if placement.note else note,
                       cost_basis="roofline" if total else None)
    result.rules = dict(Counter(op.rule for op in ops if op.rule))
    result.confidence = placement.confidence
    return result
