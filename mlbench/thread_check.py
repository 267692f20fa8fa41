"""Is the runtime's thread pool stalled? A short burst with one thread against the configured count,
before the timed calls.

Why: on a shared runner whose cores are busy, every parallel region of a runtime with several intra-op
threads waits for a worker thread the scheduler has not run yet. The figure is then that wait, steady from
call to call (a 16 ms median at cv 0.08 for a model a plain loop times at 0.04 ms), so no dispersion grade
can see it. The cause, measured (per-thread `/proc/self/task/*/schedstat` and context switches, a two-input
conv+linear model, torch's OpenMP pool of 2 threads, 16 spinning processes in sessions of their own on 2
cores): both threads of the pool spin at each region's barrier waiting for the other (libgomp spins before
it sleeps; `OMP_WAIT_POLICY=ACTIVE` always spins), the spinning one burns the CPU share Linux's autogroup
gives the measuring process's session, and the one it waits for sits on the run queue until its next slice:
100 calls read a 141 ms median, each thread waited 11 s on the run queue over them, all switches involuntary.
With `OMP_WAIT_POLICY=PASSIVE` (workers sleep at once) the same calls read 0.11 ms, and with one thread
(no barrier) 0.09 ms. Without `OMP_WAIT_POLICY`, the stall comes and goes with how long each wait lasts
(one such run read 152 ms, the next 0.09 ms with a 46 ms mean).

One thread never waits for another: when the configured count is far slower than one thread, more threads
cannot be doing the model any good, and the figure is taken with one thread instead, saying so. A model
that really gains from threads is at most as slow with them as without (on a quiet machine, 2 threads read
0.20 ms where 1 reads 0.22 ms for a small conv+linear model here), so the factor below leaves it alone.
tests/test_thread_check.py reproduces the stall under a busy loop and checks that the run measures with one
thread.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlbench.records import Latency

STALL_FACTOR = 1.5
"""The configured count's burst median above this many times one thread's: stalled."""
BURST_S = 0.04
"""Seconds of calls per side and round (two rounds each side, alternating)."""
BURST_DEADLINE_S = 0.25
"""A burst stops after this many seconds (and at least MIN_CALLS calls): a stalled pool's calls take hundreds
of ms, and a burst sized from a quiet first call would otherwise run for minutes."""
MIN_CALLS = 3
MAX_CALL_MS = 250.0
"""Calls slower than this are checked only when they wait rather than compute (see `check_threads`): a burst
would cost seconds per variant, and a stall's waits (scheduler slices, a few ms per parallel region) weigh
little beside a call that really takes this long."""
COMPUTING_SHARE = 0.5
"""A slow call during which this process's threads had the CPU for at least this share of its wall time is
computing (a stalled one: 1 s of CPU over 11.5 s of wall time for 100 calls under the busy loop above)."""


@dataclass(frozen=True)
class ThreadCheck:
    configured: int
    configured_ms: float
    one_thread_ms: float
    timed_before_ms: float | None = None
    """Set on a check made again after the timed calls: their median with the configured count."""

    @property
    def stalled(self) -> bool:
        return self.configured_ms > STALL_FACTOR * self.one_thread_ms

    def adjustment(self) -> str:
        """What a report says of a figure taken with one thread because of this check."""
        when = ("in a burst before the timed calls" if self.timed_before_ms is None else
                f"in a burst after timed calls that read {self.timed_before_ms:.3g} ms with {self.configured} "
                "(the pool stalled after the first check), which were timed again")
        return (f"measured with 1 thread: {self.configured} threads read {self.configured_ms:.3g} ms against "
                f"{self.one_thread_ms:.3g} ms with 1 {when} (a stalled thread pool: the other threads wait for "
                "cores other processes hold)")

    def details(self) -> dict[str, Any]:
        return {"configured": self.configured, "configured_ms": round(self.configured_ms, 6),
                "one_thread_ms": round(self.one_thread_ms, 6), "stalled": self.stalled,
                "factor": STALL_FACTOR,
                **({"timed_before_ms": round(self.timed_before_ms, 6)} if self.timed_before_ms is not None else {})}


def _burst(call: Callable[[], Any], calls: int, least: int) -> list[float]:
    """Milliseconds of up to `calls` calls, stopping after BURST_DEADLINE_S once `least` are timed."""
    clock = time.perf_counter_ns
    deadline = clock() + int(BURST_DEADLINE_S * 1e9)
    samples: list[int] = []
    for i in range(calls):
        t0 = clock()
        call()
        t1 = clock()
        samples.append(t1 - t0)
        if t1 > deadline and i + 1 >= least:
            break
    return [s / 1e6 for s in samples]


def _wall_and_cpu_ms(call: Callable[[], Any]) -> tuple[float, float]:
    """One call's wall time and this process's CPU time over it (all its threads), in ms."""
    cpu0, t0 = time.process_time_ns(), time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - t0) / 1e6, (time.process_time_ns() - cpu0) / 1e6


def check_threads(call: Callable[[], Any], *, configured: int | None, first_ms: float,
                  set_threads: Callable[[int], None]) -> ThreadCheck | None:
    """Time `call` in alternating bursts with `configured` threads and with one (`set_threads` switches
    the runtime's pool); the configured count is set again before returning. None where there is nothing
    to compare (one thread configured, or a slow call that computes rather than waits).

    A first call above MAX_CALL_MS is either a slow model or a stalled pool (the 0.35 ms model above read
    136 ms): one more call tells them apart by this process's CPU time over it, a slow model's threads
    computing (CPU time at least COMPUTING_SHARE of the wall time), a stalled pool's waiting on the run queue."""
    if not configured or configured <= 1:
        return None
    least = MIN_CALLS
    if first_ms > MAX_CALL_MS:
        wall_ms, cpu_ms = _wall_and_cpu_ms(call)
        if wall_ms > MAX_CALL_MS and cpu_ms >= COMPUTING_SHARE * wall_ms:
            return None
        first_ms, least = wall_ms, 1  # waiting: checked, with bursts as short as the deadline allows
    calls = max(least, min(200, int(BURST_S * 1000 / max(first_ms, 1e-3))))
    many: list[float] = []
    one: list[float] = []
    try:
        for _ in range(2):
            set_threads(configured)
            call()  # the pool resized: its first call pays for that
            many += _burst(call, calls, least)
            set_threads(1)
            call()
            one += _burst(call, calls, least)
    finally:
        set_threads(configured)
    return ThreadCheck(configured, statistics.median(many), statistics.median(one))


def timed_with_check(call: Callable[[], Any], *, configured: int | None, first_ms: float,
                     set_threads: Callable[[int], None],
                     time_with: Callable[[int | None], Latency]) -> tuple[Latency, ThreadCheck | None]:
    """The timed calls (`time_with(threads)`) around the stall check: with one thread where the pool is
    stalled before them, and timed again with one where it stalled during them (their median more than
    STALL_FACTOR times the configured count's burst, and a second check finds the stall: the stall comes and
    goes, and a 0.4 ms model read 708 ms a few seconds after a check that found its pool well). The grade
    says so; the check returned is the one that decided the threads, for the record's details. The caller
    sets its configured count back after."""
    check = check_threads(call, configured=configured, first_ms=first_ms, set_threads=set_threads)
    stalled = check is not None and check.stalled
    if stalled:
        set_threads(1)
    latency = time_with(1 if stalled else configured)
    if check is not None and not stalled and latency.median > STALL_FACTOR * check.configured_ms:
        again = check_threads(call, configured=configured, first_ms=check.configured_ms, set_threads=set_threads)
        if again is not None and again.stalled:
            check, stalled = replace(again, timed_before_ms=latency.median), True
            set_threads(1)
            latency = time_with(1)
    if stalled and check is not None and latency.stability is not None:
        latency.stability = latency.stability.adjusted(check.adjustment())
    return latency, check


def torch_threads(count: int) -> None:
    """`set_threads` for torch's intra-op pool (a no-op when already at `count`: resizing costs calls)."""
    import torch

    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
