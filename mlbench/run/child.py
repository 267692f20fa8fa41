"""The child process that runs user models for a coordinator: `python -m mlbench.run.child PARENT FD LIFELINE MEMORY [WARMUPS]`.

Everything that imports, builds, exports or calls a user's model happens here, never in the
coordinator, so a model that segfaults, calls `os._exit`, hangs or eats memory costs this process
only (`mlbench/run/supervisor.py` notices, fails the variant it was working on, and starts another).

Protocol over the socket FD (pickles in checked frames, `mlbench/run/frames.py`: bytes a model writes
to a descriptor it does not own fail the work in hand, never the sweep), one request at a time,
after the child says ("ready",) once its imports are done (so no time limit pays for them):

    → ("export", WorkSpec, Variant, threads | None)   ← ("stage", subject, "load" | "export")*, then
                                                         ("done", ExportOutcome, stage_seconds, peak)
    → ("measure", WorkSpec, [Variant], failure | None, threads | None)
                                                       ← ("stage", subject, stage)* interleaved with
                                                         ("finished", record JSON, artifact, peak)*, then
                                                         ("done", None, stage_seconds)
    → ("memory", WorkSpec, [Variant], threads | None) ← ("done", {variant id: {metric: Metric JSON}}, {})
                                                         (`memory.rounds`: one more round, in a fresh child)
    → ("counts", WorkSpec, {model})                 ← ("stage", model, "load")* (each model as it is built),
                                                         ("done", {model: size}, {})  (export order)
    → ("exit",)
    ← ("error", message) when a request itself fails; ← ("interrupted",) on KeyboardInterrupt;
    ← ("log", logger, level, text) at any time: mlbench's warnings, said again by the coordinator.
peak: beside a failure, the child's peak resident memory in bytes (`memory.own_peak`; None otherwise), which
the message of a failure over `limits.memory_gb` gives.

A measurement runs exactly as it would in the coordinator: the same `run_group`, the same timing
loop, one variant at a time; the parent only waits on the pipe meanwhile (no polling here).

The child dies with its coordinator (PARENT, the pid that started it): on Linux the kernel kills it
when the thread that started it ends (`PR_SET_PDEATHSIG`, set first thing, then a check that PARENT is
still its parent, for a coordinator that died before that); everywhere, it holds the read end of a
pipe whose only write end the coordinator holds, and a thread blocked on it (no polling) exits the
process at end-of-file (which needs the GIL: a model spinning in C code holding it would outlive its
coordinator but for the kernel's signal). The supervisor starts it in a process group of its own, so
a kill for a time limit takes whatever the model started too. The socket and the lifeline are not
inherited by the processes a model starts.
On Linux a child that times nothing (exports, model counts, memory rounds) is forked from a zygote
(`zygote.py`) that has done the imports below: it runs
`run_child` as `main` does, PARENT being the zygote (which dies with the coordinator).
WARMUPS (comma-separated `BackendSpec.warmups`: a converter's quiet import, or a package name) are
done after torch's import and before ("ready",), so a child started while the coordinator orders
the exports has paid for them by the time its first export arrives.
MEMORY > 0 caps what it may allocate, in bytes (Linux: RLIMIT_DATA, which counts the heap and
anonymous mappings but not the shared libraries torch maps; elsewhere RLIMIT_AS, which macOS
does not enforce).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any

EXIT_ORPHANED = 86
"""Exit code of a child whose coordinator died."""
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int) -> None:
    """Exit now if `parent` is no longer this process's parent; on Linux, have the kernel kill this process
    when it goes (a signal, not a thread: it works while a model holds the GIL in C code)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the lifeline still ends an orphan
            pass
    if os.getppid() != parent:  # the coordinator died before the signal was set: too late to be told
        os._exit(EXIT_ORPHANED)


