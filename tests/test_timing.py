"""The timing loop: warmup is thrown away; both repeats and min_time_s must be met."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlbench.timing import percentile, summarise, time_calls


def test_warmup_calls_are_not_timed():
    calls = []
    latency = time_calls(lambda: calls.append(1), warmup=4, repeats=7, min_time_s=0.0, max_repeats=100)
    assert len(calls) == 11
    assert len(latency.samples) == 7 and latency.warmup == 4
    assert latency.stopped_by == "repeats"


def test_min_time_extends_past_repeats():
    latency = time_calls(lambda: time.sleep(0.002), warmup=0, repeats=2, min_time_s=0.05, max_repeats=1000)
    assert len(latency.samples) > 2
    assert sum(latency.samples) >= 50 * 0.95
    assert latency.stopped_by == "min_time"
    assert latency.best >= 2.0  # sleep(2 ms) can't be faster


def test_max_repeats_bounds_the_loop():
    latency = time_calls(lambda: None, warmup=0, repeats=5, min_time_s=10.0, max_repeats=50)
    assert len(latency.samples) == 50 and latency.stopped_by == "max_repeats"


def test_statistics_match_numpy():
    samples = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 2.5]
    latency = summarise(samples, warmup=0, threads=2, total_s=0.1, stopped_by="repeats")
    assert latency.median == np.median(samples)
    assert latency.p90 == pytest.approx(np.percentile(samples, 90))
    assert latency.best == 1.0
    assert latency.stdev == pytest.approx(np.std(samples, ddof=1))
    assert latency.cv == pytest.approx(latency.stdev / np.mean(samples))
    assert latency.samples == samples  # raw samples kept in call order


def test_percentile_edges():
    assert percentile([7.0], 0.9) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_the_heap_is_frozen_from_the_warmup_on_and_thawed_after():
    import gc

    from mlbench.timing import time_block

    frozen = []
    latency = time_calls(lambda: frozen.append(gc.get_freeze_count()), warmup=2, repeats=3, min_time_s=0.0,
                         max_repeats=10)
    # the collection comes before the warmup calls (its pass evicts the model from the caches), so
    # every call, warmup included, sees the frozen heap
    assert len(frozen) == 5 and all(n > 0 for n in frozen)
    assert gc.get_freeze_count() == 0 and len(latency.samples) == 3
    samples = time_block(lambda: time.sleep(0.001), calls=4, warmup=1)
    assert len(samples) == 4 and min(samples) >= 1.0
