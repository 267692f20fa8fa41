"""`memory.rounds`: a variant's `memory.load` and `memory.peak` as the median over rounds in fresh processes.

One round's memory figures move by whole activation buffers with the allocator's state, which settles per
process: rounds repeated in one process mostly agree, while fresh processes differ (a 2-conv model read 21.6
and 31.1 MB in identical runs, each run's three in-process rounds within 2.4 MB). And the timed measurement's
process is not a fresh one: it built the model and ran other work before, and its allocator's state raised
eager resnet18's peak to 32 MB where fresh processes read 11 MB, every run. So after a group's timed
measurement, `memory.rounds` rounds run at once, each in a fresh child (`Backend.memory_round`: a load and
its first call, untimed, after the timing: they disturb none), and the record keeps their median, each
round's figure (`samples`) and their largest minus smallest (`spread`), which compare's noise floor is widened
by; the timed measurement's own figures stay in `details.memory.timed_round`. A round that fails leaves the
figures of those that did not, saying so; nothing here fails a variant.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mlbench.backends.base import Backend
from mlbench.config.pipeline import MemorySettings
from mlbench.memory import ROUNDS_NOTE, median_of_rounds
from mlbench.plugins.registry import backend_class
from mlbench.records import Metric
from mlbench.run.limits import ChildLimits
from mlbench.run.tasks import Finished, WorkSpec

MEMORY = ("memory.load", "memory.peak")
DEFAULT_SECONDS = 600.0  # a round's time limit where limits.measure_s sets none


def rounds_of(spec: WorkSpec) -> int:
    return int(spec.config.get("memory", {}).get("rounds", MemorySettings().rounds))


def measures_rounds(backend: str) -> bool:
    """Whether the backend has further memory rounds (`Backend.memory_round`): no child is started for one
    that measures memory once."""
    return backend_class(backend).memory_round is not Backend.memory_round


def _measured(finished: Finished) -> bool:
    peak = finished.record.metrics.get("memory.peak")
    return finished.record.status == "ok" and peak is not None and peak.value is not None


AskFresh = Callable[[tuple[Any, ...], float, str], Any]
"""(request, seconds, limit's name) → the answer of a fresh child, closed after; None if it failed."""


def with_memory_rounds(spec: WorkSpec, group: list[Any], finished: Iterator[Finished], limits: ChildLimits,
                       threads: int | None, ask: AskFresh, seconds: dict[str, float] | None = None
                       ) -> Iterator[Finished]:
    """The group's records (`finished`, its timed round), their memory figures the median over `memory.rounds`
    rounds; as they come where one round is asked for. The records wait for the group's rounds, whose wall time
    (their children's start included) is added to `seconds["memory_rounds"]`."""
    rounds = rounds_of(spec)
    if rounds < 2 or not measures_rounds(group[0].backend):
        yield from finished
        return
    done = list(finished)
    todo = [v for v in group if any(f.record.variant_id == v.id and _measured(f) for f in done)]
    request = ("memory", spec, todo, threads)
    limit_s = limits.measure_s or DEFAULT_SECONDS
    answers: list[Any] = []
    if todo:  # the rounds at once, each child on its own (resident memory is per process)
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=rounds, thread_name_prefix="mlbench-memory-round") as pool:
            answers = list(pool.map(lambda _: ask(request, limit_s, "limits.measure_s"), range(rounds)))
        if seconds is not None:
            seconds["memory_rounds"] = seconds.get("memory_rounds", 0.0) + time.perf_counter() - began
    extra: list[dict[str, dict[str, Any]]] = [a for a in answers if a is not None]
    failed = len(answers) - len(extra)
    for item in done:
        record = item.record
        theirs = [{n: Metric.model_validate(m) for n, m in a[record.variant_id].items()}
                  for a in extra if record.variant_id in a]
        if theirs:
            timed = {n: m.value for n in MEMORY if (m := record.metrics.get(n)) is not None}
            record.metrics = {**record.metrics, **median_of_rounds(theirs)}
            note = ROUNDS_NOTE.format(n=len(theirs))
            if failed:
                note += f"; {failed} of the {rounds} rounds failed"
            memory = record.details.setdefault("memory", {})
            memory.update({"rounds": len(theirs), "aggregate": "median", "spread": "max - min",
                           "rounds_note": note, "timed_round": timed})
        yield item
