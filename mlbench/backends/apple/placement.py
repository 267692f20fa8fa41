"""Core ML placement summaries: estimated from static rules anywhere, or built from a compute plan.

Both paths end in the same `Placement` record (constants kept apart, fractions by count and by
cost, device switches, and a note in plain words), so a Linux estimate and a macOS measurement
line up column for column. The rules live in placement_rules.yaml, each with its source.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.cost.roofline import time_like_cost  # cost model
from mlbench.backends.apple.placement_rules import ProgramContext, Rule, load_rules, lowest_confidence
from mlbench.records import OpPlacement, Placement

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis

ANE, GPU, CPU = "neural_engine", "gpu", "cpu"
FOLLOW = "integer-follows-neighbour"
DEVICES = (ANE, GPU, CPU)
PREFERRED = {"cpu_only": CPU, "cpu_and_gpu": GPU, "cpu_and_ne": ANE, "all": ANE}
ONE_GB = 1_000_000_000
ESTIMATE_CAVEAT = ("Estimated by mlbench's rules: Core ML publishes no list of Neural Engine support, and its "
                   "choice changes with device, OS version and tensor sizes.")


def ane_blocker(layer: LayerInfo, rules: dict[str, Rule], context: ProgramContext) -> Rule | None:
    """The first op rule that keeps this operation off the Neural Engine, or None."""
    return next((rule for rule in rules.values() if rule.kind == "op" and rule.matches(layer, context)), None)


def normalise_op_type(name: str) -> str:
    """`ios17.conv` → `conv`: compute plans may carry an opset prefix."""
    head, dot, tail = name.partition(".")
    return tail if dot and head.lower().startswith(("ios", "macos", "watchos", "tvos", "coreml")) else name


def is_data_op(op_type: str) -> bool:
    return op_type == "const" or op_type.startswith("constexpr_")


def count_switches(devices: list[str | None]) -> int:
    known = [d for d in devices if d is not None]
    return sum(1 for a, b in pairwise(known) if a != b)


def fractions(ops: list[OpPlacement], weight: Any = None) -> dict[str, float]:
    totals: dict[str, float] = {}  # by device, in the order devices are met
    for op in ops:
        if op.device is not None:
            totals[op.device] = totals.get(op.device, 0.0) + (1.0 if weight is None else (weight(op) or 0.0))
    total = sum(totals.values())
    if total <= 0:
        return {}
    return {device: totals[device] / total for device in DEVICES if device in totals} | {
        d: v / total for d, v in totals.items() if d not in DEVICES}


def _apply_islands(ops: list[OpPlacement], rule: Rule) -> None:
    """Runs of at most `max_ops` Neural Engine ops with CPU ops on both sides move to the CPU."""
    i = 0
    while i < len(ops):
        if ops[i].device != ANE:
            i += 1
            continue
        j = i
        while j < len(ops) and ops[j].device == ANE:
            j += 1
        before = ops[i - 1].device if i > 0 else None
        after = ops[j].device if j < len(ops) else None
        if j - i <= (rule.max_ops or 0) and before == CPU and after == CPU:
            for op in ops[i:j]:
                op.device, op.rule, op.reason = CPU, rule.id, rule.reason
        i = j


def _nearest(start: int, edges: list[list[int]], follows: list[bool]) -> int | None:
    """The nearest op along `edges` (fewest steps, then program order) that does not itself follow."""
    seen, frontier = {start}, [start]
    while frontier:
        step = sorted({j for i in frontier for j in edges[i]} - seen)
        found = [j for j in step if not follows[j]]
        if found:
            return found[0]
        seen.update(step)
        frontier = step
    return None


def _follow_neighbours(ops: list[OpPlacement], layers: list[LayerInfo], rule: Rule) -> None:
    """Each op the `neighbour` rule decides takes the device of the nearest op it feeds (through other
    such ops), else of the nearest op feeding it; with neither (an integer path from the inputs to the
    outputs), the CPU."""
    follows = [op.rule == rule.id for op in ops]
    producers = [[j for j in layer.inputs if j < len(layers)] for layer in layers]
    consumers: list[list[int]] = [[] for _ in layers]
    for i, inputs in enumerate(producers):
        for j in inputs:
            consumers[j].append(i)
    for i, op in enumerate(ops):
        if follows[i]:
            k = _nearest(i, consumers, follows)
            k = k if k is not None else _nearest(i, producers, follows)
            op.device = ops[k].device if k is not None and ops[k].device is not None else CPU
            op.reason = None if op.device == ANE else rule.reason


def _off_ane_summary(ops: list[OpPlacement]) -> str:
    groups: Counter[tuple[str, str]] = Counter()
    for op in ops:
        if op.device != ANE and op.reason:
            groups[(op.op_type, op.reason)] += 1
    parts = [f"{op_type} ×{n} ({reason})" for (op_type, reason), n in groups.most_common(6)]
    if len(groups) > 6:
        parts.append(f"and {len(groups) - 6} more kinds")
    return "; ".join(parts)


def estimate_placement(analysis: ProgramAnalysis, compute_units: str) -> Placement:
    """Where Core ML would likely run each compute operation, by mlbench's published rules."""
    rules = load_rules()
    context = ProgramContext.of(analysis)
    layers = analysis.layers
    preferred = PREFERRED[compute_units]
    ops = [OpPlacement(name=layer.name, op_type=layer.op_type, device=None) for layer in layers]
    precision = analysis.precision
    too_big = (analysis.totals.weight_bytes or 0) > ONE_GB
    small = rules["small-program-cpu"].holds_for_program(context)

    if compute_units == "cpu_only":
        for op in ops:
            op.device, op.rule = CPU, "cpu-only"
    else:
        blockers = [ane_blocker(layer, rules, context) for layer in layers]
        # integer paths (masks, indices) follow the ops they feed: only an op that computes opens the Neural Engine
        use_ane = (compute_units in ("cpu_and_ne", "all") and precision != "FLOAT32"
                   and any(b is None and not layer.integer_data for b, layer in zip(blockers, layers)))
        if use_ane and small:
            for op in ops:
                op.device, op.rule, op.reason = CPU, "small-program-cpu", "the program is too small to gain from the Neural Engine"
        elif not use_ane:
            # CPU_AND_GPU, or ALL with nothing for the Neural Engine: the GPU takes everything.
            target = GPU if compute_units in ("cpu_and_gpu", "all") else CPU
            for op, blocker in zip(ops, blockers):
                if target == GPU:
                    op.device, op.rule = GPU, "gpu-assumed"
                elif precision == "FLOAT32":
                    op.device, op.rule = CPU, "float32-program"
                else:  # nothing that computes is eligible: each says by which rule, integer paths follow
                    op.device, op.rule = CPU, blocker.id if blocker is not None else FOLLOW
                if preferred == ANE:
                    op.reason = (rules["float32-program"].reason if precision == "FLOAT32"
                                 else blocker.reason if blocker is not None else rules[FOLLOW].reason)
        else:
            for op, blocker, layer in zip(ops, blockers, layers):
                if too_big:
                    op.device, op.rule, op.reason = CPU, "model-over-1gb", rules["model-over-1gb"].reason
                elif blocker is not None:
                    op.device, op.rule, op.reason = CPU, blocker.id, blocker.reason
                elif layer.integer_data:
                    op.rule = FOLLOW  # placed once the ops it feeds are
                else:
                    op.device = ANE
                    if compute_units == "all":
                        op.rule = "all-prefers-cpu-fallback"
            # islands among the ops that compute (an integer path beside them is no boundary), then the paths
            _apply_islands([op for op, layer in zip(ops, layers) if not layer.integer_data], rules["small-island"])
            _follow_neighbours(ops, layers, rules[FOLLOW])
    # --- cost model: each op's roofline time-like cost on its assigned device (mlbench/backends/apple/cost) ---
    times = [time_like_cost(layer, op.device) or 0.0 for layer, op in zip(layers, ops)]
    total_time = sum(times)
    for op, t in zip(ops, times):
        op.cost = t / total_time if total_time else None
    # --- end cost model ---
    decided = Counter(op.rule for op in ops if op.rule)
    note = None if compute_units == "cpu_only" else _estimate_note(analysis, compute_units, ops, decided)
    placement = summarise(ops, source="estimated", method="mlbench rules (placement_rules.yaml)",
                          preferred=preferred, constants=analysis.const_count + sum(analysis.weight_ops.values()),
                          note=note, cost_basis="roofline" if total_time else None)
    placement.rules = dict(decided)
    # an integer path that stayed with its neighbour on the preferred device moved nothing
    moved = {op.rule for op in ops if op.rule and not (op.rule == FOLLOW and op.device == preferred)}
    placement.confidence = lowest_confidence(moved)  # type: ignore[assignment]
    return placement


