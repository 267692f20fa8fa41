"""One run, one journal: a run holds an exclusive lock on its report folder while it writes there.

`fcntl.flock` on `<report dir>/.lock`: the kernel drops it when the process dies, however it dies, so a
`kill -9` never leaves a stale lock. A second run of the same pipeline (or of any pipeline with the
same report folder) is refused with the first one's pid. Where `fcntl` is missing (Windows) there
is no lock.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlbench.errors import UserError, cannot_write

LOCK_NAME = ".lock"


class ReportLock:
    def __init__(self, report_dir: Path) -> None:
        self.path = report_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        from mlbench.run.journal import open_own

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_own(self.path, os.O_RDWR | os.O_CREAT)  # never through a symlink: see open_own
        except OSError as exc:
            raise cannot_write(exc, self.path, "cannot write the run's lock") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip()
            os.close(fd)
            raise UserError(f"another run (pid {holder or '?'}) is writing to {self.path.parent}; wait for it to "
                            "finish, or give this run another report.dir") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk, a read-only folder: one line, exit 3 (nothing else written yet)
            os.close(fd)
            raise cannot_write(exc, self.path, "cannot write the run's lock") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock; the file stays (removing it would race)
            self._fd = None

    def __enter__(self) -> ReportLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
