"""Supervising the child processes that run user models (`mlbench/run/child.py`).

The coordinator (or a Dask worker) starts children, hands each one request at a time, and waits on
their pipes with a deadline: a variant past its time limit gets its child killed, and a child that
dies (a signal, `os._exit`, the out-of-memory killer) fails the variant(s) it was working on with
the cause on one line. The other variants go on in a fresh child; the sweep never stops for it.

The children themselves (started, pooled, killed with what they started) are `children.py`'s. A
model that fails while loading (a hang in `__init__`, a crash) fails the other artifacts of that
model at once, with a reason that says so: the same model would do the same again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from mlbench.records import RunRecord
from mlbench.run.children import Child, ChildDied, ChildPool
from mlbench.run.frames import TIMEOUT
from mlbench.run.limits import ChildLimits, memory_note, out_of_memory
from mlbench.run.memory_rounds import with_memory_rounds
from mlbench.run.tasks import ExportOutcome, Finished, WorkSpec, failed_record, utc_now

LOADING = "while loading the model"
__all__ = ["Child", "ChildDied", "ChildPool", "ask", "export_one", "measure_group"]


def _relog(message: tuple[Any, ...]) -> None:
    """A child's ("log", logger, level, text): logged here, as if this process had said it."""
    import logging

    logging.getLogger(message[1]).log(message[2], "%s", message[3])


