"""One cache entry on disk: its folder, its meta.json (read and checked), and the durable-write
helpers the cache publishes entries with (fsync a tree, the newest mtime under a folder)."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

META_NAME = "meta.json"
TMP_DIR = "tmp"
LOCKS_DIR = "locks"  # one lock file per key being computed (`locks.py`)
STALE_TMP_SECONDS = 3600  # a build folder untouched this long belongs to a dead process
MIN_PREFIX = 4
MAX_META_BYTES = 64 << 20  # a meta.json is a few KiB (a Core ML analysis: a few MiB); more is not one
KEY_RE = re.compile(r"[0-9a-f]{64}")
SHARD_RE = re.compile(r"[0-9a-f]{2}")
RESERVED_META = frozenset(
    {"key", "key_inputs", "artifact", "size_bytes", "checksum", "created", "build_seconds",
     "mlbench_version"}
)


@dataclass(frozen=True)
class BuildResult:
    """What a builder reports: the name of the one thing it wrote, and facts worth keeping."""

    artifact_name: str
    extra_meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class CacheEntry:
    key: str
    path: Path  # the entry folder
    meta: dict[str, Any]

    @property
    def artifact_path(self) -> Path:
        return self.path / self.meta["artifact"]

    @property
    def size_bytes(self) -> int:
        return int(self.meta.get("size_bytes", 0))  # 0 for a broken entry `verify` reports

    @property
    def last_used(self) -> float:
        """Seconds since the epoch of the last lookup (meta.json's mtime); 0.0 if gone."""
        try:
            return (self.path / META_NAME).stat().st_mtime
        except OSError:
            return 0.0


    def summary(self, limit: int = 300) -> dict[str, Any]:
        """What `mlbench cache info` shows: the facts of the entry, with a large value (a Core ML analysis's
        layers) replaced by its size, and without the temporary folder it was exported in (gone since)."""
        from datetime import datetime

        out: dict[str, Any] = {"key": self.key, "path": str(self.path), "artifact": str(self.artifact_path),
                               "last_used": datetime.fromtimestamp(self.last_used).isoformat(timespec="seconds")}
        for name, value in sorted(self.meta.items()):
            if name in out:
                continue
            if isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "path"}  # the export's temporary folder
                value = {k: v if len(json.dumps(v, default=str)) <= limit else _sized(v) for k, v in value.items()}
            elif len(json.dumps(value, default=str)) > limit:
                value = _sized(value)
            out[name] = value
        return out


def _sized(value: Any) -> str:
    count = f"{len(value)} items, " if isinstance(value, (list, dict)) else ""
    return f"({count}{len(json.dumps(value, default=str)):,} characters: in {META_NAME})"


class Corrupt(Exception):
    """An entry that cannot be served; the message says why."""


def check_key(key: str) -> None:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 64 lowercase hex characters, got {key!r}")


def valid_artifact_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", META_NAME)
        and "/" not in name
        and "\\" not in name
    )


def entry_problem(entry_dir: Path) -> str | None:
    """Why the folder at ``entry_dir`` (and its shard folder) cannot be an entry, without following a
    symlink or reading anything in it: None when it is a real folder its owner may read and search.

    The mode bits are checked explicitly, so a folder taken away from its owner (chmod 000) is broken for
    root too: what one user of a shared cache sees, every user sees."""
    return folder_problem(entry_dir.parent, "shard folder") or folder_problem(entry_dir, "entry folder")


def folder_problem(folder: Path, what: str) -> str | None:
    """Why ``folder`` is not a real folder its owner may read and search (None when it is)."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return f"{what} missing"
    except OSError as e:
        return f"{what} unreadable: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{what} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} is not a folder"
    if st.st_mode & 0o500 != 0o500:
        return f"{what} unreadable (mode {stat.S_IMODE(st.st_mode):03o})"
    return None


def read_regular(path: Path, limit: int = MAX_META_BYTES) -> bytes:
    """The bytes of a regular file, opened without following a symlink and without waiting on a FIFO or
    a device; raise Corrupt(why) for anything else."""
    name = path.name
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise Corrupt(f"{name} missing") from None
    except OSError as e:
        if path.is_symlink():
            raise Corrupt(f"{name} is a symlink") from None
        raise Corrupt(f"{name} unreadable: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Corrupt(f"{name} is not a regular file")
        if st.st_mode & 0o400 == 0:
            raise Corrupt(f"{name} unreadable (mode {stat.S_IMODE(st.st_mode):03o})")
        if st.st_size > limit:
            raise Corrupt(f"{name} is too large ({st.st_size} bytes)")
        return f.read(limit + 1)


def read_meta(entry_dir: Path, key: str) -> dict[str, Any]:
    """Parse and sanity-check meta.json and check its artifact is there; raise Corrupt(why) if the entry
    can't serve ``key``. Nothing is followed through a symlink: not the entry folder, not meta.json, not the
    artifact."""
    meta = parse_meta(entry_dir, key)
    check_artifact(entry_dir, meta)
    return meta


def parse_meta(entry_dir: Path, key: str) -> dict[str, Any]:
    """meta.json, read and sanity-checked; raise Corrupt(why) if it can't describe ``key``."""
    problem = entry_problem(entry_dir)
    if problem is not None:
        raise Corrupt(problem)
    data = read_regular(entry_dir / META_NAME)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Corrupt(f"meta.json unreadable: {e}") from None
    try:
        meta = json.loads(text)
    except ValueError:
        raise Corrupt("meta.json is not valid JSON") from None
    if not isinstance(meta, dict):
        raise Corrupt("meta.json is not an object")
    for name, typ in (("key", str), ("artifact", str), ("checksum", str), ("size_bytes", int)):
        if not isinstance(meta.get(name), typ):
            raise Corrupt(f"meta.json lacks {name}")
    if meta["key"] != key:
        raise Corrupt("meta.json is for another key")
    if not valid_artifact_name(meta["artifact"]):
        raise Corrupt("meta.json names an invalid artifact")
    return meta


def check_artifact(entry_dir: Path, meta: dict[str, Any]) -> None:
    """Raise Corrupt(why) unless the artifact meta.json names is a real file or folder (not a symlink)."""
    try:
        st = os.lstat(entry_dir / meta["artifact"])
    except FileNotFoundError:
        raise Corrupt(f"artifact {meta['artifact']} missing") from None
    except OSError as e:
        raise Corrupt(f"artifact {meta['artifact']} unreadable: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise Corrupt(f"artifact {meta['artifact']} is a symlink")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise Corrupt(f"artifact {meta['artifact']} is not a regular file or folder")


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory's files and folders, so the rename publishes durable data."""
    if path.is_dir():
        for dirpath, _dirnames, filenames in os.walk(path):
            for name in filenames:
                fsync_fd(Path(dirpath) / name, os.O_RDONLY)
            fsync_fd(Path(dirpath), os.O_RDONLY)
    else:
        fsync_fd(path, os.O_RDONLY)


def fsync_fd(path: Path, flags: int) -> None:
    try:
        fd = os.open(path, flags)
    except OSError:  # directories can't be opened on Windows; nothing to sync there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tree_mtime(path: Path) -> float:
    """Newest mtime anywhere under ``path``: a long build keeps writing, so it stays fresh."""
    newest = path.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                pass
    return newest
