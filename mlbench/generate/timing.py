"""Timing a generation's decode steps, the same loop for every backend that runs in this process.

Prefill is timed with `mlbench.timing.time_calls` like any latency (each call a fresh prompt into an emptied
cache). Decode steps cannot be repeated on their own (each one moves the cache on), so whole generations are
run: `warmup` untimed, then `rounds` timed, and every decode step of a timed round is one sample. A step picks
the greedy token from the previous logits and decodes it, so the time includes the arg-max, as an app's loop does.
`time_decode_graded` adds the decode steps' stability grade (`mlbench.stability`), read with the machine's load
over the rounds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from mlbench.machine_load import sample
from mlbench.stability import Stability
from mlbench.timing import graded, quiet_heap


def decode_rounds(repeats: int, new_tokens: int) -> int:
    """Timed generations for at least `repeats` decode samples (the pipeline's latency.repeats)."""
    return max(1, math.ceil(repeats / new_tokens))


def time_decode(prefill: Callable[[], Any], step: Callable[[Any], Any], new_tokens: int, *, rounds: int,
                warmup: int) -> list[float]:
    """Milliseconds of each decode step of `rounds` timed generations of `new_tokens` steps, after `warmup`
    untimed ones. `prefill()` empties the cache, runs the prompt and returns its logits; `step(logits)`
    decodes the greedy token of `logits` and returns the next logits."""
    clock = time.perf_counter_ns
    samples_ns: list[int] = []
    with quiet_heap():
        for r in range(warmup + rounds):
            logits = prefill()
            for _ in range(new_tokens):
                t0 = clock()
                logits = step(logits)
                elapsed = clock() - t0
                if r >= warmup:
                    samples_ns.append(elapsed)
    return [s / 1e6 for s in samples_ns]


def time_decode_graded(prefill: Callable[[], Any], step: Callable[[Any], Any], new_tokens: int, *, rounds: int,
                       warmup: int) -> tuple[list[float], Stability]:
    """`time_decode`'s samples and their grade, the machine's load read either side of the rounds."""
    started = sample()
    samples = time_decode(prefill, step, new_tokens, rounds=rounds, warmup=warmup)
    return samples, graded(samples, started)
