"""Is the runtime's thread pool stalled? A short burst with one thread against the configured count,
before the timed calls.

Why: on a shared runner whose cores are busy (or whose CPU quota is spent), every parallel region of a
runtime with several intra-op threads waits for a worker thread the scheduler has not run yet. The
figure is then that wait, steady from call to call (a 16 ms median at cv 0.08 for a model a plain loop
times at 0.04 ms), so no dispersion grade can see it. One thread never waits for another: when the
configured count is far slower than one thread, more threads cannot be doing the model any good, and the
figure is taken with one thread instead, saying so. A model that really gains from threads is at most
as slow with them as without (on a quiet machine, 2 threads read 0.20 ms where 1 reads 0.22 ms for a
small conv+linear model here), so the factor below leaves it alone.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

STALL_FACTOR = 1.5
"""The configured count's burst median above this many times one thread's: stalled."""
BURST_S = 0.04
"""Seconds of calls per side and round (two rounds each side, alternating)."""
MAX_CALL_MS = 250.0
"""Calls slower than this are not checked: a burst would cost seconds per variant, and a stall's waits
(scheduler slices, a few ms per parallel region) weigh little beside such a call."""


@dataclass(frozen=True)
class ThreadCheck:
    configured: int
    configured_ms: float
    one_thread_ms: float

    @property
    def stalled(self) -> bool:
        return self.configured_ms > STALL_FACTOR * self.one_thread_ms

    def adjustment(self) -> str:
        """What a report says of a figure taken with one thread because of this check."""
        return (f"measured with 1 thread: {self.configured} threads read {self.configured_ms:.3g} ms against "
                f"{self.one_thread_ms:.3g} ms with 1 in a burst before the timed calls (a stalled thread pool: "
                "the other threads wait for cores other processes hold)")

    def details(self) -> dict[str, Any]:
        return {"configured": self.configured, "configured_ms": round(self.configured_ms, 6),
                "one_thread_ms": round(self.one_thread_ms, 6), "stalled": self.stalled,
                "factor": STALL_FACTOR}


def _burst(call: Callable[[], Any], calls: int) -> list[float]:
    clock = time.perf_counter_ns
    samples = [0] * calls
    for i in range(calls):
        t0 = clock()
        call()
        samples[i] = clock() - t0
    return [s / 1e6 for s in samples]


def check_threads(call: Callable[[], Any], *, configured: int | None, first_ms: float,
                  set_threads: Callable[[int], None]) -> ThreadCheck | None:
    """Time `call` in alternating bursts with `configured` threads and with one (`set_threads` switches
    the runtime's pool); the configured count is set again before returning. None where there is nothing
    to compare (one thread configured, or a call too slow to burst)."""
    if not configured or configured <= 1 or first_ms > MAX_CALL_MS:
        return None
    calls = max(3, min(200, int(BURST_S * 1000 / max(first_ms, 1e-3))))
    many: list[float] = []
    one: list[float] = []
    try:
        for _ in range(2):
            set_threads(configured)
            call()  # the pool resized: its first call pays for that
            many += _burst(call, calls)
            set_threads(1)
            call()
            one += _burst(call, calls)
    finally:
        set_threads(configured)
    return ThreadCheck(configured, statistics.median(many), statistics.median(one))


def torch_threads(count: int) -> None:
    """`set_threads` for torch's intra-op pool (a no-op when already at `count`: resizing costs calls)."""
    import torch

    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
