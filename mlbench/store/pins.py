"""Entries in use are pinned: the process that found an entry (to measure it) holds a shared `flock` on its
meta.json until its work on the entry is done, and `cache clear` / `cache prune` skip an entry they cannot lock
exclusively, saying how many they kept. The kernel drops a pin when its process dies, however it dies.

Where `fcntl` is missing (Windows), or the filesystem has no locks, nothing is pinned and nothing is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlbench.store.entry import META_NAME, CacheEntry

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


class Pins:
    """The entries one cache object has pinned (key → descriptor), and what its last clear or prune kept."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}
        self.kept_in_use = 0

    def hold(self, entry: CacheEntry) -> CacheEntry | None:
        """The entry, pinned until `release()`; None (a miss) when a clear took it away meanwhile."""
        fd = pin(entry.path)
        if fd is None:
            return entry if os.path.lexists(entry.path / META_NAME) else None  # no locks here: as before
        self._keep(entry.key, fd)
        return entry

    def before_publishing(self, key: str, build_dir: Path) -> None:
        """Pin a finished build folder before it is renamed into place as `key`'s entry: the shared lock on its
        meta.json follows the inode through the rename, so no clear can take the entry between its publication and
        its first use (one did: the run's next stat of the artifact failed with FileNotFoundError). `drop(key)`
        when it is not published."""
        fd = pin(build_dir)
        if fd is not None:
            self._keep(key, fd)

    def published(self, entry: CacheEntry) -> CacheEntry:
        """The entry just renamed into place, pinned (`before_publishing`, else now where locks exist)."""
        return entry if entry.key in self._held else (self.hold(entry) or entry)

    def _keep(self, key: str, fd: int) -> None:
        """Hold `fd` as `key`'s pin, in place of any pin held before."""
        self.drop(key)
        self._held[key] = fd

    def drop(self, key: str) -> None:
        if (fd := self._held.pop(key, None)) is not None:
            os.close(fd)

    def release(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()

    @contextmanager
    def for_removal(self, entry_dir: Path) -> Iterator[bool]:
        """True inside while the entry may be removed (locked against new pins); False, counted, when a run
        holds it. This object's own pin never protects the entry from this object's own clear."""
        if (own := self._held.pop(entry_dir.name, None)) is not None:
            os.close(own)
        held = None if entry_dir.is_symlink() else lock_for_removal(entry_dir)
        if held == IN_USE:
            self.kept_in_use += 1
            yield False
            return
        try:
            yield True
        finally:
            if held is not None:
                os.close(held)
