"""Paired statistics over interleaved rounds (`mlbench ab`): each round timed A and B back to back,
so whatever the machine did in that round hit both. The change is judged on the per-round ratios
head / base, never on the pooled samples:

- the two-sided Wilcoxon signed-rank test on the log ratios asks whether they centre on 1;
- the estimate is the Hodges–Lehmann estimate that inverts that test (the median of the Walsh
  averages of the log ratios), and its (1 - alpha) interval is the matching distribution-free
  signed-rank interval (Hollander & Wolfe, "Nonparametric Statistical Methods", §3.2), so the test,
  the estimate and the interval always tell one story.

Why not the median of the ratios with a bootstrap interval (the first version): the two caught about
as many 5%-slower heads on the same recorded noisy trials (median rule, 20 trials: bootstrap 8, 12, 18
at 20, 40, 80 rounds; Hodges–Lehmann 7, 14, 19; no false alarm in 20 A=A trials for either), but the
bootstrap interval could disagree with the test, and it used only the middle of the rounds. What
moved the hit rate was more, shorter rounds and several copies of each model (docs/benchmarks.md).

The result is a `NoiseTest`, so `compare` judges rules with it exactly as it judges two runs. It also
carries the per-round ratios' stability grade (`mlbench.stability`, without the load: the load hit both sides
of a round alike, which is the point of alternating them): the rounds of each side may drift apart on a busy
machine while their ratios hold; ratios that disagree among themselves make the change inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mlbench.compare.noise import DEFAULT_ALPHA, NoiseTest
from mlbench.stability import Stability, grade

TEST_NAME = "Wilcoxon signed-rank"
MIN_ROUNDS = 5
EXACT_UP_TO = 60  # rounds up to which the interval uses the exact signed-rank distribution, else the normal one
# `mlbench ab`'s defaults: rounds, timed calls per side per round, untimed calls before them. Many short
# rounds pair the sides closely in time (timing noise on a shared VM is correlated over tens of calls);
# the warmup refills the caches the other side's model evicted. docs/benchmarks.md has the measurements.
DEFAULT_ROUNDS = 200  # at most; `mlbench ab` stops sooner once every latency rule's verdict is settled
DEFAULT_MIN_ROUNDS = 40  # before the first look
CHECK_EVERY = 20  # rounds between looks
DEFAULT_CALLS = 5
DEFAULT_WARMUP = 5
# Copies of each side's model, each loaded into memory of its own and taking the rounds in turn: where a
# model's weights and buffers land shifts its speed by a few percent (Mytkowicz et al., "Producing wrong
# data without doing anything obviously wrong!", ASPLOS 2009), a bias no number of rounds of one copy
# averages out. Four copies cut the spread of a 5%-slower head's estimate between fresh runs from 1.4% to
# 0.5% (10 runs each, docs/benchmarks.md).
DEFAULT_INSTANCES = 4


@dataclass(frozen=True)
class PairedChange:
    """One metric's change over interleaved rounds: the paired ratio estimate and its test."""

    ratio: float
    noise: NoiseTest
    stability: Stability | None = None  # the per-round ratios' grade


def settled(change: PairedChange, threshold_pct: float) -> bool:
    """Would more rounds change a relative rule's verdict? No when the interval lies wholly past
    +threshold, wholly past -threshold, or wholly between them (when the test could speak at all)."""
    if change.noise.p_value is None or change.noise.interval is None:
        return False
    low, high = ((v - 1) * 100 for v in change.noise.interval)
    t = threshold_pct
    return low > t or high < -t or (-t < low and high < t)


def round_ratios(base: Sequence[float], head: Sequence[float]) -> list[float]:
    if len(base) != len(head):
        raise ValueError(f"paired rounds differ in number: {len(base)} base, {len(head)} head")
    return [h / b for b, h in zip(base, head) if b > 0 and h > 0]


def min_rounds_for(alpha: float) -> int:
    """Fewest rounds with which a two-sided signed-rank test can reach p < alpha at all (2 / 2^n)."""
    n = MIN_ROUNDS
    while 2 / 2**n >= alpha:
        n += 1
    return n


def _signed_rank_lower_tail(n: int) -> list[float]:
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under the null (exact: counts of rank subsets by their sum)."""
    total = n * (n + 1) // 2
    counts = [1] + [0] * total
    for rank in range(1, n + 1):
        for s in range(total, rank - 1, -1):
            counts[s] += counts[s - rank]
    cumulative, running = [], 0
    for c in counts:
        running += c
        cumulative.append(running / 2**n)
    return cumulative


def _interval_rank(n: int, alpha: float) -> int:
    """Largest t with P(T+ <= t) <= alpha / 2: the interval runs from the Walsh average at 0-based
    position t to the one t from the top (-1 when even t = 0 is too likely: the full range)."""
    if n <= EXACT_UP_TO:
        tail = _signed_rank_lower_tail(n)
        t = -1
        while t + 1 < len(tail) and tail[t + 1] <= alpha / 2:
            t += 1
        return t
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - alpha / 2)
    mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return math.floor(mean - 0.5 - z * sd)  # with the continuity correction


def hodges_lehmann(ratios: Sequence[float], alpha: float = DEFAULT_ALPHA) -> tuple[float, tuple[float, float]]:
    """Hodges–Lehmann ratio (from the log ratios' Walsh averages) and its (1 - alpha) signed-rank interval."""
    import numpy as np

    logs = np.log(np.asarray(ratios, dtype=np.float64))
    n = len(logs)
    upper = np.triu_indices(n)
    walsh = np.sort(((logs[:, None] + logs[None, :]) / 2)[upper])
    k = min(max(_interval_rank(n, alpha), 0), (len(walsh) - 1) // 2)
    return (float(math.exp(np.median(walsh))),
            (float(math.exp(walsh[k])), float(math.exp(walsh[len(walsh) - 1 - k]))))


def paired_change(base: Sequence[float], head: Sequence[float], alpha: float = DEFAULT_ALPHA) -> PairedChange:
    """Per-round statistics of the two sides (same length, same round order) → the paired change."""
    ratios = round_ratios(base, head)
    n = len(ratios)
    name = f"{TEST_NAME} (paired over {n} interleaved rounds)"
    if n < MIN_ROUNDS:
        estimate = hodges_lehmann(ratios, alpha)[0] if ratios else math.nan
        return PairedChange(estimate, NoiseTest(
            test=name, n_base=len(base), n_head=len(head), u=None, p_value=None, alpha=alpha, significant=False,
            reason=f"too few rounds ({n}; the paired test needs {MIN_ROUNDS})"))
    logs = [math.log(r) for r in ratios]
    if all(v == 0 for v in logs):
        w, p = 0.0, 1.0
    else:
        from scipy.stats import wilcoxon

        result = wilcoxon(logs, alternative="two-sided", zero_method="wilcox")
        w, p = float(result.statistic), float(result.pvalue)
    estimate, interval = hodges_lehmann(ratios, alpha)
    return PairedChange(estimate, NoiseTest(test=name, n_base=n, n_head=n, u=w, p_value=p, alpha=alpha,
                                            significant=p < alpha, interval=interval), grade(ratios))
