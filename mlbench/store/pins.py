"""Entries in use are pinned: the process that found an entry (to measure it) holds a shared `flock` on its
meta.json until its work on the entry is done, and `cache clear` / `cache prune` skip an entry they cannot lock
exclusively, saying how many they kept. The kernel drops a pin when its process dies, however it dies.

Where `fcntl` is missing (Windows), or the filesystem has no locks, nothing is pinned and nothing is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlbench.store.entry import META_NAME

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

IN_USE = -1
"""What `lock_for_removal` returns for an entry another process has pinned."""


def _open(entry_dir: Path) -> int | None:
    try:
        return os.open(entry_dir / META_NAME, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None


def pin(entry_dir: Path) -> int | None:
    """A descriptor holding a shared lock on the entry (close it to unpin); None when the entry went away meanwhile
    (an eviction that held it renamed it into tmp/: the caller treats it as a miss) or nothing can be locked here."""
    if fcntl is None:
        return None
    fd = _open(entry_dir)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits for an eviction in progress, which then moved it away
        if os.fstat(fd).st_ino != os.lstat(entry_dir / META_NAME).st_ino:
            raise FileNotFoundError
    except OSError:
        os.close(fd)
        return None
    return fd


def lock_for_removal(entry_dir: Path) -> int | None:
    """A descriptor holding an exclusive lock (close it after the removal), IN_USE when a run has the entry
    pinned, None when there is nothing to lock (no meta.json, no locks here): remove it as before."""
    if fcntl is None:
        return None
    fd = _open(entry_dir)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return IN_USE
    except OSError:
        os.close(fd)
        return None
    return fd
