"""Content-addressed store for built artifacts (.mlpackage, .onnx, ...), shared by all backends.

Converting a model can take minutes, so each artifact is kept under the key of everything that
went into it: ``<root>/<key[:2]>/<key>/{<artifact>, meta.json}``. An entry appears only by an
atomic rename of a fully written, fsynced folder, so a crash or a concurrent run never exposes a
half-built one, and every lookup re-checks the checksum so a damaged entry is rebuilt, not used.
No locks: two processes that miss at once both build, the first rename wins and the other
adopts the winner's entry.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlbench.errors import UserError
from mlbench.store.hashing import jsonable, path_size, sha256_path
from mlbench.units import format_size, parse_size  # noqa: F401  (part of the cache API)

log = logging.getLogger("mlbench.store.cache")

META_NAME = "meta.json"
TMP_DIR = "tmp"
STALE_TMP_SECONDS = 3600  # a build folder untouched this long belongs to a dead process
MIN_PREFIX = 4
_KEY_RE = re.compile(r"[0-9a-f]{64}")
_SHARD_RE = re.compile(r"[0-9a-f]{2}")
_RESERVED_META = frozenset(
    {"key", "key_inputs", "artifact", "size_bytes", "checksum", "created", "build_seconds",
     "mlbench_version"}
)


def default_cache_dir() -> Path:
    """``$MLBENCH_CACHE_DIR`` if set, else the per-user cache folder (XDG on Linux)."""
    env = os.environ.get("MLBENCH_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("mlbench", appauthor=False))


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


class _Corrupt(Exception):
    pass


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 64 lowercase hex characters, got {key!r}")


def _valid_artifact_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", META_NAME)
        and "/" not in name
        and "\\" not in name
    )


def _read_meta(entry_dir: Path, key: str) -> dict[str, Any]:
    """Parse and sanity-check meta.json; raise _Corrupt(why) if it can't describe ``key``."""
    try:
        text = (entry_dir / META_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _Corrupt("meta.json missing") from None
    except (OSError, UnicodeDecodeError) as e:
        raise _Corrupt(f"meta.json unreadable: {e}") from None
    try:
        meta = json.loads(text)
    except ValueError:
        raise _Corrupt("meta.json is not valid JSON") from None
    if not isinstance(meta, dict):
        raise _Corrupt("meta.json is not an object")
    for name, typ in (("key", str), ("artifact", str), ("checksum", str), ("size_bytes", int)):
        if not isinstance(meta.get(name), typ):
            raise _Corrupt(f"meta.json lacks {name}")
    if meta["key"] != key:
        raise _Corrupt("meta.json is for another key")
    if not _valid_artifact_name(meta["artifact"]):
        raise _Corrupt("meta.json names an invalid artifact")
    if not (entry_dir / meta["artifact"]).exists():
        raise _Corrupt(f"artifact {meta['artifact']} missing")
    return meta


def _fsync_path(path: Path) -> None:
    """fsync a file, or a directory's files and folders, so the rename publishes durable data."""
    if path.is_dir():
        for dirpath, _dirnames, filenames in os.walk(path):
            for name in filenames:
                _fsync_fd(Path(dirpath) / name, os.O_RDONLY)
            _fsync_fd(Path(dirpath), os.O_RDONLY)
    else:
        _fsync_fd(path, os.O_RDONLY)


def _fsync_fd(path: Path, flags: int) -> None:
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


def _tree_mtime(path: Path) -> float:
    """Newest mtime anywhere under ``path``: a long build keeps writing, so it stays fresh."""
    newest = path.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                pass
    return newest


class ArtifactCache:
    """The artifact store rooted at ``root`` (default: :func:`default_cache_dir`).

    Nothing is created on disk until the first build, so listing an absent cache is harmless.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    # -- layout -----------------------------------------------------------------------------

    def entry_dir(self, key: str) -> Path:
        _check_key(key)
        return self.root / key[:2] / key

    @property
    def tmp_root(self) -> Path:
        return self.root / TMP_DIR

    def _entry_dirs(self) -> list[tuple[Path, Path]]:
        """(shard, child) pairs under the root, tolerating folders that vanish meanwhile."""
        out: list[tuple[Path, Path]] = []
        if not self.root.is_dir():
            return out
        for shard in self.root.iterdir():
            if not (_SHARD_RE.fullmatch(shard.name) and shard.is_dir()):
                continue
            try:
                out.extend((shard, child) for child in shard.iterdir())
            except FileNotFoundError:
                pass
        return out

    # -- reading ----------------------------------------------------------------------------

    def lookup(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key``, or None; a corrupt entry is evicted with one warning."""
        entry_dir = self.entry_dir(key)
        if not entry_dir.is_dir():
            return None
        try:
            meta = _read_meta(entry_dir, key)
            try:
                actual = sha256_path(entry_dir / meta["artifact"])
            except (OSError, UserError) as e:
                raise _Corrupt(f"artifact unreadable: {e}") from None
            if actual != meta["checksum"]:
                raise _Corrupt("checksum mismatch")
        except _Corrupt as e:
            log.warning("cache entry %s is corrupt (%s); rebuilding", key[:12], e)
            self._evict_dir(entry_dir)
            return None
        try:
            os.utime(entry_dir / META_NAME)  # last-used time, for prune's LRU order
        except OSError:
            pass  # a read-only shared cache still serves hits
        return CacheEntry(key=key, path=entry_dir, meta=meta)

    def entries(self) -> list[CacheEntry]:
        """Entries whose meta.json looks right, sorted by key; checksums are not verified."""
        out: list[CacheEntry] = []
        for shard, entry_dir in self._entry_dirs():
            key = entry_dir.name
            if not (_KEY_RE.fullmatch(key) and key[:2] == shard.name and entry_dir.is_dir()):
                continue
            try:
                meta = _read_meta(entry_dir, key)
            except _Corrupt:
                continue
            out.append(CacheEntry(key=key, path=entry_dir, meta=meta))
        out.sort(key=lambda e: e.key)
        return out

    def find(self, key_prefix: str) -> CacheEntry:
        """The one entry whose key starts with ``key_prefix`` (as typed by a user, ≥ 4 chars)."""
        prefix = key_prefix.strip().lower()
        if len(prefix) < MIN_PREFIX:
            raise UserError(
                f"cache key prefix '{key_prefix}' is too short: give at least {MIN_PREFIX} characters"
            )
        if not re.fullmatch(r"[0-9a-f]+", prefix):
            raise UserError(f"cache key prefix '{key_prefix}' is not hexadecimal")
        matches = [e for e in self.entries() if e.key.startswith(prefix)]
        if not matches:
            raise UserError(f"no cache entry matches '{key_prefix}'")
        if len(matches) > 1:
            shown = ", ".join(e.key[:12] for e in matches[:5])
            more = ", ..." if len(matches) > 5 else ""
            raise UserError(
                f"cache key prefix '{key_prefix}' is ambiguous: "
                f"{len(matches)} entries match ({shown}{more})"
            )
        return matches[0]

    def total_bytes(self) -> int:
        """Sum of the artifact sizes recorded in the entries' meta.json."""
        return sum(e.size_bytes for e in self.entries())

    # -- writing ----------------------------------------------------------------------------

    def get_or_build(
        self,
        key: str,
        key_inputs: dict[str, Any],
        build: Callable[[Path], BuildResult],
    ) -> tuple[CacheEntry, bool]:
        """The entry for ``key``, building it with ``build(tmp_dir)`` on a miss; bool = hit.

        ``build`` must write exactly one file or folder, named ``artifact_name``, in ``tmp_dir``.
        """
        hit = self.lookup(key)
        if hit is not None:
            return hit, True

        final = self.entry_dir(key)
        self.tmp_root.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f"build-{key[:12]}-", dir=self.tmp_root))
        try:
            meta = self._build_into(tmp_dir, key, key_inputs, build)
            for _ in range(5):
                final.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.rename(tmp_dir, final)
                except OSError:
                    if final.exists():  # another process published first
                        theirs = self.lookup(key)  # evicts theirs if corrupt; then we retry
                        if theirs is not None:
                            shutil.rmtree(tmp_dir, ignore_errors=True)
                            return theirs, False
                        continue
                    if tmp_dir.is_dir() and not final.parent.is_dir():
                        continue  # a concurrent prune removed the empty shard folder
                    raise  # e.g. our tmp folder was deleted under us
                _fsync_fd(final.parent, os.O_RDONLY)
                return CacheEntry(key=key, path=final, meta=meta), False
            raise RuntimeError(f"cache entry {key[:12]}: could not move the build into place")
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise

    def _build_into(
        self, tmp_dir: Path, key: str, key_inputs: dict[str, Any], build: Callable[[Path], BuildResult]
    ) -> dict[str, Any]:
        """Run the builder in ``tmp_dir``, check what it wrote, and add a durable meta.json."""
        inputs = jsonable(key_inputs)  # fail before a long build if meta.json can't hold them
        t0 = time.perf_counter()
        result = build(tmp_dir)
        build_seconds = time.perf_counter() - t0
        if not isinstance(result, BuildResult):
            raise TypeError(f"builder returned {type(result).__name__}, not BuildResult")
        name = result.artifact_name
        if not _valid_artifact_name(name):
            raise ValueError(f"builder returned an invalid artifact name {name!r}")
        written = sorted(p.name for p in tmp_dir.iterdir())
        if written != [name]:
            raise ValueError(
                f"builder must write exactly one artifact named {name!r} in its folder; "
                f"found {written}"
            )
        clash = _RESERVED_META & set(result.extra_meta)
        if clash:
            raise ValueError(f"builder extra_meta may not set {sorted(clash)}")

        from mlbench import __version__

        artifact = tmp_dir / name
        meta = {
            "key": key,
            "key_inputs": inputs,
            "artifact": name,
            "size_bytes": path_size(artifact),
            "checksum": sha256_path(artifact),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "build_seconds": round(build_seconds, 3),
            "mlbench_version": __version__,
            **jsonable(result.extra_meta),
        }
        _fsync_path(artifact)
        with open(tmp_dir / META_NAME, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_fd(tmp_dir, os.O_RDONLY)
        return meta

    # -- removing ---------------------------------------------------------------------------

    def _evict_dir(self, entry_dir: Path) -> None:
        """Take an entry out of service atomically (rename into tmp/), then delete it."""
        trash = self.tmp_root / f"trash-{uuid.uuid4().hex}"
        try:
            self.tmp_root.mkdir(parents=True, exist_ok=True)
            os.rename(entry_dir, trash)
        except FileNotFoundError:
            return  # someone else evicted it first
        except OSError:
            shutil.rmtree(entry_dir, ignore_errors=True)
            return
        shutil.rmtree(trash, ignore_errors=True)

    def remove(self, key: str) -> bool:
        """Evict one entry; False if there was none."""
        entry_dir = self.entry_dir(key)
        if not entry_dir.is_dir():
            return False
        self._evict_dir(entry_dir)
        return True

    def _clean_tmp(self) -> None:
        """Delete leftovers of dead processes: evictions cut short, builds idle for an hour."""
        if not self.tmp_root.is_dir():
            return
        now = time.time()
        for p in self.tmp_root.iterdir():
            try:
                stale = p.name.startswith("trash-") or now - _tree_mtime(p) > STALE_TMP_SECONDS
            except OSError:
                continue
            if stale:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)

    def prune(self, max_bytes: int) -> list[CacheEntry]:
        """Evict least-recently-used entries until the total is ≤ ``max_bytes``; return them."""
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self._clean_tmp()
        entries = sorted(self.entries(), key=lambda e: (e.last_used, e.key))
        total = sum(e.size_bytes for e in entries)
        evicted: list[CacheEntry] = []
        for e in entries:
            if total <= max_bytes:
                break
            self._evict_dir(e.path)
            total -= e.size_bytes
            evicted.append(e)
        self._remove_empty_shards()
        return evicted

    def clear(self) -> int:
        """Remove every entry (corrupt ones too) and stale temp folders; return entries removed.

        Fresh temp folders are kept: they may be another process's build in progress.
        """
        count = 0
        if self.root.is_dir():
            for _, entry_dir in self._entry_dirs():
                if _KEY_RE.fullmatch(entry_dir.name) and entry_dir.is_dir():
                    self._evict_dir(entry_dir)
                    count += 1
        self._clean_tmp()
        self._remove_empty_shards()
        return count

    def _remove_empty_shards(self) -> None:
        if not self.root.is_dir():
            return
        for shard in self.root.iterdir():
            if _SHARD_RE.fullmatch(shard.name) and shard.is_dir():
                try:
                    shard.rmdir()  # only succeeds when empty
                except OSError:
                    pass


# -- sizes ------------------------------------------------------------------------------------
