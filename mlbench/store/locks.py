"""One lock file per cache key (`<cache>/locks/<key>.lock`, `flock`): held while a process computes an entry
that others would otherwise compute at the same time (`derived.py`), and removed when it is done. The kernel
drops a lock when its process dies, however it dies, so a crash never leaves one held (only its file, which the
next holder or `cache clear` removes). Where `fcntl` is missing (Windows), or the file cannot
be made (a read-only cache), nothing is locked."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlbench.errors import UserError
from mlbench.store.entry import LOCKS_DIR

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("mlbench.store.derived")
POLL_S = 0.05


@contextmanager
def entry_lock(cache: Any, key: str, wait_s: float, what: str) -> Iterator[bool]:
    """Hold the lock of `key` in `cache` (an `ArtifactCache`) inside: True, or False where none could be had (no
    locks here, a read-only cache, or a holder busy past `wait_s`: the caller goes on without it, saying so).

    The holder removes the file before it lets go, so no lock file outlives its computation; a waiter that then
    gets the lock of a removed file opens the new one (the same check `pins.py` makes)."""
    fd: int | None = _open(cache, key)
    if fd is None:
        yield False
        return
    path = cache.root / LOCKS_DIR / f"{key}.lock"
    deadline, said, held = time.monotonic() + wait_s, False, False
    try:
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, path):
                    held = True
                    break
                os.close(fd)  # the holder removed it: lock the file there now
                fd = _open(cache, key)
                continue
            except BlockingIOError:
                pass
            except OSError:  # a filesystem without locks
                break
            if not said:
                log.info("waiting for another process computing %s", what)
                said = True
            if time.monotonic() > deadline:
                log.warning("another process has been computing %s for %g s; computing it here too", what, wait_s)
                break
            time.sleep(POLL_S)
        yield held
    finally:
        if fd is not None:
            if held:
                path.unlink(missing_ok=True)  # while still held: a waiter sees it gone and opens a new one
            os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.lstat(path).st_ino
    except OSError:
        return False


def _open(cache: Any, key: str) -> int | None:
    if fcntl is None:
        return None
    folder = cache.root / LOCKS_DIR
    try:
        cache.claim(create=True)
        if folder.is_symlink():  # never write through a link out of the cache
            folder.unlink()
        folder.mkdir(exist_ok=True)
        return os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except (OSError, UserError):
        return None


def clear_locks(root: Path) -> None:
    """Remove the lock files nobody holds (`cache clear`: one left by a process that died); a held one stays,
    its computation under way."""
    folder = root / LOCKS_DIR
    if folder.is_symlink():
        folder.unlink()
        return
    if fcntl is None or not folder.is_dir():
        return
    for path in folder.iterdir():
        if not path.name.endswith(".lock") or path.is_symlink():
            continue
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            os.close(fd)
    try:
        folder.rmdir()
    except OSError:
        pass