def _watch_lifeline(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:  # every write end is closed: the coordinator is gone
            from mlbench.run.scratch import remove_own

            remove_own()
            os._exit(EXIT_ORPHANED)


def limit_memory(nbytes: int) -> None:
    """Cap this process's allocations at `nbytes` (see the module docstring for which limit)."""
    import resource

    kind = resource.RLIMIT_DATA if sys.platform.startswith("linux") else resource.RLIMIT_AS
    _soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        nbytes = min(nbytes, hard)
    resource.setrlimit(kind, (nbytes, hard))


def _handle(conn: Any, message: tuple[Any, ...]) -> None:
    from mlbench.run.tasks import export_task, run_group, worker_context

    kind = message[0]
    if kind == "export":
        _, spec, variant, threads = message
        outcome = export_task(spec, variant, threads, lambda subject, name: conn.send(("stage", subject, name)))
        conn.send(("done", outcome, _take_seconds(worker_context(spec)), _peak_if(outcome.failure)))
    elif kind == "measure":
        from mlbench.run.threads import limited_threads

        _, spec, group, failure, threads = message
        ctx = worker_context(spec)

        def stage(subject: str, name: str) -> None:
            conn.send(("stage", subject, name))

        with limited_threads(threads):
            for finished in run_group(ctx, group, stage, export_failure=failure):
                conn.send(("finished", finished.record.model_dump(mode="json"), finished.artifact,
                           _peak_if(finished.record.error)))
        conn.send(("done", None, _take_seconds(ctx)))
    elif kind == "memory":  # one more memory round per variant, in a child that measured nothing before
        from mlbench.run.tasks import memory_round
        from mlbench.run.threads import limited_threads

        _, spec, group, threads = message
        with limited_threads(threads):
            conn.send(("done", memory_round(worker_context(spec), group), {}))
    elif kind == "counts":  # builds the user's models on the meta device: here, never in the coordinator
        from mlbench.run.schedule import model_sizes

        _, spec, models = message
        ctx = worker_context(spec)
        sizes = model_sizes(ctx.config, ctx.base_dir, models, lambda name: conn.send(("stage", name, "load")))
        conn.send(("done", sizes, {}))
    else:
        raise ValueError(f"unknown request {kind!r}")


def _peak_if(error: str | None) -> int | None:
    """This process's peak resident memory beside a failure (the limit's message gives it), else None."""
    from mlbench.memory import own_peak

    return own_peak() if error else None


def _take_seconds(ctx: Any) -> dict[str, float]:
    """The stage seconds spent since the last report (the coordinator adds them up)."""
    taken = dict(ctx.stage_seconds)
    for name in ctx.stage_seconds:
        ctx.stage_seconds[name] = 0.0
    return taken


def serve(conn: Any) -> None:
    from mlbench.errors import short_error
    from mlbench.run.frames import BadFrame, ChannelClosed

    while True:
        try:
            message = conn.receive()
        except (ChannelClosed, BadFrame):
            return
        if message[0] == "exit":
            return
        try:
            _handle(conn, message)
        except KeyboardInterrupt:
            conn.send(("interrupted",))
        except Exception as exc:  # noqa: BLE001 - the coordinator fails the work in hand with this line
            conn.send(("error", short_error(exc)))


def _forward_logs(conn: Any) -> None:
    """mlbench's warnings (a corrupt cache entry rebuilt...) go to the coordinator, which logs them as its own."""
    import logging

    class Forward(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                conn.send(("log", record.name, record.levelno, record.getMessage()))
            except Exception:  # noqa: BLE001 - a warning is never worth a failed measurement
                self.handleError(record)

    logger = logging.getLogger("mlbench")
    logger.addHandler(Forward())
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def run_child(parent: int, conn_fd: int, lifeline_fd: int, memory: int, warmups: list[str]) -> None:
    """Everything a child does once it runs, spawned (`main`) or forked from a zygote (`zygote.py`, whose
    imports make those below no-ops): tied to PARENT, its descriptors its own, its memory capped."""
    from mlbench.run.frames import Channel
    from mlbench.run.scratch import remove_own, use_own_folder

    die_with_parent(parent)
    use_own_folder()  # the converters' temporary files, removed when this process ends (`scratch.py`)
    for fd in (conn_fd, lifeline_fd):  # a process the model starts must not hold them
        os.set_inheritable(fd, False)
    threading.Thread(target=_watch_lifeline, args=(lifeline_fd,), daemon=True, name="lifeline").start()
    if memory > 0:
        limit_memory(memory)
    conn = Channel(conn_fd)
    _forward_logs(conn)
    import mlbench.run.tasks  # noqa: F401 - imported before the first request, outside its time limit

    try:
        import torch  # noqa: F401 - every built-in source builds a torch model
    except ImportError:
        pass
    if warmups:
        from mlbench.run.tasks import warm_task

        warm_task(warmups)  # what fails here, the export says why
    conn.send(("ready",))
    try:
        serve(conn)
    finally:
        remove_own()


def main(argv: list[str]) -> None:
    parent, conn_fd, lifeline_fd, memory = (int(a) for a in argv[:4])
    run_child(parent, conn_fd, lifeline_fd, memory, [p for p in argv[4].split(",") if p] if len(argv) > 4 else [])


if __name__ == "__main__":  # pragma: no cover - run as a process; tests drive it through the supervisor
    main(sys.argv[1:])
