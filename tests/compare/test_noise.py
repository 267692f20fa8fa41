"""The noise guard's Mann–Whitney U against scipy's, on random cases: the same method (exact or
normal approximation), the same p-value, the same verdict."""

from __future__ import annotations

import random

import pytest

from mlbench.compare.noise import _u_counts, mann_whitney_u

stats = pytest.importorskip("scipy.stats", reason="scipy comes with scikit-learn (the coreml extra)")


def _case(rng: random.Random) -> tuple[list[float], list[float]]:
    sizes = [rng.choice([5, 6, 7, 8, 9, 10, 12, 15, 20, 40]) for _ in range(2)]
    shift = rng.choice([0.0, 0.2, 0.5, 1.0])
    digits = rng.choice([None, None, 1, 2])  # rounded samples tie, as coarse timers do
    draw = lambda mu: rng.gauss(mu, 1.0) if digits is None else round(rng.gauss(mu, 1.0), digits)  # noqa: E731
    return [draw(0.0) for _ in range(sizes[0])], [draw(shift) for _ in range(sizes[1])]


@pytest.mark.slow
def test_same_method_p_value_and_verdict_as_scipy_on_3000_random_cases():
    rng = random.Random(20240601)
    exact = 0
    for _ in range(3000):
        base, head = _case(rng)
        mine = mann_whitney_u(base, head, alpha=0.01)
        theirs = stats.mannwhitneyu(head, base, alternative="two-sided", method="auto")
        assert mine.u == pytest.approx(float(theirs.statistic))
        assert mine.p_value == pytest.approx(float(theirs.pvalue), rel=1e-9, abs=1e-12), (base, head)
        assert mine.significant == (theirs.pvalue < 0.01)
        exact += "exact" in mine.test
    assert 500 < exact < 2500  # both methods were exercised


def test_unequal_small_samples_are_exact_like_scipy():
    base = [1.0, 1.1, 1.2, 1.3, 1.4]
    head = [1.05 + 0.1 * i for i in range(20)]  # 5 against 20, no ties: scipy's `auto` picks exact
    mine = mann_whitney_u(base, head)
    assert mine.test == "Mann–Whitney U (two-sided, exact)"
    assert mine.p_value == pytest.approx(stats.mannwhitneyu(head, base, method="exact").pvalue, rel=1e-12)


def test_exact_distribution_counts_every_ordering():
    from math import comb

    for m, n in [(1, 1), (3, 4), (5, 8), (8, 300)]:
        counts = _u_counts(m, n)
        assert len(counts) == m * n + 1 and sum(counts) == comb(m + n, m)
        assert counts == counts[::-1] and min(counts) >= 1
