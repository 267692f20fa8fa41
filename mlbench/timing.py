"""The timing loop shared by every backend that runs in this process.

Warmup calls are thrown away (first calls pay for allocation, specialisation, caches); then
calls are timed one by one until both `repeats` and `min_time_s` are met. The loop body is kept
bare — one clock read either side of the call, the samples list allocated before the loop — so
mlbench adds nothing a hand-written loop would not (benchmarks/harness_overhead.py checks this).

Before the warmup calls the garbage collector runs once and every object alive is frozen
(`gc.freeze`): collections during the timed calls then only look at what the calls themselves
allocate, instead of a full pass over every object the process holds (torch and a converter
imported, a few million), which lands a pause of tens of milliseconds in a random sample. The
collector keeps running, so nothing the model leaks in cycles accumulates. The collection comes
before the warmup, not between warmup and timed calls: its pass over millions of objects evicts the
model's weights from the CPU caches, and the first timed calls paid for that.

Every timed figure is graded (`mlbench.stability`): the machine's load is read once either side of the
timed calls (outside the loop) and the grade rides on the `Latency` (and on the metrics built from it).
`summarise` alone grades nothing: figures built by hand, or from records written before, carry no grade
and are judged as they always were.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from mlbench.machine_load import LoadSample, load_between, sample
from mlbench.records import Latency
from mlbench.stability import Stability, grade

StoppedBy = Literal["repeats", "min_time", "max_repeats"]  # Latency.stopped_by
LOAD_MIN_WINDOW_S = 0.1
"""Below this, the other processes' share of the CPU over the timed calls is not used: /proc/stat counts
in 10 ms ticks, so a shorter window's share is a guess."""


def graded(samples_ms: list[float], started: LoadSample) -> Stability:
    """The grade of samples timed since `started` (a `machine_load.sample()` taken just before them)."""
    load = load_between(started, sample(), "timed calls")
    if load["seconds"] < LOAD_MIN_WINDOW_S:
        load["other_share"] = None
    return grade(samples_ms, load)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("no values")
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarise(
    samples_ms: list[float], *, warmup: int, threads: int | None, total_s: float, stopped_by: StoppedBy
) -> Latency:
    ordered = sorted(samples_ms)
    mean = statistics.fmean(samples_ms)
    stdev = statistics.stdev(samples_ms) if len(samples_ms) > 1 else 0.0
    return Latency(
        samples=samples_ms,
        warmup=warmup,
        median=statistics.median(ordered),
        best=ordered[0],
        p90=percentile(ordered, 0.9),
        mean=mean,
        stdev=stdev,
        cv=stdev / mean if mean > 0 else 0.0,
        threads=threads,
        total_s=total_s,
        stopped_by=stopped_by,
    )


@contextmanager
def quiet_heap() -> Iterator[None]:
    """Collect once, then freeze what is alive, so the collector has only new objects to scan."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def time_calls(
    call: Callable[[], Any],
    *,
    warmup: int,
    repeats: int,
    min_time_s: float,
    max_repeats: int,
    threads: int | None = None,
) -> Latency:
    """Warm up, then time `call` until both `repeats` calls and `min_time_s` seconds are reached.

    `max_repeats` bounds the loop for very fast calls (a 10 µs model would otherwise store 100k
    samples per second of `min_time_s`).
    """
    clock = time.perf_counter_ns
    min_time_ns = int(min_time_s * 1e9)
    first_phase = min(repeats, max_repeats)
    samples_ns = [0] * first_phase
    with quiet_heap():
        for _ in range(warmup):  # after the collection: its pass over the heap evicts the model from the caches
            call()
        started = sample()  # the machine's load over the timed calls, read outside them
        start = clock()
        for i in range(first_phase):  # as bare as a hand-written loop
            t0 = clock()
            call()
            samples_ns[i] = clock() - t0
        stopped_by: StoppedBy = "max_repeats" if first_phase == max_repeats else "repeats"
        append = samples_ns.append
        while len(samples_ns) < max_repeats and clock() - start < min_time_ns:
            t0 = clock()
            call()
            append(clock() - t0)
            stopped_by = "max_repeats" if len(samples_ns) == max_repeats else "min_time"
        total_s = (clock() - start) / 1e9
    samples_ms = [s / 1e6 for s in samples_ns]
    latency = summarise(samples_ms, warmup=warmup, threads=threads, total_s=total_s, stopped_by=stopped_by)
    latency.stability = graded(samples_ms, started)
    return latency


def time_block(call: Callable[[], Any], *, calls: int, warmup: int) -> list[float]:
    """Milliseconds of each of `calls` calls after `warmup` untimed ones: one side's turn in a round
    of an interleaved A/B measurement (`mlbench ab`, which quiets the heap once around all rounds)."""
    for _ in range(warmup):
        call()
    clock = time.perf_counter_ns
    samples_ns = [0] * calls  # allocated before the loop: nothing grows between calls
    for i in range(calls):
        t0 = clock()
        call()
        samples_ns[i] = clock() - t0
    return [s / 1e6 for s in samples_ns]


def time_once(call: Callable[[], Any]) -> tuple[float, Any]:
    """Milliseconds of a single call (a load, a first prediction) and its result."""
    t0 = time.perf_counter_ns()
    result = call()
    return (time.perf_counter_ns() - t0) / 1e6, result
