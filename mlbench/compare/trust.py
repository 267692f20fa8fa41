"""What a figure's own record says about judging it: whether either run graded it unreliable, or the two runs
timed it with different thread counts because one run's pool stalled (then a rule on it is inconclusive, never a
pass or a regression), and the spread both runs measured it with (a noise floor at least their sum wide). Records
without these, written before or built by hand, are judged as they always were.
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
    mismatch = thread_mismatch(metric, base, head)
    return sides + ([mismatch] if mismatch else [])


def timed_threads(record: RunRecord) -> tuple[int, int] | None:
    """(threads the figures were timed with, threads configured) where the record's stall check says
    (`details.thread_check`: one thread where the configured pool stalled); None where it ran none."""
    check = record.details.get("thread_check")
    if not isinstance(check, dict) or not isinstance(check.get("configured"), int):
        return None
    return (1 if check.get("stalled") else check["configured"]), check["configured"]


def thread_mismatch(metric: str, base: RunRecord | None, head: RunRecord | None) -> str | None:
    """Why a timed figure cannot be judged: the two runs timed it with different thread counts because a pool
    stalled on one side (a resnet18 timed with 1 thread on a busy runner read 27.8 ms against 16.4 ms with 2
    on a quiet one: a +69% "regression" of the machine, not of the model). None: comparable, or not timed."""
    if base is None or head is None:
        return None
    figures = [record.metrics.get(metric) for record in (base, head)]
    if any(f is None or f.stability is None for f in figures):  # only the timed figures carry a grade
        return None
    base_threads, head_threads = timed_threads(base), timed_threads(head)
    if base_threads is None or head_threads is None or base_threads[0] == head_threads[0]:
        return None
    words = []
    for side, (used, configured) in (("base", base_threads), ("head", head_threads)):
        stalled = f" (its pool of {configured} stalled while other processes held the cores)" if used != configured \
            else ""
        words.append(f"{side} timed it with {used} thread{'s' if used != 1 else ''}{stalled}")
    return f"{' and '.join(words)}: not the same measurement"


def measured_spread(metric: str, base: RunRecord | None, head: RunRecord | None) -> float:
    """The spreads both sides recorded for `metric` (`Metric.spread`), summed; 0 when neither did. Summed, not
    the larger: where both runs' measurements cover the same typical value, their medians differ by at most the
    sum of their ranges (two identical runs of a model whose peak moves by whole buffers, 6.9 and 8.3 MB
    spreads, had medians 9.3 MB apart)."""
    spreads = [figure.spread for record in (base, head) if record is not None
               and (figure := record.metrics.get(metric)) is not None and figure.spread is not None]
    return float(sum(spreads))
