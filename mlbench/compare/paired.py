"""Paired statistics over interleaved rounds (`mlbench ab`): each round timed A and B back to back,
so whatever the machine did in that round hit both. The change is judged on the per-round ratios
head / base, never on the pooled samples:

- the estimate is the median of the per-round ratios;
- a seeded percentile bootstrap over rounds gives its (1 - alpha) interval;
- the Wilcoxon signed-rank test on the log ratios (two-sided; scipy, imported when used) asks whether
  the ratios centre on 1.

The result is a `NoiseTest`, so `compare` judges rules with it exactly as it judges two runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from mlbench.compare.noise import BOOTSTRAP_RESAMPLES, DEFAULT_ALPHA, NoiseTest

TEST_NAME = "Wilcoxon signed-rank"
MIN_ROUNDS = 5
DEFAULT_ROUNDS = 20  # `mlbench ab`'s defaults: rounds, timed calls per side per round, untimed calls before them
DEFAULT_CALLS = 20
DEFAULT_WARMUP = 3


@dataclass(frozen=True)
class PairedChange:
    """One metric's change over interleaved rounds: the paired ratio estimate and its test."""

    ratio: float
    noise: NoiseTest


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


def bootstrap_median_interval(ratios: Sequence[float], alpha: float = DEFAULT_ALPHA,
                              resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Seeded percentile-bootstrap (1 - alpha) interval of the median of `ratios`, resampling rounds."""
    import numpy as np

    rng = np.random.default_rng(0)
    values = np.asarray(ratios, dtype=np.float64)
    medians = np.median(values[rng.integers(0, len(values), (resamples, len(values)))], axis=1)
    low, high = np.percentile(medians, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)


def paired_change(base: Sequence[float], head: Sequence[float], alpha: float = DEFAULT_ALPHA) -> PairedChange:
    """Per-round statistics of the two sides (same length, same round order) → the paired change."""
    ratios = round_ratios(base, head)
    n = len(ratios)
    estimate = statistics.median(ratios) if ratios else math.nan
    name = f"{TEST_NAME} (paired over {n} interleaved rounds)"
    if n < MIN_ROUNDS:
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
    interval = bootstrap_median_interval(ratios, alpha)
    return PairedChange(estimate, NoiseTest(test=name, n_base=n, n_head=n, u=w, p_value=p, alpha=alpha,
                                            significant=p < alpha, interval=interval))
