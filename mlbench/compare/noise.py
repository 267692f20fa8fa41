"""The noise guard: is a latency change between two runs more than the noise in their raw samples?

A median can move 10% on a busy laptop without the model changing at all. Before a latency rule
counts a change, `mann_whitney_u` asks whether the two runs' samples could come from one
distribution. The test is rank-based (no assumption of normal timings, robust to the long right
tail timings have), two-sided, and exact when either sample has at most 8 values and there are no
ties (normal approximation with tie and continuity corrections otherwise) — the same choices as
`scipy.stats.mannwhitneyu`'s `method="auto"` (tests/compare/test_noise.py checks them on random
cases), computed here with numpy so the guard needs no scipy. Its memory is bounded whatever `max_repeats` allowed:
past `TEST_MAX_SAMPLES` (rank test) and `BOOTSTRAP_MAX_SAMPLES` (interval) a side is a seeded random subset.

numpy is imported inside the functions: this module is reachable from the pipeline config, and
`mlbench validate` must not import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TEST_NAME = "Mann–Whitney U"
DEFAULT_ALPHA = 0.01
MIN_SAMPLES = 5
EXACT_LIMIT = 8  # either sample this small or smaller and no ties: exact distribution (scipy's `auto` rule)
TEST_MAX_SAMPLES = 100_000
"""The most raw samples of a side the rank test reads: past it (`max_repeats` allows a million), a seeded
random subset of this many, so its memory stays bounded (a few MiB) and the same reports give the same verdict."""


class NoiseTest(BaseModel):
    """The outcome of the noise test on two runs' raw latency samples."""

    model_config = ConfigDict(extra="forbid")

    test: str = Field(description="Which test ran, e.g. 'Mann–Whitney U (two-sided, exact)'.")
    n_base: int
    n_head: int
    u: float | None = Field(description="The test's statistic (Mann–Whitney: U of the head samples; Wilcoxon "
                            "signed-rank: W); null when the test could not run.")
    p_value: float | None = Field(description="Two-sided p-value; null when the test could not run.")
    alpha: float = Field(description="Significance level: the change is real when p_value < alpha.")
    significant: bool = Field(description="True when the samples differ beyond noise.")
    reason: str | None = Field(default=None, description="Why the test could not run.")
    interval: tuple[float, float] | None = Field(
        default=None, description="Bootstrap (1 - alpha) interval of head/base for the metric's statistic.")

    def describe(self) -> str:
        if self.p_value is None:
            return f"no noise test: {self.reason}"
        verdict = "beyond noise" if self.significant else "within noise"
        text = f"{self.test}: p={self.p_value:.2g} ({verdict}, α={self.alpha:g}, n={self.n_base}/{self.n_head})"
        if self.interval is not None:
            low, high = self.interval
            text += f"; {100 * (1 - self.alpha):g}% interval of the change {100 * (low - 1):+.1f}% to {100 * (high - 1):+.1f}%"
        return text


def _u_counts(m: int, n: int) -> list[int]:
    """How many orderings of m + n distinct values give each U = 0..m·n (pairs where an m-value is larger).

    Their generating function is the Gaussian binomial [m+n choose m]_q = ∏_{i=1..m} (1 − q^(n+i)) / (1 − q^i);
    multiplied out term by term in exact integers, truncated at degree m·n (the result is a polynomial
    of that degree, so the truncation loses nothing). O(m · m·n): 8 × 1000 samples is instant.
    """
    m, n = min(m, n), max(m, n)
    top = m * n
    counts = [1] + [0] * top
    for i in range(1, m + 1):
        step = n + i
        for k in range(top, step - 1, -1):  # × (1 − q^(n+i))
            counts[k] -= counts[k - step]
        for k in range(i, top + 1):  # ÷ (1 − q^i), as a power series
            counts[k] += counts[k - i]
    return counts


def _exact_p(u: float, m: int, n: int) -> float:
    """Two-sided exact p-value of U for samples without ties: twice the tail beyond the farther end."""
    counts = _u_counts(m, n)
    low = min(u, m * n - u)
    return min(1.0, 2 * sum(counts[: math.floor(low + 1e-9) + 1]) / sum(counts))


def _subset(values: Any, limit: int) -> Any:
    """`values`, or a seeded random `limit` of them (in their order) when there are more."""
    if len(values) <= limit:
        return values
    import numpy as np

    return values[np.sort(np.random.default_rng(0).choice(len(values), limit, replace=False))]


