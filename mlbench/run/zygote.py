"""The fork server ("zygote"): one process per (coordinator, warmups) that has imported what a child
imports (`mlbench.run.tasks`, torch, the warmups) and forks a new child on request in milliseconds,
where a spawned child pays seconds of imports (`python -m mlbench.run.zygote PARENT CONTROL_FD [WARMUPS]`).

Every isolation guarantee of `children.py` and `child.py` holds for a forked child too:
- the zygote is started from the coordinator's spawner thread and dies with the coordinator
  (`die_with_parent`, and end-of-file on its control socket, which only the coordinator holds);
- a forked child calls `os.setsid()` (its own process group: a kill takes what its model started), sets
  the parent-death signal itself (its parent is the zygote, which dies with the coordinator), and
  watches the coordinator's lifeline pipe, passed to it with its channel's socket (SCM_RIGHTS);
- its memory limit is set in the child, per child (`child.run_child`, as a spawned child does);
- the zygote reaps its children and reports each exit status back, so the coordinator's failure messages
  (`exit_cause`: "killed by SIGSEGV", "exited with code 3") come out as they do for a spawned child.

Forking is safe only while the zygote has a single thread: nothing here starts one or runs a torch op,
and the zygote checks before each fork (Python's threads, and no native thread beyond those its imports
left: OpenBLAS's pool, which numpy starts at import, stops itself around a fork). A zygote whose
warmups start threads (onnxruntime's import does) says it is unfit, and spawns each child it is asked
for (`python -m mlbench.run.child`, posix_spawn: fork-then-exec is safe with threads) as the coordinator
would, at once, still its parent and reporter. One that cannot start, dies or answers garbage only sends
the coordinator back to spawning (`children.Child`): never a failed variant.

Control protocol (one JSON list per SOCK_SEQPACKET packet): → ["fork", memory] with the child's socket and
lifeline read end as ancillary fds; ← ["ready"] or ["unfit", why] (it spawns) once, then ["forked", pid] or
["failed", why] per request, in order, and ["exited", pid, returncode] as children end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mlbench.run")

DISABLE_ENV = "MLBENCH_NO_FORK_SERVER"
RESOLVE_S = 60.0
"""How long a fork request may stay unanswered once someone needs its pid; then the zygote is given up."""


def fork_server_enabled() -> bool:
    """Linux only (fork after torch's import is tested there), unless MLBENCH_NO_FORK_SERVER=1."""
    return sys.platform.startswith("linux") and os.environ.get(DISABLE_ENV, "") in ("", "0")


class ZygoteUnavailable(Exception):
    """The zygote cannot take a request (unfit, dead, or garbled): spawn instead."""


class ForkedProcess:
    """A child forked by a zygote, as `subprocess.Popen` shows one (pid, poll, wait, kill, returncode); its
    exit status comes from the zygote, which is its parent."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self._pid: int | None = None
        self.failed: str | None = None  # why it was never forked
        self.cancelled = False  # killed before the zygote answered: killed as soon as it does
        self.returncode: int | None = None
        self.args = ["mlbench.run.zygote", "fork"]

    def resolve(self) -> int | None:
        """Its pid once the zygote answered the request (None: never forked); for a caller that knows the answer
        is due (the zygote closed its copy of the child's channel), else the zygote is given up after RESOLVE_S."""
        with self._zygote.cond:
            if not self._zygote.cond.wait_for(lambda: self._pid is not None or self.failed is not None, RESOLVE_S):
                self._zygote.abandon(f"no answer to a fork request in {RESOLVE_S:g} s")
        return self._pid

    def server_ready_at(self) -> float | None:
        """When its zygote was ready (perf_counter), if it was: a child asked for earlier waited for that."""
        return self._zygote.ready_at

    @property
    def pid(self) -> int | None:
        """None until the zygote answered (never waits: a kill must not wait for the zygote's imports)."""
        return self._pid

    def poll(self) -> int | None:
        """None while it runs, and for a child never forked: `Child.wait_ready` spawns that one instead."""
        return None if self.failed is not None else self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._zygote.cond:
            if not self._zygote.cond.wait_for(lambda: self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        with self._zygote.cond:
            if self.returncode is not None:
                return
            if self._pid is None:  # not forked yet: it will be killed on arrival, and is dead to the caller now
                self.cancelled, self.returncode = True, -signal.SIGKILL
                self._zygote.cond.notify_all()
                return
            pid = self._pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class Zygote:
    """The coordinator's side of one zygote: started at once, its imports overlapping whatever the caller
    does; fork requests queue until it is ready. A reader thread takes its answers."""

    def __init__(self, warmups: tuple[str, ...], popen: Callable[..., subprocess.Popen[bytes]],
                 env: dict[str, str]) -> None:
        self.warmups = warmups
        self.spawned = time.perf_counter()
        self.ready_at: float | None = None
        self.cond = threading.Condition()
        self.usable = True
        self._pending: deque[ForkedProcess] = deque()
        self._children: dict[int, ForkedProcess] = {}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = popen(
                [sys.executable, "-m", "mlbench.run.zygote", str(os.getpid()), str(theirs.fileno()),
                 ",".join(warmups)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=2, env=env,
                start_new_session=True)  # a Ctrl-C for the coordinator's group is not the zygote's
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        threading.Thread(target=self._read, name="mlbench-zygote-reader", daemon=True).start()

    def fork(self, conn_fd: int, lifeline_fd: int, memory_bytes: int) -> ForkedProcess:
        """Ask for a child on these two fds (the caller closes its copies after); answered later."""
        with self.cond:
            if not self.usable:
                raise ZygoteUnavailable
            process = ForkedProcess(self)
            try:
                socket.send_fds(self._sock, [json.dumps(["fork", memory_bytes]).encode()], [conn_fd, lifeline_fd])
            except OSError as exc:
                self.abandon(f"a fork request could not be sent: {exc}")
                raise ZygoteUnavailable from None
            self._pending.append(process)
            return process

    def start_span(self) -> tuple[float, float] | None:
        """(spawned, ready) in perf_counter seconds, once it was ready."""
        return None if self.ready_at is None else (self.spawned, self.ready_at)

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                self.abandon("it closed its socket")
                return
            try:
                message = json.loads(data)
                with self.cond:
                    self._take(message)
                    self.cond.notify_all()
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                self.abandon(f"it sent a message that is not one ({exc})")
                return

    def _take(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "ready":
            self.ready_at = time.perf_counter()
        elif kind == "unfit":  # it spawns the children asked for
            self.ready_at = time.perf_counter()
            log.debug("fork server for warmups %s unfit, it spawns children: %s", self.warmups, message[1])
        elif kind == "forked":
            process = self._pending.popleft()
            process._pid = int(message[1])
            if process.cancelled:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(process._pid, signal.SIGKILL)
            else:
                self._children[process._pid] = process
        elif kind == "failed":
            process = self._pending.popleft()
            process.failed = str(message[1])
            process.returncode = process.returncode or -signal.SIGKILL
            log.debug("fork server could not fork a child: %s", process.failed)
        elif kind == "exited":
            done = self._children.pop(int(message[1]), None)
            if done is not None:
                done.returncode = int(message[2])
        else:
            raise ValueError(f"unknown message {kind!r}")

    def _lose(self, why: str) -> None:
        """No more answers (under `cond`): requests in flight were never forked, and its children die with it
        (their parent-death signal is SIGKILL)."""
        if self.usable:
            log.debug("fork server for warmups %s lost (%s): children are spawned", self.warmups, why)
        self.usable = False
        while self._pending:
            process = self._pending.popleft()
            process.failed, process.returncode = why, -signal.SIGKILL
        for process in self._children.values():
            process.returncode = -signal.SIGKILL
        self._children.clear()
        self.cond.notify_all()

    def abandon(self, why: str) -> None:
        """Give up on a zygote that stopped answering, closed or garbled its socket: kill it (its children die with
        it)."""
        with contextlib.suppress(OSError):
            self.process.kill()  # Popen's: never a pid it has reaped already
        with self.cond:
            self._lose(why)

    def close(self) -> None:
        """End the zygote (its children die with it: close them first) and reap it."""
        with self.cond:
            self.usable = False
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._sock.close()


# The zygote process itself: nothing below may start a thread or run a torch op before a fork.

def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _cuda_initialised() -> bool:
    """A CUDA context does not survive a fork (a warmup that made one leaves the zygote unfit)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without the call: no context made through it
        return False


def _send(sock: socket.socket, *message: Any) -> None:
    try:
        sock.send(json.dumps(list(message)).encode())
    except OSError:  # the coordinator is gone: so are this process and its children
        os._exit(0)


def _become_child(zygote: int, own_fds: list[int], conn_fd: int, lifeline_fd: int, memory: int) -> None:
    """In the forked child: leave the zygote's session, signal handlers and descriptors, then run as a spawned
    child does after its imports (`child.run_child`). Never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in own_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        from mlbench.run.child import run_child

        run_child(zygote, conn_fd, lifeline_fd, memory, [])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - said on stderr, as an uncaught error in a spawned child is
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(code)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, "exited", pid, os.waitstatus_to_exitcode(status))


def _spawn(fds: list[int], memory: int, warmups: str) -> int:
    """A child as the coordinator spawns one (its own session, SIGPIPE as subprocess restores it), on `fds`."""
    for fd in fds:
        os.set_inheritable(fd, True)
    argv = [sys.executable, "-m", "mlbench.run.child", str(os.getpid()), str(fds[0]), str(fds[1]), str(memory),
            warmups]
    return os.posix_spawn(sys.executable, argv, os.environ, setsid=True,
                          setsigdef=[signal.SIGPIPE, signal.SIGXFSZ])


def _fork(sock: socket.socket, own_fds: list[int], fds: list[int], memory: int, threads: int,
          warmups: str) -> None:
    """One fork request: the child runs on `fds` (spawned where forking is unsafe: `threads` < 0 or more threads
    than the zygote had when ready), the zygote closes its copies and says the pid."""
    try:
        if len(fds) != 2:
            _send(sock, "failed", f"{len(fds)} descriptors came with the request, not 2")
            return
        if threads < 0 or threading.active_count() != 1 or _native_threads() > threads:
            _send(sock, "forked", _spawn(fds, memory, warmups))
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            _become_child(zygote, own_fds, fds[0], fds[1], memory)
        _send(sock, "forked", pid)
    finally:
        for fd in fds:
            os.close(fd)


def main(argv: list[str]) -> None:
    from mlbench.run.child import die_with_parent

    parent, control = int(argv[0]), int(argv[1])
    die_with_parent(parent)
    os.set_inheritable(control, False)
    sock = socket.socket(fileno=control)
    import mlbench.run.tasks  # noqa: F401 - what a child imports before its first request

    try:
        import torch  # noqa: F401 - importing is fork-safe; running an op would start its thread pools
    except ImportError:
        pass
    threads = _native_threads()  # OpenBLAS's pool (numpy's import): stopped around a fork by its own handler
    warmups = argv[2] if len(argv) > 2 else ""
    if warmups:
        from mlbench.run.tasks import warm_task

        warm_task([p for p in warmups.split(",") if p])  # what fails here, the export says why
    unfit = threading.active_count() != 1 or _native_threads() > threads or _cuda_initialised()
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so the wakeup fd hears of exits
    signal.set_wakeup_fd(wake_write)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    own_fds = [control, wake_read, wake_write, selector.fileno()]
    if unfit:
        _send(sock, "unfit", f"its imports left {threading.active_count()} Python threads and "
                             f"{_native_threads()} in all, {threads} after torch's import"
                             + (", and a CUDA context" if _cuda_initialised() else ""))
        threads = -1
    else:
        _send(sock, "ready")
    while True:
        for key, _events in selector.select():
            if key.fileobj == wake_read:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_read, 512):
                        pass
                _reap(sock)
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 4)
            except OSError:
                data, fds = b"", []
            if not data:  # the coordinator closed its end, or died: the children die with this process
                os._exit(0)
            try:
                memory = int(json.loads(data)[1])
            except (ValueError, TypeError, IndexError):
                for fd in fds:
                    os.close(fd)
                _send(sock, "failed", "a request that is not one")
                continue
            _fork(sock, own_fds, fds, memory, threads, warmups)


if __name__ == "__main__":  # pragma: no cover - run as a process by `Zygote`
    main(sys.argv[1:])
