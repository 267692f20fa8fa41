"""What a figure's own record says about judging it: whether either run graded it unreliable (then a rule on
it is inconclusive, never a pass or a regression), and the spread both runs measured it with (a noise floor
at least their sum wide). Records without either, written before or built by hand, are judged as they always were.
"""

from __future__ import annotations

from mlbench.compare.paired import PairedChange, settled
from mlbench.records import RunRecord
from mlbench.stability import inconclusive


def unreliable_sides(metric: str, base: RunRecord | None, head: RunRecord | None,
                     paired: PairedChange | None = None, threshold_pct: float | None = None) -> list[str]:
    """Why `metric` cannot be judged, one phrase per side graded unreliable; empty: judge it.

    Over interleaved rounds (`paired`) the per-round ratios' grade counts instead, since each side's drift hit
    the other alike; and for a relative rule (`threshold_pct`) only while more rounds could still change the
    verdict (`paired.settled`): ratios of 10 to 40 are far apart, yet every one says much slower, and the
    signed-rank interval wholly past the threshold says so whatever their spread."""
    if paired is not None:
        if paired.stability is None or not inconclusive(paired.stability):
            return []
        if threshold_pct is not None and settled(paired, threshold_pct):
            return []
        return [f"the per-round ratios are {paired.stability.note()}"]
    sides = []
    for side, record in (("base", base), ("head", head)):
        figure = record.metrics.get(metric) if record is not None else None
        if figure is not None and figure.stability is not None and inconclusive(figure.stability):
            sides.append(f"{side}'s figure is {figure.stability.note()}")
    return sides


def measured_spread(metric: str, base: RunRecord | None, head: RunRecord | None) -> float:
    """The spreads both sides recorded for `metric` (`Metric.spread`), summed; 0 when neither did. Summed, not
    the larger: where both runs' measurements cover the same typical value, their medians differ by at most the
    sum of their ranges (two identical runs of a model whose peak moves by whole buffers, 6.9 and 8.3 MB
    spreads, had medians 9.3 MB apart)."""
    spreads = [figure.spread for record in (base, head) if record is not None
               and (figure := record.metrics.get(metric)) is not None and figure.spread is not None]
    return float(sum(spreads))
