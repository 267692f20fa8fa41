"""Content-addressed store for built artifacts (.mlpackage, .onnx, ...), shared by all backends.

Converting a model can take minutes, so each artifact is kept under the key of everything that
went into it: ``<root>/<key[:2]>/<key>/{<artifact>, meta.json}``. An entry appears only by an
atomic rename of a fully written, fsynced folder, so a crash or a concurrent run never exposes a
half-built one. A lookup re-checks the checksum, so a damaged entry is rebuilt, not used — unless
the stat state (`mlbench.store.state`) shows the artifact's files untouched since they last hashed
right; `verify()` (`mlbench cache verify`) hashes every entry regardless.
No locks on artifacts: two processes that miss at once both build, the first rename wins and the other
adopts the winner's entry. Figures derived from an artifact (`derived.py`) are entries too, each computed
under a lock of its own (`locks.py`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlbench.errors import UserError, cannot_write
from mlbench.store.entry import (
    KEY_RE,
    META_NAME,
    MIN_PREFIX,
    RESERVED_META,
    SHARD_RE,
    STALE_TMP_SECONDS,
    TMP_DIR,
    BuildResult,
    CacheEntry,
    Corrupt,
    check_key,
    folder_problem,
    fsync_fd,
    fsync_path,
    read_meta,
    tree_mtime,
    valid_artifact_name,
)
from mlbench.store.hashing import jsonable, path_size, sha256_path
from mlbench.store.locks import clear_locks
from mlbench.store.marker import claim, is_ours_in_tmp, is_real_dir
from mlbench.store.pins import Pins
from mlbench.store.stale import build_owner_dead, host_tag
from mlbench.store.state import StatState, backdate, signature
from mlbench.units import format_size, parse_size  # noqa: F401  (part of the cache API)

log = logging.getLogger("mlbench.store.cache")


def default_cache_dir() -> Path:
    """``$MLBENCH_CACHE_DIR`` if set, else the per-user cache folder (XDG on Linux)."""
    env = os.environ.get("MLBENCH_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("mlbench", appauthor=False))


class ArtifactCache:
    """The artifact store rooted at ``root`` (default: :func:`default_cache_dir`).

    Nothing is created on disk until the first build, so listing an absent cache is harmless.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.state = StatState(self.root)
        self.pins = Pins()  # the entries this process is using, and what the last clear or prune kept for a run

    # -- layout -----------------------------------------------------------------------------

    def entry_dir(self, key: str) -> Path:
        check_key(key)
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
            if not (SHARD_RE.fullmatch(shard.name) and is_real_dir(shard)):
                continue  # a symlinked shard is never listed: that would read outside the cache
            try:
                out.extend((shard, child) for child in shard.iterdir())
            except OSError:  # vanished meanwhile, or unreadable (verify names it)
                pass
        return out

    def claim(self, *, create: bool = True) -> bool:
        """Check that the root is mlbench's cache before anything is removed or built there (see
        `mlbench.store.marker`); False when there is no cache yet and ``create`` is off."""
        return claim(self.root, create=create)

    # -- reading ----------------------------------------------------------------------------

    def lookup(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key``, or None; a corrupt entry is evicted with one warning.

        Verified means: its checksum matches, or its files' stat signature is the one recorded
        when they last matched it (see `mlbench.store.state`).
        """
        entry_dir = self.entry_dir(key)
        shard = entry_dir.parent
        if not (os.path.lexists(entry_dir) or (os.path.lexists(shard) and folder_problem(shard, "shard folder"))):
            return None  # a miss; but a shard folder that is a symlink or has lost its permissions is mended first
        try:
            meta = read_meta(entry_dir, key)
            artifact = entry_dir / meta["artifact"]
            sig = signature(artifact)
            if not self.state.trusted(key, sig, meta["checksum"]):
                self._check_content(key, artifact, meta["checksum"], sig)
        except FileNotFoundError:
            if os.path.lexists(entry_dir):
                raise
            return None  # a `cache clear` took it while it was being checked: a miss, rebuilt
        except Corrupt as e:
            self._evict_or_refuse(entry_dir, str(e))  # one UserError line when it cannot be removed
            log.warning("cache entry %s is corrupt (%s); rebuilding", key[:12], e)
            return None
        try:
            os.utime(entry_dir / META_NAME, follow_symlinks=False)  # last-used time, for prune's LRU order
        except OSError:
            pass  # a read-only shared cache still serves hits
        return self.pins.hold(CacheEntry(key=key, path=entry_dir, meta=meta))

    def release_pins(self) -> None:
        """Unpin every entry this process found: its work on them is done (`pins.py`)."""
        self.pins.release()

    def _check_content(self, key: str, artifact: Path, checksum: str, sig: Any) -> None:
        """Hash the artifact; raise Corrupt on a mismatch, else record its stat signature when the
        files did not change while they were read."""
        started = time.time_ns()
        try:
            actual = sha256_path(artifact)
        except (OSError, UserError) as e:
            raise Corrupt(f"artifact unreadable: {e}") from None
        if actual != checksum:
            raise Corrupt("checksum mismatch")
        if sig is not None and signature(artifact) == sig:
            self.state.record(key, sig, checksum, started)

    def verify(self) -> list[tuple[CacheEntry, str | None]]:
        """Check every entry folder, whatever the stat state says: (entry, None) for a good one, (entry, why)
        for a broken one, which is evicted (the next run rebuilds it); see `mlbench.store.audit`."""
        from mlbench.store.audit import verify_all

        return verify_all(self)

    def entries(self) -> list[CacheEntry]:
        """Entries whose meta.json looks right, sorted by key; checksums are not verified."""
        out: list[CacheEntry] = []
        for shard, entry_dir in self._entry_dirs():
            key = entry_dir.name
            if not (KEY_RE.fullmatch(key) and key[:2] == shard.name and entry_dir.is_dir()):
                continue
            try:
                meta = read_meta(entry_dir, key)
            except Corrupt:
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
        owner = f"{host_tag()}.{os.getpid()}"  # a later run removes the folder once this process is dead
        try:
            self.claim(create=True)
            self._make_tmp_root()
            tmp_dir = Path(tempfile.mkdtemp(prefix=f"build-{key[:12]}-{owner}-", dir=self.tmp_root))
        except OSError as exc:  # a read-only or full filesystem: one line, this variant fails, the run goes on
            raise cannot_write(exc, self.root, "cannot write the cache") from None
        try:
            meta = self._build_into(tmp_dir, key, key_inputs, build)
            self.pins.before_publishing(key, tmp_dir)
            for _ in range(5):
                if self._bad_shard(final.parent):  # a symlink in the shard's place: never publish through it
                    final.parent.unlink()
                final.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.rename(tmp_dir, final)
                except OSError:
                    if final.exists():  # another process published first
                        theirs = self.lookup(key)  # evicts theirs if corrupt; then we retry
                        if theirs is not None:  # pinned by the lookup, in place of our build
                            shutil.rmtree(tmp_dir, ignore_errors=True)
                            return theirs, False
                        continue
                    if tmp_dir.is_dir() and not final.parent.is_dir():
                        continue  # a concurrent prune removed the empty shard folder
                    raise  # e.g. our tmp folder was deleted under us
                fsync_fd(final.parent, os.O_RDONLY)
                artifact = final / meta["artifact"]
                self.state.record(key, signature(artifact), meta["checksum"], time.time_ns())
                return self.pins.published(CacheEntry(key=key, path=final, meta=meta)), False
            raise RuntimeError(f"cache entry {key[:12]}: could not move the build into place")
        except BaseException:  # any failure, Ctrl-C included: the build folder goes, and it re-raises
            self.pins.drop(key)
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
        if not valid_artifact_name(name):
            raise ValueError(f"builder returned an invalid artifact name {name!r}")
        written = sorted(p.name for p in tmp_dir.iterdir())
        if written != [name]:
            raise ValueError(
                f"builder must write exactly one artifact named {name!r} in its folder; "
                f"found {written}"
            )
        clash = RESERVED_META & set(result.extra_meta)
        if clash:
            raise ValueError(f"builder extra_meta may not set {sorted(clash)}")

        from mlbench import __version__

        artifact = tmp_dir / name
        backdate(artifact)  # a later write to the published files always changes their mtime
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
        fsync_path(artifact)
        with open(tmp_dir / META_NAME, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_fd(tmp_dir, os.O_RDONLY)
        return meta

    # -- removing ---------------------------------------------------------------------------

    @staticmethod
    def _bad_shard(shard: Path) -> bool:
        """A symlink in a shard folder's (or tmp/'s) place: it would lead out of the cache."""
        return shard.is_symlink()

    def _evict_dir(self, entry_dir: Path) -> None:
        """Take an entry out of service atomically (rename into tmp/), then delete it. A symlink (the entry's,
        or its shard's) is removed itself, never what it points to; a folder taken away from its owner
        (chmod 000: the entry's, or its shard's) is given back to its owner first, so that it can be removed."""
        self.state.forget(entry_dir.name)
        for link in (entry_dir.parent, entry_dir):
            if os.path.lexists(link) and not is_real_dir(link):
                Path(link).unlink(missing_ok=True)
                return
        for folder in (entry_dir.parent, entry_dir):
            try:
                mode = stat.S_IMODE(os.lstat(folder).st_mode)
                if mode & 0o700 != 0o700:
                    os.chmod(folder, mode | 0o700)
            except OSError:
                pass  # gone, or not ours: the rename below says
        trash = self.tmp_root / f"trash-{uuid.uuid4().hex}"
        try:
            self._make_tmp_root()
            os.rename(entry_dir, trash)
        except FileNotFoundError:
            return  # someone else evicted it first
        except OSError:
            shutil.rmtree(entry_dir, ignore_errors=True)
            return
        shutil.rmtree(trash, ignore_errors=True)

    def _evict_unless_in_use(self, entry_dir: Path) -> bool:
        """Evict the entry unless a run has it pinned (counted in `pins.kept_in_use`); True when evicted."""
        with self.pins.for_removal(entry_dir) as free:
            if free:
                self._evict_dir(entry_dir)
        return free

    def _evict_or_refuse(self, entry_dir: Path, why: str) -> None:
        """Evict a corrupt entry; one UserError line when it cannot be removed (the run cannot replace it)."""
        self._evict_dir(entry_dir)
        if os.path.lexists(entry_dir) or self._bad_shard(entry_dir.parent):
            raise UserError(f"cache entry {entry_dir.name[:12]} is corrupt ({why}) and cannot be removed: fix its "
                            "permissions or delete it", file=entry_dir)

    def _make_tmp_root(self) -> None:
        """tmp/ as a real folder of the cache: a symlink in its place is removed, never written through."""
        if self._bad_shard(self.tmp_root):
            self.tmp_root.unlink()
        self.tmp_root.mkdir(parents=True, exist_ok=True)

    def remove(self, key: str) -> bool:
        """Evict one entry; False if there was none."""
        entry_dir = self.entry_dir(key)
        if not os.path.lexists(entry_dir) or not self.claim(create=False):
            return False
        self._evict_dir(entry_dir)
        return True

    def clean_stale_builds(self) -> None:
        """Delete leftovers of dead processes: evictions cut short, builds whose process on this machine
        is gone, and builds idle for an hour (those of other machines); every run starts with this. A folder
        that is not mlbench's cache is refused in one line (UserError) before anything is touched."""
        self.claim(create=True)
        self._clean_tmp()

    def _clean_tmp(self) -> None:
        """Remove what mlbench left in tmp/ (its names only, see `mlbench.store.marker`), never anything else."""
        if not is_real_dir(self.tmp_root):
            return
        now = time.time()
        for p in self.tmp_root.iterdir():
            if not is_ours_in_tmp(p.name):
                continue
            try:
                stale = (p.name.startswith("trash-") or build_owner_dead(p.name)
                         or now - tree_mtime(p) > STALE_TMP_SECONDS)
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
        if not self.claim(create=False):
            return []
        self._clean_tmp()
        entries = sorted(self.entries(), key=lambda e: (e.last_used, e.key))
        total = sum(e.size_bytes for e in entries)
        evicted: list[CacheEntry] = []
        self.pins.kept_in_use = 0
        for e in entries:
            if total <= max_bytes:
                break
            if self._evict_unless_in_use(e.path):
                total -= e.size_bytes
                evicted.append(e)
        self._remove_empty_shards()
        return evicted

    def clear(self) -> int:
        """Remove every entry (corrupt ones too) and stale temp folders; return entries removed.

        Fresh temp folders are kept: they may be another process's build in progress.
        """
        count = self.pins.kept_in_use = 0
        if not self.claim(create=False):
            return 0
        for shard in self.root.iterdir():  # a symlink in a shard's place: the link goes, never what it points to
            if SHARD_RE.fullmatch(shard.name) and shard.is_symlink():
                shard.unlink(missing_ok=True)
        for _, entry_dir in self._entry_dirs():
            if KEY_RE.fullmatch(entry_dir.name) and (is_real_dir(entry_dir) or entry_dir.is_symlink()):
                count += self._evict_unless_in_use(entry_dir)
        self._clean_tmp()
        clear_locks(self.root)
        self._remove_empty_shards()
        return count

    def _remove_empty_shards(self) -> None:
        """Remove empty shard folders, and the stat state once no entry is left to describe."""
        if not self.root.is_dir():
            return
        left = False
        for shard in self.root.iterdir():
            if SHARD_RE.fullmatch(shard.name) and is_real_dir(shard):
                try:
                    shard.rmdir()  # only succeeds when empty
                except OSError:
                    left = True
        if not left:
            self.state.remove_files()
