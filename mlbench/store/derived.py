"""Figures derived deterministically from a cached artifact, computed once and kept beside it.

Emulating a Core ML program, running Core AI's reference runtime, analysing a package and estimating its
placement and latency give the same answer every time for the same artifact, inputs and code: the four
compute-unit variants of one package need one emulation, and a warm rerun needs none. So each such result is
an entry of the artifact cache (`cache.py`) of its own, under the key of everything it depends on:

    kind ("coreml.emulated_verify", ...) + its key parts (the artifact's key and checksum, the input set's and
    the reference outputs' digests, the version of the code that computes it, ...)

The entry's one file is ``value.json`` (the value as JSON); its meta.json says ``derived: <kind>`` and which
artifact it was derived from. Being ordinary entries, they follow the cache's rules: published by an atomic
rename of a fully written folder, checksummed, evicted and computed again when corrupt (with a warning),
listed by `mlbench cache ls`, hashed by `mlbench cache verify`, removed by `cache clear` and `cache prune`. A
value that no longer reads as what its kind holds (stale) is evicted and computed again, with a warning too.

One entry is computed by one process at a time: a lock file per key (`locks/<key>.lock`, `flock`) is held
while it is computed, and whoever waited on it looks the entry up again before computing. A process that dies
drops its lock; one that fails publishes nothing, so the next computes it itself and fails, or not, for its own
reason. A holder that takes longer than `WAIT_S` is not waited on further: the waiter computes it too (the
first rename wins). Where `fcntl` is missing, or the lock file cannot be made (a read-only cache), nothing is
locked; a read-only cache computes every time, as if there were no cache.

Each process keeps a tally of what it computed and what it found (`take_tally`), which the runner puts in each
record's details and adds up in the report's `work` summary.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mlbench.errors import UserError
from mlbench.store.cache import ArtifactCache, BuildResult
from mlbench.store.entry import Corrupt, read_regular
from mlbench.store.hashing import artifact_key
from mlbench.store.locks import entry_lock

log = logging.getLogger("mlbench.store.derived")

VALUE_NAME = "value.json"
DERIVED_DETAILS = "derived"
"""The key of a record's details listing the derived figures its measurement used (`Outcome.as_json`)."""
DERIVED_SCHEMA = 1  # bump when the meaning of a derived key's parts changes; recomputes every derived entry
WAIT_S = 600.0
"""How long a process waits for another computing the same entry before computing it too."""

Value = TypeVar("Value", bound=BaseModel)


@dataclass(frozen=True)
class Outcome:
    """One use of a derived entry: computed here, or found in the cache (`note`: why it was computed again)."""

    kind: str
    work: str  # what the summary calls the work ("emulated", "estimated", ...)
    key: str
    computed: bool
    seconds: float = 0.0  # the lookup, and the computation when there was one
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "work": self.work, "key": self.key[:16],
                               "outcome": "computed" if self.computed else "cached", "seconds": round(self.seconds, 6)}
        if self.note:
            out["note"] = self.note
        return out


def derived_key(kind: str, parts: dict[str, Any]) -> str:
    """The cache key of the value of `kind` computed from `parts` (canonical JSON, sha256)."""
    return artifact_key({"derived": kind, "derived_schema": DERIVED_SCHEMA, "parts": parts})


