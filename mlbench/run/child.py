"""The child process that runs user models for a coordinator: `python -m mlbench.run.child FD LIFELINE MEMORY [WARMUPS]`.

Everything that imports, builds, exports or calls a user's model happens here, never in the
coordinator, so a model that segfaults, calls `os._exit`, hangs or eats memory costs this process
only (`mlbench/run/supervisor.py` notices, fails the variant it was working on, and starts another).

Protocol over the connection FD (pickles framed by `multiprocessing.connection`), one request at a
time, after the child says ("ready",) once its imports are done (so no time limit pays for them):

    → ("export", WorkSpec, Variant, threads | None)   ← ("done", ExportOutcome, stage_seconds)
    → ("measure", WorkSpec, [Variant], failure | None, threads | None)
                                                       ← ("stage", subject, stage)* interleaved with
                                                         ("finished", record JSON, artifact)*, then
                                                         ("done", None, stage_seconds)
    → ("counts", WorkSpec, {model})                 ← ("done", {model: parameters}, {})  (export order)
    → ("exit",)
    ← ("error", message) when a request itself fails; ← ("interrupted",) on KeyboardInterrupt;
    ← ("log", logger, level, text) at any time: mlbench's warnings, said again by the coordinator.

A measurement runs exactly as it would in the coordinator: the same `run_group`, the same timing
loop, one variant at a time; the parent only waits on the pipe meanwhile (no polling here).

The child dies with its coordinator: it holds the read end of a pipe whose only write end the
coordinator holds, and a thread blocked on it (no polling) exits the process at end-of-file.
WARMUPS (comma-separated `BackendSpec.warmups`: a converter's quiet import, or a package name) are
done after torch's import and before ("ready",), so a child started while the coordinator orders
the exports has paid for them by the time its first export arrives.
MEMORY > 0 caps what it may allocate, in bytes (Linux: RLIMIT_DATA, which counts the heap and
anonymous mappings but not the shared libraries torch maps; elsewhere RLIMIT_AS, which macOS
does not enforce).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

EXIT_ORPHANED = 86
"""Exit code of a child whose coordinator died."""


def _watch_lifeline(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:  # every write end is closed: the coordinator is gone
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
        outcome = export_task(spec, variant, threads)
        conn.send(("done", outcome, _take_seconds(worker_context(spec))))
    elif kind == "measure":
        from mlbench.run.threads import limited_threads

        _, spec, group, failure, threads = message
        ctx = worker_context(spec)

        def stage(subject: str, name: str) -> None:
            conn.send(("stage", subject, name))

        with limited_threads(threads):
            for finished in run_group(ctx, group, stage, export_failure=failure):
                conn.send(("finished", finished.record.model_dump(mode="json"), finished.artifact))
        conn.send(("done", None, _take_seconds(ctx)))
    elif kind == "counts":  # builds the user's models on the meta device: here, never in the coordinator
        from mlbench.run.schedule import model_sizes

        _, spec, models = message
        ctx = worker_context(spec)
        conn.send(("done", model_sizes(ctx.config, ctx.base_dir, models), {}))
    else:
        raise ValueError(f"unknown request {kind!r}")


def _take_seconds(ctx: Any) -> dict[str, float]:
    """The stage seconds spent since the last report (the coordinator adds them up)."""
    taken = dict(ctx.stage_seconds)
    for name in ctx.stage_seconds:
        ctx.stage_seconds[name] = 0.0
    return taken


def serve(conn: Any) -> None:
    from mlbench.errors import short_error

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
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


def main(argv: list[str]) -> None:
    from multiprocessing.connection import Connection

    conn_fd, lifeline_fd, memory = (int(a) for a in argv[:3])
    warmups = [p for p in argv[3].split(",") if p] if len(argv) > 3 else []
    threading.Thread(target=_watch_lifeline, args=(lifeline_fd,), daemon=True, name="lifeline").start()
    if memory > 0:
        limit_memory(memory)
    conn = Connection(conn_fd)
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
    serve(conn)


if __name__ == "__main__":  # pragma: no cover - run as a process; tests drive it through the supervisor
    main(sys.argv[1:])
