"""One cache entry on disk: its folder, its meta.json (read and checked), and the durable-write
helpers the cache publishes entries with (fsync a tree, the newest mtime under a folder)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

META_NAME = "meta.json"
TMP_DIR = "tmp"
STALE_TMP_SECONDS = 3600  # a build folder untouched this long belongs to a dead process
MIN_PREFIX = 4
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
        return int(self.meta["size_bytes"])

    @property
    def last_used(self) -> float:
        """Seconds since the epoch of the last lookup (meta.json's mtime); 0.0 if gone."""
        try:
            return (self.path / META_NAME).stat().st_mtime
        except OSError:
            return 0.0


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


def read_meta(entry_dir: Path, key: str) -> dict[str, Any]:
    """Parse and sanity-check meta.json; raise Corrupt(why) if it can't describe ``key``."""
    try:
        text = (entry_dir / META_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Corrupt("meta.json missing") from None
    except (OSError, UnicodeDecodeError) as e:
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
    if not (entry_dir / meta["artifact"]).exists():
        raise Corrupt(f"artifact {meta['artifact']} missing")
    return meta


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
