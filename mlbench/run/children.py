"""The child processes that run user models (`mlbench/run/child.py`), as the coordinator holds them.

A child is started from one long-lived thread of this process, because Linux's parent-death signal
(which the child asks for first thing) follows the *thread* that forked it, and the pool's own threads
come and go. It leads a process group of its own: a kill (a time limit, a bad message, a failed
request) takes whatever its model started too. `supervisor.py` sends it requests under time limits.

Children are kept between requests (torch is imported once per child, the last model stays built),
one pool per coordinator; a child's memory limit is fixed when it starts, so a request needing
another limit gets another child. On Linux a child that times nothing is forked from a zygote that has done
those imports (`zygote.py`, one per warmups; `TIME_IN_FORKED_CHILDREN`); spawning is the fallback whenever the zygote cannot serve, and the only
way with MLBENCH_NO_FORK_SERVER=1.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mlbench.errors import exit_cause
from mlbench.run.frames import TIMEOUT, BadFrame, Channel, ChannelClosed
from mlbench.run.scratch import remove_child_folder, remove_orphans, track_child
from mlbench.run.zygote import ForkedProcess, Zygote, ZygoteUnavailable, fork_server_enabled

log = logging.getLogger("mlbench.run")

TIME_IN_FORKED_CHILDREN = False
"""Whether a child that times calls (a "measure" request) may be one forked by the fork server. Not yet: in
`benchmarks/harness_overhead.py` (100 rounds, mobilenet_v3_small, 2026-12-05) a forked child's timed median
read 1.019 and 1.012 of the bare loop's where a spawned one read 0.980 in the same session, a difference a
benchmarking tool must not carry into its figures until it is settled. Exports, model counts and memory rounds
time nothing: they are forked."""
STARTUP_S = 600.0
"""How long a child may take to import what it needs before its first request."""
LOADING = "while loading the model"


class ChildDied(Exception):
    """The child's channel closed (it exited or was killed), or carried bytes that are not a message
    (`garbled`: what was wrong)."""

    def __init__(self, garbled: str | None = None) -> None:
        super().__init__(garbled or "")
        self.garbled = garbled


class _Spawner:
    """Starts processes from one daemon thread that lives as long as this process (see the module docstring)."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[list[str], dict[str, Any], list[Any], threading.Event]] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="mlbench-spawner", daemon=True)
                self._thread.start()
        box: list[Any] = []
        done = threading.Event()
        self._requests.put((argv, kwargs, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _serve(self) -> None:
        while True:
            argv, kwargs, box, done = self._requests.get()
            try:
                box.append(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - raised again in the asking thread
                box.append(exc)
            done.set()


_SPAWNER = _Spawner()


def _child_env() -> dict[str, str]:
    """This environment, with the folder this mlbench was imported from first on the path."""
    import mlbench

    root = str(Path(mlbench.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


class Child:
    """One child process and the two ends the coordinator holds: the request pipe and the lifeline."""

    def __init__(self, memory_bytes: int = 0, warmups: tuple[str, ...] = (), zygote: Zygote | None = None) -> None:
        self.spawned = time.perf_counter()
        self.startup_s = 0.0  # from spawn to ("ready",): the interpreter and its imports
        self.server_wait_s = 0.0  # the part of it spent waiting for the fork server's start (counted as that)
        self.memory_bytes = memory_bytes
        self.warmups = warmups
        self._start(zygote)
        self.busy = False
        self.ready = False
        self.model: str | None = None  # the model it last worked on (it keeps it built: `tasks.WorkContext`)

    def _start(self, zygote: Zygote | None) -> None:
        """Fork it from `zygote` (answered later: its imports may still be running), else spawn it."""
        parent_end, child_end = socket.socketpair()
        lifeline_read, self._lifeline = os.pipe()  # the child exits when this write end closes
        try:
            process: subprocess.Popen[bytes] | ForkedProcess | None = None
            if zygote is not None:
                try:
                    process = zygote.fork(child_end.fileno(), lifeline_read, self.memory_bytes)
                except ZygoteUnavailable:
                    pass
            if process is None:
                process = _SPAWNER.popen(
                    [sys.executable, "-m", "mlbench.run.child", str(os.getpid()), str(child_end.fileno()),
                     str(lifeline_read), str(self.memory_bytes), ",".join(self.warmups)],
                    pass_fds=(child_end.fileno(), lifeline_read), stdin=subprocess.DEVNULL,
                    stdout=2,  # a model's prints go to stderr, never into a report piped from stdout
                    env=_child_env(), start_new_session=True,  # its own process group: a kill takes its children
                )
        except BaseException:  # any failure, Ctrl-C included: the pipe ends close, and it re-raises
            parent_end.close()
            os.close(self._lifeline)
            raise
        finally:
            child_end.close()
            os.close(lifeline_read)
        self.process: subprocess.Popen[bytes] | ForkedProcess = process
        self.conn = Channel(parent_end.detach())

    def wait_ready(self) -> None:
        """Wait for the child's imports (outside any time limit); ChildDied if it never gets there."""
        if not self.ready:
            try:
                message = self.receive(time.monotonic() + STARTUP_S)
            except ChildDied as died:
                if died.garbled is not None or not isinstance(self.process, ForkedProcess):
                    raise
                self.process.resolve()  # answered: the zygote closed its copy of the channel, or it died
                self.kill()  # a forked child that never said ready: the zygote's doing, whatever it was
                log.debug("a child forked by the fork server ended before it was ready (%s): spawning one",
                          self.process.failed or f"exit status {self.process.returncode}")
                self._start(None)
                message = self.receive(time.monotonic() + STARTUP_S)
            if message is TIMEOUT or message[0] != "ready":
                self.kill()
                raise ChildDied("a first message that is not ready" if message is not TIMEOUT else None)
            self.ready = True
            track_child(self.process.pid)  # its temporary folder is made by now (`scratch.py`)
            now = time.perf_counter()
            self.startup_s = now - self.spawned
            if isinstance(self.process, ForkedProcess) and (at := self.process.server_ready_at()) is not None:
                self.server_wait_s = max(0.0, min(at, now) - self.spawned)

    def send(self, message: tuple[Any, ...]) -> None:
        self.wait_ready()
        try:
            self.conn.send(message)
        except OSError:
            raise ChildDied from None

    def receive(self, deadline: float | None) -> Any:
        """The next message, TIMEOUT once `deadline` (time.monotonic) passes, ChildDied if it died or
        sent bytes that are not a message."""
        try:
            return self.conn.receive(deadline)
        except ChannelClosed:
            raise ChildDied from None
        except BadFrame as exc:
            raise ChildDied(str(exc)) from None

    def cause(self, died: ChildDied, doing: str) -> str:
        """Why the child failed, on one line: `the process was killed by SIGSEGV (…) while measuring`."""
        if died.garbled:
            self.kill()
            return (f"the process wrote bytes that are not mlbench's messages to its channel ({died.garbled}) "
                    f"{doing}: did the model write to a file descriptor it does not own?")
        return f"the process {self._ended()} {doing}"

    def _ended(self) -> str:
        """How the child ended, after its pipe closed: `was killed by SIGSEGV (…)`, `exited with code 3`."""
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return "closed its pipe and stopped answering"
        return exit_cause(self.process.returncode)

    def kill(self) -> None:
        """Kill the child and its process group (what its model started), and reap it."""
        pid = self.process.pid  # a forked child's: None when it was never forked
        if pid is not None and pid > 1:  # never 0 or 1: killpg would reach this process's group, or all
            try:
                os.killpg(pid, signal.SIGKILL)  # the group outlives its leader while a member lives
            except (ProcessLookupError, PermissionError):
                pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        remove_child_folder(self.process.pid)  # what the converters left there: a killed child removed nothing
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


def _close_all(children: list[Child], zygotes: list[Zygote] | None = None) -> None:
    for child in children:
        child.close()
    for zygote in zygotes or []:  # after the children: those it forked die with it
        zygote.close()


def _close_in_background(children: list[Child], zygotes: list[Zygote] | None = None) -> None:
    """An interpreter holding torch and a converter takes a second or two to exit: let it, off the
    run's critical path (the lifeline still ends a child whose coordinator exits first)."""
    if children or zygotes:
        threading.Thread(target=_close_all, args=(children, zygotes), name="mlbench-children-exit",
                         daemon=True).start()


class ChildPool:
    """The children of one coordinator (or Dask worker): started on demand, reused while alive."""

    def __init__(self) -> None:
        remove_orphans()  # the folders of children killed with their coordinator, on an earlier run
        self.children: list[Child] = []
        self._ended_startup_s = 0.0
        self._ended_starts: list[tuple[float, float]] = []  # (spawned, ready) of the children forgotten
        self._lock = threading.RLock()  # the parallel phase's threads take and return children at once
        self._zygotes: dict[tuple[str, ...], Zygote] = {}  # warmups → the fork server of their children
        self.load_failures: dict[str, str] = {}
        """model name → why it could not be loaded, said once (the supervisor fails its other artifacts at once)"""

    def _zygote_starts(self) -> list[tuple[float, float]]:
        return [span for z in self._zygotes.values() if (span := z.start_span()) is not None]

    def startup_seconds(self) -> float:
        """Seconds every child and fork server so far spent starting (summed: children started together overlap; a
        forked child's wait for its fork server's start counts once, as the server's)."""
        return (self._ended_startup_s + sum(c.startup_s - c.server_wait_s for c in self.children)
                + sum(end - begin for begin, end in self._zygote_starts()))

    def startup_wall_seconds(self) -> float:
        """Wall seconds during which at least one child or fork server was starting (at once: counted once)."""
        spans = sorted([*self._ended_starts, *self._zygote_starts(),
                        *((c.spawned, c.spawned + c.startup_s) for c in self.children if c.startup_s)])
        total, reach = 0.0, float("-inf")
        for begin, end in spans:
            if end > reach:
                total += end - max(begin, reach)
                reach = end
        return total

    def _forget(self, child: Child) -> None:
        with self._lock:
            if child in self.children:
                self._ended_startup_s += child.startup_s - child.server_wait_s
                if child.startup_s:
                    self._ended_starts.append((child.spawned, child.spawned + child.startup_s))
                self.children.remove(child)

    def acquire(self, memory_bytes: int, model: str | None = None, *, timing: bool = False) -> Child:
        """An idle live child with this memory limit, the one that last worked on `model` first (it holds the
        model built: a worker serves every variant of a model), else a new one. A child that will time calls
        (`timing`) is a spawned one unless `TIME_IN_FORKED_CHILDREN` says otherwise."""
        spawned_only = timing and not TIME_IN_FORKED_CHILDREN
        with self._lock:
            idle = [c for c in self.children
                    if not c.busy and c.memory_bytes == memory_bytes and c.process.poll() is None
                    and not (spawned_only and isinstance(c.process, ForkedProcess))]
            if idle:
                child = next((c for c in idle if model is not None and c.model == model), idle[0])
            else:
                child = self._start(memory_bytes, spawn=spawned_only)
            child.busy = True
            if model is not None:
                child.model = model
            return child

    def fresh(self, memory_bytes: int) -> Child:
        """A new child, busy at once: one that measured nothing before (a memory round's)."""
        with self._lock:
            child = self._start(memory_bytes)
            child.busy = True
            return child

    def prestart(self, count: int, memory_bytes: int, warmups: tuple[str, ...] = ()) -> None:
        """Start up to `count` idle children now, each importing torch and doing `warmups`, so their imports
        overlap with each other and with whatever the coordinator does meanwhile (ordering the exports)."""
        with self._lock:
            idle = [c for c in self.children if not c.busy and c.memory_bytes == memory_bytes]
            for _ in range(count - len(idle)):
                self._start(memory_bytes, warmups)
            self._zygote(())  # the measuring child's and the memory rounds': its imports overlap too

    def _zygote(self, warmups: tuple[str, ...]) -> Zygote | None:
        """The fork server for children doing `warmups`, started on first use; None where children are spawned
        (not Linux, MLBENCH_NO_FORK_SERVER=1, or it was lost or could not start)."""
        if not fork_server_enabled():
            return None
        with self._lock:
            if warmups not in self._zygotes:
                try:
                    self._zygotes[warmups] = Zygote(warmups, _SPAWNER.popen, _child_env())
                except OSError as exc:
                    log.debug("the fork server could not start (%s): children are spawned", exc)
                    return None
            zygote = self._zygotes[warmups]
            return zygote if zygote.usable else None

    def _start(self, memory_bytes: int, warmups: tuple[str, ...] = (), spawn: bool = False) -> Child:
        child = Child(memory_bytes, warmups, None if spawn else self._zygote(warmups))
        self.children.append(child)
        return child

    def _take_zygotes(self) -> list[Zygote]:
        """Forget the fork servers (their start stays counted) for the caller to close."""
        with self._lock:
            zygotes = list(self._zygotes.values())
            for begin, end in self._zygote_starts():
                self._ended_startup_s += end - begin
                self._ended_starts.append((begin, end))
            self._zygotes.clear()
        return zygotes

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
        """Forget every child and let the idle ones exit while the caller goes on (writing the reports); one
        still busy (the run was interrupted, or failed) is killed now, with what its model started."""
        with self._lock:
            children = list(self.children)
        for child in children:
            self._forget(child)
            if child.busy:
                child.kill()
        _close_in_background([c for c in children if not c.busy], self._take_zygotes())

    def close(self) -> None:
        for child in list(self.children):
            child.close()
            self._forget(child)
        _close_all([], self._take_zygotes())