def _estimate_note(analysis: ProgramAnalysis, compute_units: str, ops: list[OpPlacement],
                   decided: Counter[str]) -> str:
    precision = analysis.precision
    wants_ane = compute_units in ("cpu_and_ne", "all")
    use_ane = any(op.device == ANE for op in ops) or "small-program-cpu" in decided
    parts: list[str] = []
    if wants_ane and precision == "FLOAT32":
        parts.append("No operation reached the Neural Engine because the program is float32: Core ML runs only "
                     "float16 programs there. Export with `precision: float16` to use it.")
        if compute_units == "all":
            parts.append("Under ALL it runs on the GPU where supported.")
    elif wants_ane:
        off = [op for op in ops if op.device != ANE]
        if precision == "UNKNOWN":
            parts.append("The package does not say its precision, so placement follows operation types only.")
        if not use_ane:
            parts.append("No operation is eligible for the Neural Engine.")
        if off:
            parts.append(f"{len(off)} of {len(ops)} compute operations stay off the Neural Engine: "
                         f"{_off_ane_summary(off)}.")
        else:
            parts.append("Every compute operation is eligible for the Neural Engine.")
        if compute_units == "all" and use_ane:
            parts.append("On a Mac, Core ML may give much of the model to the GPU under ALL instead.")
    else:
        parts.append("GPU support is assumed for every operation; no public list exists.")
    rules = load_rules()
    used = ", ".join(f"{rule} ({rules[rule].confidence})" for rule in decided if rule in rules)
    parts.append(f"Rules that decided: {used}." if used else "")
    parts.append(ESTIMATE_CAVEAT)
    return " ".join(p for p in parts if p)


def summarise(ops: list[OpPlacement], *, source: str, method: str, preferred: str | None, constants: int,
              note: str | None, cost_basis: str | None) -> Placement:
    by_cost = fractions(ops, weight=lambda op: op.cost) if cost_basis else None
    return Placement(
        source=source, method=method, preferred=preferred, compute_ops=len(ops), constants=constants,
        unknown=sum(op.device is None for op in ops),
        by_count=fractions(ops), by_cost=by_cost or None, cost_basis=cost_basis if by_cost else None,
        switches=count_switches([op.device for op in ops]), note=note, ops=ops,
    )
