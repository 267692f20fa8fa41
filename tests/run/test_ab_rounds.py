"""`mlbench ab`'s rounds (no torch): the sides alternate, each side's copies take the rounds in turn,
and the rounds stop early only once every latency rule's verdict is settled; a stalled thread pool on either
side puts both sides on one thread before the rounds."""

from __future__ import annotations

import math
import random
import time

from mlbench.backends.base import CallTimer
from mlbench.compare.rules import parse_rules
from mlbench.run.ab import AbSettings, _timed_record, check_pools, interleave, settled_for


def recording_timers(log: list[str], side: str, copies: int, seconds: float) -> list[CallTimer]:
    def call(name: str):
        def run() -> None:
            log.append(name)
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        return run

    return [CallTimer(call(f"{side}{i}")) for i in range(copies)]


def first_calls_of_rounds(log: list[str], per_side: int, rounds: int) -> list[tuple[str, str]]:
    return [(log[2 * r * per_side], log[(2 * r + 1) * per_side]) for r in range(rounds)]


def test_the_sides_alternate_and_the_copies_take_rounds_in_turn():
    log: list[str] = []
    a, b = recording_timers(log, "A", 2, 0.0), recording_timers(log, "B", 3, 0.0)
    blocks = interleave(a, b, AbSettings(rounds=6, calls=2, warmup=1, min_rounds=6))
    assert [len(x) for x in blocks[0]] == [2] * 6 and len(blocks[1]) == 6
    assert first_calls_of_rounds(log, 3, 6) == [("A0", "B0"), ("B1", "A1"), ("A0", "B2"), ("B0", "A1"),
                                                ("A0", "B1"), ("B2", "A1")]


def test_the_rounds_stop_early_once_a_clear_change_is_settled_and_not_before_the_minimum():
    rules = parse_rules(["latency.median:+10%"])
    a = recording_timers([], "A", 1, 0.0005)
    b = recording_timers([], "B", 1, 0.0015)  # three times as slow: settled at the first look
    blocks = interleave(a, b, AbSettings(rounds=200, calls=2, warmup=0, min_rounds=12), settled_for(rules, 0.01))
    assert len(blocks[0]) == 12


def noisy_timer(seed: int) -> CallTimer:
    """Calls of 0.5 ms times a factor drawn per block (±20%): pairs of rounds disagree widely."""
    rng, state = random.Random(seed), {"calls": 0, "factor": 1.0}

    def run() -> None:
        if state["calls"] % 2 == 0:
            state["factor"] = math.exp(rng.gauss(0.0, 0.2))
        state["calls"] += 1
        end = time.perf_counter() + 0.0005 * state["factor"]
        while time.perf_counter() < end:
            pass

    return CallTimer(run)


def test_an_unsettled_verdict_runs_every_round_and_a_status_rule_never_asks_for_more():
    # 36 noisy rounds: the interval of the ratio is far wider than ±2%, so no look can settle it
    done = settled_for(parse_rules(["latency.median:+2%"]), 0.01)
    settings = AbSettings(rounds=36, calls=2, warmup=0, min_rounds=12)
    assert len(interleave([noisy_timer(1)], [noisy_timer(2)], settings, done)[0]) == 36
    only_status = settled_for(parse_rules(["status:failed"]), 0.01)
    assert len(interleave([noisy_timer(1)], [noisy_timer(2)], settings, only_status)[0]) == 12


def pool_timer(ms: dict[int, float], configured: int = 2) -> tuple[CallTimer, list[int]]:
    """A copy whose calls sleep `ms[threads]` milliseconds, and the counts its pool was switched to."""
    threads, switched = [configured], []

    def set_threads(count: int) -> None:
        threads[0] = count
        switched.append(count)

    return CallTimer(lambda: time.sleep(ms[threads[0]] / 1000), threads=configured, set_threads=set_threads), switched


def test_a_stalled_pool_on_one_side_puts_every_copy_of_both_sides_on_one_thread():
    from mlbench.matrix import Variant

    stalled, stalled_switches = pool_timer({2: 20.0, 1: 0.5})
    other, other_switches = pool_timer({2: 0.5, 1: 0.6})
    second_copy, second_switches = pool_timer({2: 0.5, 1: 0.6})
    base_check, head_check = check_pools([stalled], [other, second_copy])
    assert base_check is not None and base_check.stalled and head_check is not None and not head_check.stalled
    assert stalled_switches[-1] == other_switches[-1] == 1 and second_switches == [1]  # the check on copy 0 only
    variant = Variant(model="m", backend="torch", target_index=0, axes=(("device", "cpu"), ("precision", "float32")),
                      artifact_axes=("precision",), fixed="{}")
    record = _timed_record(variant, [[1.0, 1.1]], AbSettings(), "2026-01-01T00:00:00+00:00", 0.0,
                           (base_check, head_check))
    assert record.latency is not None and record.latency.threads == 1
    assert record.details["ab_thread_check"]["base"]["stalled"] and not record.details["ab_thread_check"]["head"]["stalled"]
    assert record.details["ab_threads"].startswith("both sides measured with 1 thread: 2 threads read ")

    steady, steady_switches = pool_timer({2: 0.5, 1: 0.6})
    assert not any(c is not None and c.stalled for c in check_pools([steady], [CallTimer(lambda: None)]))
    assert steady_switches[-1] == 2  # left at its configured count; a copy with no switch is not checked
    plain = _timed_record(variant, [[1.0]], AbSettings(), "2026-01-01T00:00:00+00:00", 0.0)
    assert plain.latency is not None and plain.latency.threads is None and "ab_thread_check" not in plain.details
