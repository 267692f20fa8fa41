"""The first phase of a local run on several cores: the exports, and the measurements that time nothing
on this machine, spread over up to `jobs` supervised children at once.

A measurement that times nothing (a Core ML variant off macOS: static analysis, placement and latency
estimates, emulated verification) cannot be disturbed by an export beside it, so it need not wait for
the one-at-a-time measurement phase: its child exports the artifact and measures the variants right
away, with the model it already built. Timed measurements still run after this phase, alone.

One thread per slot drives one child at a time through the same supervision as everywhere
(`export_one`, `measure_group`: time limits, crashes, memory). Everything the threads learn comes back
to the calling thread through one queue, so the journal and the progress display are only ever
touched by the coordinator's own thread, in the order things happened.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mlbench.run.limits import ChildLimits
from mlbench.run.supervisor import ChildPool, export_one, measure_group
from mlbench.run.tasks import ExportOutcome, Finished, WorkSpec


@dataclass(frozen=True)
class Work:
    """One artifact of the first phase: `variant` is its first variant; `group`, when set, is every
    variant of it, measured in this phase too (none of them is timed on this machine)."""

    variant: Any
    group: list[Any] | None = None


class _Todo:
    """The work not yet taken, in order (longest first). A slot takes, among the next `window` items (those the
    slots would start now anyway), one of the model its child last built if there is one, so that the model is
    not built again; the order otherwise stands, so the longest still start first."""

    def __init__(self, work: list[Work], window: int) -> None:
        self._items = list(work)
        self._window = window
        self._lock = threading.Lock()

    def take(self, model: str | None) -> Work | None:
        with self._lock:
            if not self._items:
                return None
            near = self._items[:self._window]
            index = next((i for i, w in enumerate(near) if w.variant.model == model), 0)
            return self._items.pop(index)


def fan_out(pool: ChildPool, spec: WorkSpec, work: list[Work], limits_of: Callable[[Any], ChildLimits], jobs: int,
            threads: int | None, on_done: Callable[[ExportOutcome], None], on_stage: Callable[[str, str], None],
            on_started: Callable[[Any], None], seconds: dict[str, float]) -> Iterator[Finished]:
    """Do `work` in its order, each item in the next free child; export outcomes go to `on_done`, the
    records of measured groups are yielded as they finish."""
    events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
    slots = min(jobs, len(work))
    todo = _Todo(work, slots)
    if slots:
        pool.prestart(slots, limits_of(work[0].variant).memory_bytes)

    def stage(subject: str, name: str) -> None:
        events.put(("stage", subject, name))

    def slot() -> None:
        own: dict[str, float] = {}  # this thread's stage seconds, added up by the caller's thread
        model: str | None = None
        try:
            while True:
                item = todo.take(model)
                if item is None:
                    break
                model = item.variant.model
                limits = limits_of(item.variant)
                if item.group is None:
                    events.put(("exported", export_one(pool, spec, item.variant, limits, threads, own, stage)))
                    continue
                for finished in measure_group(pool, spec, item.group, limits, stage,
                                              lambda variant: events.put(("started", variant)), own, threads):
                    events.put(("finished", finished))
        except BaseException as exc:  # noqa: BLE001 - a KeyboardInterrupt from a child, or a bug: the caller raises it
            events.put(("raised", exc, own))
            return
        events.put(("idle", own))

    workers = [threading.Thread(target=slot, name=f"mlbench-slot-{i}", daemon=True) for i in range(slots)]
    for worker in workers:
        worker.start()
    running = slots
    while running:
        event = events.get()
        kind = event[0]
        if kind == "exported":
            on_done(event[1])
        elif kind == "stage":
            on_stage(event[1], event[2])
        elif kind == "started":
            on_started(event[1])
        elif kind == "finished":
            yield event[1]
        else:  # "idle" or "raised": a slot is done
            running -= 1
            for name, value in event[-1].items():
                seconds[name] = seconds.get(name, 0.0) + value
            if kind == "raised":
                raise event[1]