def _deadline(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds


def _add(total: dict[str, float], seconds: dict[str, float] | None) -> None:
    for name, value in (seconds or {}).items():
        total[name] = total.get(name, 0.0) + value


def _failed_loading(pool: ChildPool, model: str, subject: str, cause: str) -> None:
    """Remember that `model` could not be loaded (for `subject`): its other artifacts fail at once."""
    pool.load_failures.setdefault(model, f"not tried, the same model failed to load for {subject}: {cause}")


def _died(child: Child, died: ChildDied, doing: str, limits: ChildLimits) -> str:
    """The one-line cause of a child that died or garbled its channel `doing` something."""
    return child.cause(died, doing) + ("" if died.garbled else memory_note(limits, child.process.returncode))


def _peak(message: tuple[Any, ...], index: int) -> int | None:
    """The peak resident memory a child sent beside a failure (`message[index]`, where present)."""
    return message[index] if len(message) > index else None


def ask(pool: ChildPool, request: tuple[Any, ...], memory_bytes: int, seconds: float,
        limit: str = "mlbench's own limit for it", *, fresh: bool = False) -> Any:
    """One short request answered by ("done", result, ...) in a child of `pool`; None if the child
    failed, died or took longer than `seconds` (it is then discarded). For what only informs the
    coordinator (the model sizes that order the exports), never for a variant's own work. A model
    that was being built when the time ran out ("stage" messages say which) is not loaded again.
    `fresh`: in a child that did nothing before, closed after (a memory round: `memory_rounds.py`)."""
    child = pool.fresh(memory_bytes) if fresh else pool.acquire(memory_bytes)
    building: str | None = None
    try:
        child.send(request)  # waits for a fresh child's imports first
        deadline = time.monotonic() + seconds
        while True:
            message = child.receive(deadline)
            if message is TIMEOUT:
                if building is not None:
                    _failed_loading(pool, building, "the export order", f"timed out after {seconds:g} s while "
                                    f"building it on the meta device to size it ({limit})")
                break
            if message[0] == "log":
                _relog(message)
                continue
            if message[0] == "stage":
                building = message[1]
                continue
            if message[0] == "done":
                _give_back(pool, child, fresh)
                return message[1]
            if message[0] == "interrupted":
                raise KeyboardInterrupt
            _give_back(pool, child, fresh)  # "error": the request failed, the child is sound
            return None
    except ChildDied:
        pass
    except BaseException:  # any failure, Ctrl-C included: the child leaves the pool, and it re-raises
        pool.discard(child)
        raise
    pool.discard(child)
    return None


def _give_back(pool: ChildPool, child: Child, fresh: bool) -> None:
    if fresh:
        pool.discard(child)
    else:
        pool.release(child)


def export_one(pool: ChildPool, spec: WorkSpec, variant: Any, limits: ChildLimits, threads: int | None,
               seconds: dict[str, float], on_stage: Callable[[str, str], None] | None = None) -> ExportOutcome:
    """Build one artifact in a child of `pool`; a child that dies or runs past `limits.export_s` fails
    this export only (the child is discarded, the next request gets a fresh one), and when that
    happens while loading the model, the model's other artifacts are not tried. `on_stage(subject, name)`:
    the child's stages as they begin (a CI log shows them)."""
    known = pool.load_failures.get(variant.model)
    if known is not None:
        return ExportOutcome(variant.id, failure=known)
    child = pool.acquire(limits.memory_bytes, variant.model)
    doing, lost = "while starting", False
    try:
        child.send(("export", spec, variant, threads))  # waits for a fresh child's imports first
        doing, deadline = LOADING, _deadline(limits.export_s)
        while True:
            message = child.receive(deadline)
            if message is TIMEOUT:
                pool.discard(child)
                failure = f"timed out after {limits.export_s:g} s {doing} (limits.export_s)"
                lost = True
                break
            if message[0] == "log":
                _relog(message)
                continue
            if message[0] == "stage":
                doing = LOADING if message[2] == "load" else f"while exporting {variant.artifact_id}"
                if on_stage is not None:
                    on_stage(message[1], message[2])
                continue
            outcome = _export_reply(message, variant, limits, seconds)
            pool.release(child)
            return outcome
    except ChildDied as died:
        failure, lost = _died(child, died, doing, limits), True
        pool.discard(child)
    except BaseException:  # any failure, Ctrl-C included: the child leaves the pool, and it re-raises
        pool.discard(child)
        raise
    if lost and doing == LOADING:
        _failed_loading(pool, variant.model, variant.artifact_id, failure)
    return ExportOutcome(variant.id, failure=failure)


def _export_reply(message: tuple[Any, ...], variant: Any, limits: ChildLimits,
                  seconds: dict[str, float]) -> ExportOutcome:
    if message[0] == "interrupted":
        raise KeyboardInterrupt
    if message[0] == "error":
        return ExportOutcome(variant.id, failure=f"the export process failed: {message[1]}")
    outcome: ExportOutcome = message[1]
    _add(seconds, message[2])
    oom = out_of_memory(outcome.failure, limits, _peak(message, 3))
    return ExportOutcome(outcome.variant_id, failure=oom, built_key=outcome.built_key) if oom else outcome


def measure_group(pool: ChildPool, spec: WorkSpec, group: list[Any], limits: ChildLimits,
                  on_stage: Callable[[str, str], None] | None = None,
                  on_started: Callable[[Any], None] | None = None,
                  seconds: dict[str, float] | None = None, threads: int | None = None) -> Iterator[Finished]:
    """`_measure_group`, its records' memory figures the median over `memory.rounds` rounds, each in a child of
    its own (`memory_rounds.py`)."""
    timed = _measure_group(pool, spec, group, limits, on_stage, on_started, seconds, threads)
    yield from with_memory_rounds(spec, group, timed, limits, threads,
                                  lambda request, limit_s, limit: ask(pool, request, limits.memory_bytes, limit_s,
                                                                      limit, fresh=True), seconds)


def _measure_group(pool: ChildPool, spec: WorkSpec, group: list[Any], limits: ChildLimits,
                   on_stage: Callable[[str, str], None] | None = None,
                   on_started: Callable[[Any], None] | None = None,
                   seconds: dict[str, float] | None = None, threads: int | None = None) -> Iterator[Finished]:
    """Export (or fetch) one artifact and measure its variants in a child, one at a time (`threads`: the
    child's thread count while it works, when it shares the cores with other children).

    A child that dies or runs out of time while loading or exporting fails every variant left (and,
    while loading, the model's other artifacts are not tried); one that dies while measuring a variant
    fails that variant, and the rest go on in a fresh child.
    """
    stage = on_stage or (lambda subject, name: None)
    remaining = list(group)
    known = pool.load_failures.get(group[0].model)
    if known is not None:
        for variant in remaining:
            yield Finished(failed_record(variant, "failed", known))
        return
    while remaining:
        child = pool.acquire(limits.memory_bytes, group[0].model, timing=True)
        current: Any = None
        doing, limit_name, lost = "while starting", "export_s", True
        started, t0 = utc_now(), time.perf_counter()
        cause: str
        try:
            child.send(("measure", spec, remaining, None, threads))  # waits for a fresh child's imports first
            doing, deadline, started, t0 = LOADING, _deadline(limits.export_s), utc_now(), time.perf_counter()
            while True:
                message = child.receive(deadline)
                if message is TIMEOUT:
                    pool.discard(child)
                    cause = f"timed out after {getattr(limits, limit_name):g} s {doing} (limits.{limit_name})"
                    break
                kind = message[0]
                if kind == "log":
                    _relog(message)
                elif kind == "stage":
                    subject, name = message[1], message[2]
                    stage(subject, name)
                    if name == "export":
                        doing = f"while exporting {remaining[0].artifact_id}"
                    elif name == "measure":
                        current = next(v for v in remaining if v.id == subject)
                        doing, limit_name, deadline = "while measuring", "measure_s", _deadline(limits.measure_s)
                        started, t0 = utc_now(), time.perf_counter()
                        if on_started is not None:
                            on_started(current)
                elif kind == "finished":
                    record = RunRecord.model_validate(message[1])
                    oom = out_of_memory(record.error, limits, _peak(message, 3))
                    if oom:
                        record.error = oom
                    remaining = [v for v in remaining if v.id != record.variant_id]
                    current = None
                    yield Finished(record, tuple(message[2]) if message[2] else None)
                elif kind == "done":
                    _add(seconds if seconds is not None else {}, message[2])
                    pool.release(child)
                    return
                elif kind == "interrupted":
                    raise KeyboardInterrupt
                else:  # "error": the request itself failed
                    pool.discard(child)
                    cause, lost = f"the measurement process failed: {message[1]}", False
                    break
        except ChildDied as died:
            cause = _died(child, died, doing, limits)
            pool.discard(child)
        except BaseException:  # Ctrl-C, or the caller stopped: the work in hand is abandoned
            pool.discard(child)
            raise
        if lost and doing == LOADING:  # timed out or died building the model
            _failed_loading(pool, remaining[0].model, remaining[0].artifact_id, cause)
        failed = [current] if current is not None else list(remaining)
        for variant in failed:
            yield Finished(failed_record(variant, "failed", cause, started=started, t0=t0))
        remaining = [v for v in remaining if v not in failed]
