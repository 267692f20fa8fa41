"""`mlbench cache verify`: every entry folder checked, whatever the stat state says.

Broken includes what `ArtifactCache.entries()` leaves out: a garbage or missing meta.json, a missing
artifact, a folder nobody may read (mode bits), a symlink in an entry's or a shard's place. Each broken
entry is evicted (the next run rebuilds it); one that cannot be removed says so. A broken entry's meta is
what could be read of it ({} when nothing could).
"""

from __future__ import annotations

from typing import Any

from mlbench.errors import UserError
from mlbench.store.entry import KEY_RE, SHARD_RE, CacheEntry, Corrupt, check_artifact, parse_meta
from mlbench.store.state import signature


def verify_all(cache: Any) -> list[tuple[CacheEntry, str | None]]:
    """(entry, None) for a good entry, (entry, why) for a broken one, in key order; ``cache`` is the
    `ArtifactCache` whose `verify()` calls this (not imported here: that would be a cycle)."""
    results: list[tuple[CacheEntry, str | None]] = []
    if not cache.claim(create=False):
        return results
    for shard in cache.root.iterdir():  # a symlinked shard: named by its place; the link is removed, not followed
        if SHARD_RE.fullmatch(shard.name) and shard.is_symlink():
            results.append((CacheEntry(key=shard.name, path=shard, meta={}), "shard folder is a symlink"))
            shard.unlink(missing_ok=True)
    for shard, entry_dir in sorted(cache._entry_dirs()):
        key = entry_dir.name
        if not (KEY_RE.fullmatch(key) and key[:2] == shard.name):
            continue
        cache.state.forget(key)
        meta: dict[str, Any] = {}
        try:
            meta = parse_meta(entry_dir, key)
            check_artifact(entry_dir, meta)
            artifact = entry_dir / meta["artifact"]
            cache._check_content(key, artifact, meta["checksum"], signature(artifact))
        except Corrupt as e:  # the caller reports it
            why = str(e)
            try:
                cache._evict_or_refuse(entry_dir, why)
            except UserError:
                why += "; it cannot be removed: fix its permissions or delete it"
            results.append((CacheEntry(key=key, path=entry_dir, meta=meta), why))
            continue
        results.append((CacheEntry(key=key, path=entry_dir, meta=meta), None))
    cache._remove_empty_shards()
    return results
