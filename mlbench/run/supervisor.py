"""Supervising the child processes that run user models (`mlbench/run/child.py`).

The coordinator (or a Dask worker) starts children, hands each one request at a time, and waits on
their pipes with a deadline: a variant past its time limit gets its child killed, and a child that
dies (a signal, `os._exit`, the out-of-memory killer) fails the variant(s) it was working on with
the cause on one line. The other variants go on in a fresh child; the sweep never stops for it.

Children are kept between requests (torch is imported once per child, the last model stays
built), one pool per coordinator; a child's memory limit is fixed when it starts, so a request
needing another limit gets another child.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mlbench.records import RunRecord
from mlbench.run.limits import ChildLimits, exit_cause, memory_note, out_of_memory
from mlbench.run.tasks import ExportOutcome, Finished, WorkSpec, failed_record, utc_now

TIMEOUT = object()
"""What `Child.receive` gives when the deadline passed with nothing to read."""
STARTUP_S = 600.0
"""How long a child may take to import what it needs before its first request."""


class ChildDied(Exception):
    """The child's pipe closed: it exited or was killed."""


def _child_env() -> dict[str, str]:
    """This environment, with the folder this mlbench was imported from first on the path."""
    import mlbench

    root = str(Path(mlbench.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


class Child:
    """One child process and the two ends the coordinator holds: the request pipe and the lifeline."""

    def __init__(self, memory_bytes: int = 0, warmups: tuple[str, ...] = ()) -> None:
        self.spawned = time.perf_counter()
        self.startup_s = 0.0  # from spawn to ("ready",): the interpreter and its imports
        parent_end, child_end = socket.socketpair()
        lifeline_read, self._lifeline = os.pipe()  # the child exits when this write end closes
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlbench.run.child", str(child_end.fileno()), str(lifeline_read),
                 str(memory_bytes), ",".join(warmups)],
                pass_fds=(child_end.fileno(), lifeline_read), stdin=subprocess.DEVNULL,
                stdout=2,  # a model's prints go to stderr, never into a report piped from stdout
                env=_child_env(),
            )
        except BaseException:
            parent_end.close()
            os.close(self._lifeline)
            raise
        finally:
            child_end.close()
            os.close(lifeline_read)
        self.conn = Connection(parent_end.detach())
        self.memory_bytes = memory_bytes
        self.busy = False
        self.ready = False

    def wait_ready(self) -> None:
        """Wait for the child's imports (outside any time limit); ChildDied if it never gets there."""
        if not self.ready:
            message = self.receive(time.monotonic() + STARTUP_S)
            if message is TIMEOUT or message[0] != "ready":
                self.kill()
                raise ChildDied
            self.ready = True
            self.startup_s = time.perf_counter() - self.spawned

    def send(self, message: tuple[Any, ...]) -> None:
        self.wait_ready()
        try:
            self.conn.send(message)
        except OSError:
            raise ChildDied from None

    def receive(self, deadline: float | None) -> Any:
        """The next message, TIMEOUT once `deadline` (time.monotonic) passes, ChildDied if it died."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            if not self.conn.poll(timeout):
                return TIMEOUT
            return self.conn.recv()
        except (EOFError, OSError):
            raise ChildDied from None

    def cause(self) -> str:
        """How the child ended, after its pipe closed: `was killed by SIGSEGV (…)`, `exited with code 3`."""
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return "closed its pipe and stopped answering"
        return exit_cause(self.process.returncode)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._close_ends()

    def close(self) -> None:
        """Ask the child to exit, then make sure it has."""
        try:
            self.conn.send(("exit",))
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def _close_ends(self) -> None:
        if not self.conn.closed:
            self.conn.close()
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1


def _close_all(children: list[Child]) -> None:
    for child in children:
        child.close()


def _close_in_background(children: list[Child]) -> None:
    """An interpreter holding torch and a converter takes a second or two to exit: let it, off the
    run's critical path (the lifeline still ends a child whose coordinator exits first)."""
    if children:
        threading.Thread(target=_close_all, args=(children,), name="mlbench-children-exit", daemon=True).start()


class ChildPool:
    """The children of one coordinator (or Dask worker): started on demand, reused while alive."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self._ended_startup_s = 0.0
        self._lock = threading.RLock()  # the parallel phase's threads take and return children at once

    def startup_seconds(self) -> float:
        """Seconds every child so far spent starting (summed: children started together overlap)."""
        return self._ended_startup_s + sum(c.startup_s for c in self.children)

    def _forget(self, child: Child) -> None:
        with self._lock:
            if child in self.children:
                self._ended_startup_s += child.startup_s
                self.children.remove(child)

    def acquire(self, memory_bytes: int) -> Child:
        with self._lock:
            for child in self.children:
                if not child.busy and child.memory_bytes == memory_bytes and child.process.poll() is None:
                    child.busy = True
                    return child
            child = Child(memory_bytes)
            child.busy = True
            self.children.append(child)
            return child

    def prestart(self, count: int, memory_bytes: int, warmups: tuple[str, ...] = ()) -> None:
        """Start up to `count` idle children now, each importing torch and doing `warmups`, so their imports
        overlap with each other and with whatever the coordinator does meanwhile (ordering the exports)."""
        with self._lock:
            idle = [c for c in self.children if not c.busy and c.memory_bytes == memory_bytes]
            for _ in range(count - len(idle)):
                self.children.append(Child(memory_bytes, warmups))

    def release(self, child: Child) -> None:
        child.busy = False

    def discard(self, child: Child) -> None:
        """Kill a child that failed or ran past its limit; the next request gets a fresh one."""
        child.kill()
        self._forget(child)

    def trim(self, keep: int) -> None:
        """Close idle children beyond `keep` (after the parallel exports: measurements run alone)."""
        with self._lock:
            idle = [c for c in self.children if not c.busy][keep:]
        for child in idle:
            self._forget(child)
        _close_in_background(idle)

    def close_in_background(self) -> None:
        """Forget every child and let them exit while the caller goes on (writing the reports)."""
        with self._lock:
            children = list(self.children)
        for child in children:
            self._forget(child)
        _close_in_background(children)

    def close(self) -> None:
        for child in list(self.children):
            child.close()
            self._forget(child)


def _relog(message: tuple[Any, ...]) -> None:
    """A child's ("log", logger, level, text): logged here, as if this process had said it."""
    import logging

    logging.getLogger(message[1]).log(message[2], "%s", message[3])