def mann_whitney_u(base: Sequence[float], head: Sequence[float], alpha: float = DEFAULT_ALPHA) -> NoiseTest:
    """Two-sided Mann–Whitney U test of `head` against `base` samples."""
    n1, n2 = len(head), len(base)
    if min(n1, n2) < MIN_SAMPLES:
        return NoiseTest(test=TEST_NAME, n_base=n2, n_head=n1, u=None, p_value=None, alpha=alpha,
                         significant=False, reason=f"too few raw samples ({n2} and {n1}; the test needs "
                         f"{MIN_SAMPLES} on each side)")
    import numpy as np

    x = _subset(np.asarray(head, dtype=np.float64), TEST_MAX_SAMPLES)
    y = _subset(np.asarray(base, dtype=np.float64), TEST_MAX_SAMPLES)
    subset = "" if (len(x), len(y)) == (n1, n2) else f", a seeded {TEST_MAX_SAMPLES:,} samples of a side with more"
    n1, n2 = len(x), len(y)
    both = np.concatenate([x, y])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(len(both))
    sorted_values = both[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_values, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    ties = bool((counts > 1).any())
    if min(n1, n2) <= EXACT_LIMIT and not ties:
        p = _exact_p(u, n1, n2)
        method = "two-sided, exact"
    else:
        n = n1 + n2
        mu = n1 * n2 / 2
        tie_term = float(((counts.astype(np.float64) ** 3) - counts).sum()) / (n * (n - 1))
        sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
        if sigma == 0:
            p = 1.0
        else:
            z = (abs(u - mu) - 0.5) / sigma
            p = min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
        method = "two-sided, normal approximation"
    return NoiseTest(test=f"{TEST_NAME} ({method}{subset})", n_base=len(base), n_head=len(head), u=u, p_value=p,
                     alpha=alpha, significant=p < alpha)


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_MAX_SAMPLES = 10_000
"""The most raw samples of a side the bootstrap resamples: past it, a seeded random subset of this many.

A side's interval from 10,000 samples is already narrow; a wider one from a subset is the cautious side of
the guard (it confirms fewer changes, never more), and the cost stays fixed whatever `max_repeats` allowed."""
BOOTSTRAP_CHUNK = 1 << 20
"""Resampled values held at once: the resamples are drawn in blocks of at most this many values (8 MiB of
indices, 8 MiB of values), in the order one draw of every resample would take, so the result is the same."""


def _resampled_statistic(values: Any, rng: Any, q: float, resamples: int) -> Any:
    """The q-th percentile of each of `resamples` bootstrap resamples of `values`, a block at a time."""
    import numpy as np

    n = len(values)
    rows = max(1, BOOTSTRAP_CHUNK // n)
    out = np.empty(resamples)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        out[start:stop] = np.percentile(values[rng.integers(0, n, (stop - start, n))], q, axis=1)
    return out


def ratio_interval(base: Sequence[float], head: Sequence[float], statistic: str = "median",
                   alpha: float = DEFAULT_ALPHA, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """Percentile-bootstrap (1 - alpha) interval of statistic(head) / statistic(base).

    Mann–Whitney says whether two runs differ at all; with hundreds of samples it finds 3% shifts
    that are only the machine's mood between runs. A threshold rule asks a different question —
    did it get worse by more than 10%? — so the change counts only when this whole interval lies
    past the threshold. Seeded: the same two reports always give the same verdict. Memory is bounded
    whatever the sample counts (`BOOTSTRAP_MAX_SAMPLES`, `BOOTSTRAP_CHUNK`).
    """
    if min(len(base), len(head)) < MIN_SAMPLES:
        return None
    import numpy as np

    rng = np.random.default_rng(0)
    b = np.asarray(base, dtype=np.float64)
    h = np.asarray(head, dtype=np.float64)
    b, h = _subset(b, BOOTSTRAP_MAX_SAMPLES), _subset(h, BOOTSTRAP_MAX_SAMPLES)
    q = {"median": 50.0, "p90": 90.0}[statistic]
    sb = _resampled_statistic(b, rng, q, resamples)
    sh = _resampled_statistic(h, rng, q, resamples)
    ratios = sh / np.where(sb > 0, sb, np.nan)
    low, high = np.nanpercentile(ratios, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)
