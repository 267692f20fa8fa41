"""Figures a backend derives from its cached artifact, computed once per artifact (and inputs, and code) and
kept in the cache beside it (`mlbench.store.derived`): what every backend shares of that.

A backend names the kind of work, the parts its result depends on beyond the artifact (the input set's and the
reference outputs' digests, the compute units, the chips, the version of the code that computes it) and the
computation; `cached_figures` adds the artifact's key and checksum to the key, and gives back the figures,
found or computed. The figures keep the sources they were computed with (emulated, reference, estimated):
caching changes when they are computed, never what they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlbench.records import ArtifactInfo, Metric, Placement, Verification
from mlbench.store.cache import ArtifactCache
from mlbench.store.derived import code_version, derived_of

__all__ = ["DerivedFigures", "artifact_checksum", "cached_figures", "code_version", "digest_arrays",
           "digest_generation"]


class DerivedFigures(BaseModel):
    """What one kind of derived work gives: any of figures, a verification (or why there is none), a placement,
    and details for the record."""

    model_config = ConfigDict(extra="forbid")

    metrics: dict[str, Metric] = Field(default_factory=dict)
    verification: Verification | None = None
    why_not: str | None = None
    placement: Placement | None = None
    details: dict[str, Any] = Field(default_factory=dict)


def digest_arrays(named: Iterable[tuple[str, Any]]) -> str:
    """sha256 of named arrays (numpy or torch): each name, dtype, shape and bytes, in order. The input set's
    and the reference outputs' digests in a derived key."""
    import numpy as np

    digest = hashlib.sha256()
    for name, array in named:
        value = array.detach().cpu().numpy() if hasattr(array, "detach") else np.asarray(array)
        value = np.ascontiguousarray(value)
        digest.update(f"{name}:{value.dtype.str}:{list(value.shape)}\n".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def digest_generation(trace: Any) -> str:
    """sha256 of a greedy generation (`mlbench.generate.metrics.GreedyTrace`: its prompt, tokens and logits):
    the reference a generation check compares with, in its derived key."""
    import numpy as np

    return digest_arrays([("prompt", np.asarray(trace.prompt, dtype=np.int64)),
                          ("tokens", np.asarray(trace.tokens, dtype=np.int64)), ("logits", trace.logits)])


def cached_figures(cache: ArtifactCache, info: ArtifactInfo | None, kind: str, parts: dict[str, Any],
                   compute: Callable[[], DerivedFigures], *, work: str, label: str) -> DerivedFigures:
    """`compute()`'s figures for the artifact `info` names, computed once for `kind` and `parts` and cached; an
    artifact that is not in the cache (a user's own package: `info.key` is its path's digest, with no
    checksum) is computed every time."""
    checksum = artifact_checksum(cache, info)
    if info is None or checksum is None:
        return compute()
    return derived_of(cache).get_or_compute(kind, {"artifact": info.key, "checksum": checksum, **parts}, compute,
                                            DerivedFigures, work=work, label=label, derived_from=info.key)


_CHECKSUMS: dict[tuple[str, int], str] = {}  # (key, meta.json's inode) → checksum: a rebuilt entry has a new inode


def artifact_checksum(cache: ArtifactCache, info: ArtifactInfo | None) -> str | None:
    """The artifact's checksum as its cache entry records it (the key names what built it; the checksum, the
    bytes themselves: a rebuild that wrote other bytes is derived again)."""
    from mlbench.store.entry import META_NAME, Corrupt, read_meta

    if info is None:
        return None
    try:
        entry_dir = cache.entry_dir(info.key)
        memo = (info.key, entry_dir.joinpath(META_NAME).lstat().st_ino)
        if memo not in _CHECKSUMS:
            checksum = read_meta(entry_dir, info.key).get("checksum")
            if not isinstance(checksum, str):
                return None
            _CHECKSUMS[memo] = checksum
    except (ValueError, Corrupt, OSError):
        return None
    return _CHECKSUMS[memo]