@functools.cache
def code_version(*modules: str) -> str:
    """A digest of the source of `modules` (a package: every .py, .yaml and .json file under it) and of
    mlbench's version: any change to the code that computes a figure (an interpreter kernel, a placement rule,
    a chip table) changes it, so the figure is computed again."""
    from mlbench import __version__

    digest = hashlib.sha256(f"mlbench {__version__}\n".encode())
    for name in sorted(set(modules)):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if spec is None or origin is None:
            digest.update(f"{name}: absent\n".encode())
            continue
        path = Path(origin)
        files = ([path] if spec.submodule_search_locations is None else
                 sorted(p for p in path.parent.rglob("*") if p.suffix in (".py", ".yaml", ".json")
                        and "__pycache__" not in p.parts and p.is_file()))
        base = path.parent
        for file in files:
            digest.update(f"{name}:{file.relative_to(base).as_posix()}\n".encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


class DerivedCache:
    """Derived values in the artifact cache `cache` (one object per cache object: `derived_of`)."""

    def __init__(self, cache: ArtifactCache) -> None:
        self.cache = cache
        self._tally: list[Outcome] = []

    def take_tally(self) -> list[Outcome]:
        """What this process computed or found since the last call (one variant's work)."""
        taken, self._tally = self._tally, []
        return taken

    def get_or_compute(self, kind: str, parts: dict[str, Any], compute: Callable[[], Value], model: type[Value],
                       *, work: str, label: str, derived_from: str | None = None) -> Value:
        """The value of `kind` for `parts`: found in the cache, or `compute()`d (once across processes) and
        stored. `work` names the work in the run summary ("emulated"); `label` names the entry in `cache ls`;
        `derived_from` is the artifact's key (kept in the entry's meta)."""
        key, t0 = derived_key(kind, parts), time.perf_counter()
        found, note = self._lookup(key, kind, model)
        if found is None:
            with entry_lock(self.cache, key, WAIT_S, f"{kind} of {label}") as locked:
                if locked:  # another process may have computed it while this one waited
                    found, later = self._lookup(key, kind, model)
                    note = note or later
                if found is None:
                    value = compute()
                    self._store(key, kind, parts, value, label, derived_from)
        self._tally.append(Outcome(kind, work, key, computed=found is None, seconds=time.perf_counter() - t0,
                                   note=note if found is None else None))
        return value if found is None else found

    # -- reading ------------------------------------------------------------------------------

    def _lookup(self, key: str, kind: str, model: type[Value]) -> tuple[Value | None, str | None]:
        """(value, None) on a hit; (None, why it was dropped) when an entry was there but unusable (corrupt:
        the cache evicted it and warned; stale: evicted here, with a warning); (None, None) on a miss."""
        had = os.path.lexists(self.cache.entry_dir(key))
        entry = self.cache.lookup(key)  # a corrupt entry is evicted there, with its warning
        if entry is None:
            return None, (f"the cached {kind} entry {key[:12]} was corrupt and is computed again" if had else None)
        try:
            data = json.loads(read_regular(entry.artifact_path).decode("utf-8"))
            if entry.meta.get("derived") != kind:
                raise ValueError(f"it holds {entry.meta.get('derived')!r}")
            return model.model_validate(data), None
        except (Corrupt, ValueError, ValidationError) as exc:
            why = " ".join(str(exc).split())[:200]
            log.warning("cached %s entry %s is stale (%s); computing it again", kind, key[:12], why)
            try:
                self.cache.remove(key)
            except (OSError, UserError):
                pass  # computed again all the same; the store below replaces it when it can
            return None, f"the cached {kind} entry {key[:12]} was stale ({why}) and is computed again"

    # -- writing ------------------------------------------------------------------------------

    def _store(self, key: str, kind: str, parts: dict[str, Any], value: BaseModel, label: str,
               derived_from: str | None) -> None:
        """Publish the value as a cache entry; a cache that cannot be written keeps nothing (said at debug)."""
        text = value.model_dump_json()

        def build(folder: Path) -> BuildResult:
            (folder / VALUE_NAME).write_text(text, encoding="utf-8")
            return BuildResult(VALUE_NAME, {"derived": kind, "derived_from": derived_from,
                                            "label": f"{kind} of {label}"})

        try:
            self.cache.get_or_build(key, parts, build)
        except (OSError, UserError) as exc:
            log.debug("derived %s entry %s not stored: %s", kind, key[:12], exc)

_OF: weakref.WeakKeyDictionary[ArtifactCache, DerivedCache] = weakref.WeakKeyDictionary()


def derived_of(cache: ArtifactCache) -> DerivedCache:
    """The derived store of `cache`, one per cache object (so one tally per worker's cache)."""
    found = _OF.get(cache)
    if found is None:
        found = _OF[cache] = DerivedCache(cache)
    return found
