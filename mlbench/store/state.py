"""The cache's stat state: an artifact whose files' inode, size, mtime and ctime are all unchanged
since it was last hashed is not hashed again (dvc's state table, git's index).

A *signature* is the sha256 of every file's ``[path, inode, size, mtime_ns, ctime_ns]`` and every
folder's ``[path]`` under the artifact: a stat walk, milliseconds where hashing a large package
takes seconds. ``state.sqlite`` in the cache root maps each entry's key to the signature its files
had when their content last hashed to the recorded checksum. A lookup whose signature matches
trusts the checksum; anything else (a rewritten, replaced, added or removed file, a ``touch``)
changes the signature and the entry is hashed again.

What a stat cannot see — bytes changed in place with the timestamps put back — ``mlbench cache
verify`` finds by hashing every entry.

Racy writes: a write within the filesystem's timestamp granularity of the hash can leave mtime
unchanged. So a signature is recorded only when every file's mtime is at least ``RACY_NS`` older
than the moment hashing began, and the cache stamps the files it publishes ``BACKDATE_NS`` in the
past: any later write stamps the current time, which then differs from the recorded one.

The database is shared by concurrent runs (WAL, a busy timeout) and never needed: when it cannot
be opened or written (a read-only cache, a network filesystem without locking), every lookup hashes,
as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("mlbench.store.cache")

STATE_NAME = "state.sqlite"
STATE_FILES = (STATE_NAME, f"{STATE_NAME}-wal", f"{STATE_NAME}-shm", f"{STATE_NAME}-journal")
TRUST_STAT_ENV = "MLBENCH_CACHE_TRUST_STAT"  # "0": never trust a stat signature, re-hash on every lookup
RACY_NS = 2_000_000_000  # coarser than any local filesystem's timestamps (FAT: 2 s)
BACKDATE_NS = 2 * RACY_NS
BUSY_TIMEOUT_S = 10.0
_SCHEMA = """CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY,
    signature TEXT NOT NULL,
    checksum TEXT NOT NULL,
    recorded_ns INTEGER NOT NULL
)"""


@dataclass(frozen=True)
class Signature:
    digest: str
    newest_mtime_ns: int


def signature(path: Path) -> Signature | None:
    """The stat signature of a file or folder artifact; None when it holds anything but regular
    files and folders (hashing will say what is wrong) or vanished meanwhile."""
    rows: list[str] = []
    newest = 0

    def add(rel: str, st: os.stat_result) -> None:
        nonlocal newest
        rows.append(f"{rel}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}")
        newest = max(newest, st.st_mtime_ns)

    def walk(folder: str, rel: str) -> bool:
        with os.scandir(folder) as it:
            for entry in it:
                name = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    rows.append(f"{name}/")
                    if not walk(entry.path, name):
                        return False
                elif stat.S_ISREG(st.st_mode):
                    add(name, st)
                else:
                    return False
        return True

    try:
        st = os.stat(path, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            add("", st)
        elif not (stat.S_ISDIR(st.st_mode) and walk(str(path), "")):
            return None
    except OSError:
        return None
    rows.sort()
    return Signature(hashlib.sha256("\n".join(rows).encode("utf-8", "surrogateescape")).hexdigest(), newest)


def backdate(path: Path, now_ns: int | None = None) -> None:
    """Stamp every file and folder of a freshly built artifact BACKDATE_NS in the past, so that its
    signature can be trusted at once (see the module docstring)."""
    when = (now_ns if now_ns is not None else time.time_ns()) - BACKDATE_NS
    paths = [path]
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path):
            paths.extend(Path(dirpath, n) for n in (*dirnames, *filenames))
    for p in reversed(paths):  # children before their folders
        os.utime(p, ns=(when, when), follow_symlinks=False)


class StatState:
    """The stat state of the cache rooted at ``root``; every method is safe to call concurrently."""

    def __init__(self, root: Path) -> None:
        self.path = root / STATE_NAME
        self._broken = False  # opening failed once in this process: stop trying, hash instead

    def _connect(self, *, create: bool) -> sqlite3.Connection | None:
        if self._broken or (not create and not self.path.exists()):
            return None
        if any((self.path.parent / name).is_symlink() for name in STATE_FILES):  # SQLite would write through it
            self._broken = True
            log.debug("cache state %s is a symlink; hashing every lookup", self.path)
            return None
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable enough for a hint
                conn.execute(_SCHEMA)
            except sqlite3.Error:
                conn.close()
                raise
            return conn
        except sqlite3.Error as exc:
            self._broken = True
            log.debug("cache state %s unusable (%s); hashing every lookup", self.path, exc)
            return None

    def trusted(self, key: str, sig: Signature | None, checksum: str) -> bool:
        """Was ``checksum`` last confirmed for files whose signature is ``sig``? Never, when
        MLBENCH_CACHE_TRUST_STAT=0 (a file system whose stat cannot be trusted): every lookup re-hashes."""
        if sig is None or os.environ.get(TRUST_STAT_ENV) == "0":
            return False
        conn = self._connect(create=False)
        if conn is None:
            return False
        try:
            with closing(conn):
                row = conn.execute("SELECT signature, checksum FROM state WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            log.debug("cache state %s unreadable (%s)", self.path, exc)
            return False
        return row is not None and row[0] == sig.digest and row[1] == checksum

    def record(self, key: str, sig: Signature | None, checksum: str, hashed_from_ns: int) -> bool:
        """Remember that files with ``sig`` hashed to ``checksum`` (hashing began at
        ``hashed_from_ns``); refused, returning False, when a file is too fresh to be trusted."""
        if sig is None or sig.newest_mtime_ns > hashed_from_ns - RACY_NS:
            self.forget(key)
            return False
        conn = self._connect(create=True)
        if conn is None:
            return False
        try:
            with closing(conn):
                conn.execute("INSERT OR REPLACE INTO state (key, signature, checksum, recorded_ns) VALUES (?, ?, ?, ?)",
                             (key, sig.digest, checksum, time.time_ns()))
        except sqlite3.Error as exc:
            log.debug("cache state %s not written (%s)", self.path, exc)
            return False
        return True

    def forget(self, key: str) -> None:
        conn = self._connect(create=False)
        if conn is None:
            return
        try:
            with closing(conn):
                conn.execute("DELETE FROM state WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            log.debug("cache state %s not written (%s)", self.path, exc)

    def remove_files(self) -> None:
        """Delete the database (the cache is empty: nothing left to remember)."""
        for name in STATE_FILES:
            (self.path.parent / name).unlink(missing_ok=True)