def _deadline(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds


def _add(total: dict[str, float], seconds: dict[str, float] | None) -> None:
    for name, value in (seconds or {}).items():
        total[name] = total.get(name, 0.0) + value


def ask(pool: ChildPool, request: tuple[Any, ...], memory_bytes: int, seconds: float) -> Any:
    """One short request answered by ("done", result, ...) in a child of `pool`; None if the child
    failed, died or took longer than `seconds` (it is then discarded). For what only informs the
    coordinator (the model sizes that order the exports), never for a variant's own work."""
    child = pool.acquire(memory_bytes)
    try:
        child.send(request)  # waits for a fresh child's imports first
        deadline = time.monotonic() + seconds
        while True:
            message = child.receive(deadline)
            if message is TIMEOUT:
                break
            if message[0] == "log":
                _relog(message)
                continue
            if message[0] == "done":
                pool.release(child)
                return message[1]
            if message[0] == "interrupted":
                raise KeyboardInterrupt
            pool.release(child)  # "error": the request failed, the child is sound
            return None
    except ChildDied:
        pass
    pool.discard(child)
    return None


def export_one(pool: ChildPool, spec: WorkSpec, variant: Any, limits: ChildLimits, threads: int | None,
               seconds: dict[str, float]) -> ExportOutcome:
    """Build one artifact in a child of `pool`; a child that dies or runs past `limits.export_s` fails
    this export only (the child is discarded, the next request gets a fresh one)."""
    child = pool.acquire(limits.memory_bytes)
    doing = f"while exporting {variant.artifact_id}"
    try:
        child.send(("export", spec, variant, threads))  # waits for a fresh child's imports first
        deadline = _deadline(limits.export_s)
        while True:
            message = child.receive(deadline)
            if message is TIMEOUT:
                pool.discard(child)
                return ExportOutcome(variant.id, failure=f"timed out after {limits.export_s:g} s {doing} "
                                                         "(limits.export_s)")
            if message[0] == "log":
                _relog(message)
                continue
            outcome = _export_reply(message, variant, limits, seconds)
            pool.release(child)
            return outcome
    except ChildDied:
        failure = f"the process {child.cause()} {doing}{memory_note(limits, child.process.returncode)}"
        pool.discard(child)
        return ExportOutcome(variant.id, failure=failure)


def _export_reply(message: tuple[Any, ...], variant: Any, limits: ChildLimits,
                  seconds: dict[str, float]) -> ExportOutcome:
    if message[0] == "interrupted":
        raise KeyboardInterrupt
    if message[0] == "error":
        return ExportOutcome(variant.id, failure=f"the export process failed: {message[1]}")
    outcome: ExportOutcome = message[1]
    _add(seconds, message[2])
    oom = out_of_memory(outcome.failure, limits)
    return ExportOutcome(outcome.variant_id, failure=oom, built_key=outcome.built_key) if oom else outcome


def measure_group(pool: ChildPool, spec: WorkSpec, group: list[Any], limits: ChildLimits,
                  on_stage: Callable[[str, str], None] | None = None,
                  on_started: Callable[[Any], None] | None = None,
                  seconds: dict[str, float] | None = None, threads: int | None = None) -> Iterator[Finished]:
    """Export (or fetch) one artifact and measure its variants in a child, one at a time (`threads`: the
    child's thread count while it works, when it shares the cores with other children).

    A child that dies or runs out of time while loading or exporting fails every variant left; one
    that dies while measuring a variant fails that variant, and the rest go on in a fresh child.
    """
    stage = on_stage or (lambda subject, name: None)
    remaining = list(group)
    while remaining:
        child = pool.acquire(limits.memory_bytes)
        current: Any = None
        doing, limit_name = "while starting", "export_s"
        started, t0 = utc_now(), time.perf_counter()
        cause: str
        try:
            child.send(("measure", spec, remaining, None, threads))  # waits for a fresh child's imports first
            doing, deadline, started, t0 = ("while loading the model", _deadline(limits.export_s), utc_now(),
                                            time.perf_counter())
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
                    oom = out_of_memory(record.error, limits)
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
                    cause = f"the measurement process failed: {message[1]}"
                    break
        except ChildDied:
            cause = f"the process {child.cause()} {doing}{memory_note(limits, child.process.returncode)}"
            pool.discard(child)
        failed = [current] if current is not None else list(remaining)
        for variant in failed:
            yield Finished(failed_record(variant, "failed", cause, started=started, t0=t0))
        remaining = [v for v in remaining if v not in failed]
