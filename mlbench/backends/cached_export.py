"""The export sequence every caching backend shares: key what shapes the artifact, build it on a
cache miss, record how it was made, and describe the cached artifact for the run record.

A backend brings what is its own: the key inputs (they decide the cache key), the exporter (it
writes one file or folder), and any facts of its own worth keeping beside the artifact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlbench.records import ArtifactInfo
from mlbench.store.cache import ArtifactCache, BuildResult
from mlbench.store.hashing import artifact_key


class ExportOutcome(Protocol):
    """What every exporter reports about the artifact it wrote."""

    artifact: Path  # the one file or folder written
    export_path: str  # which exporter made it
    fallback_reason: str | None  # why the first exporter failed, if it did
    seconds: float
    warnings: list[str]


@dataclass
class CachedExport:
    path: Path  # the artifact in the cache
    meta: dict[str, Any]  # what was recorded when it was built
    info: ArtifactInfo

    def facts(self, *keys: str) -> dict[str, Any]:
        """The recorded facts named ``keys`` (None for those not recorded)."""
        return {key: self.meta.get(key) for key in keys}


def build_cached(
    cache: ArtifactCache,
    key_inputs: dict[str, Any],
    export: Callable[[Path], ExportOutcome],
    *,
    label: str,
    own_facts: Callable[[Any], dict[str, Any]] | None = None,
) -> CachedExport:
    """The cached artifact for ``key_inputs``, made by ``export(folder)`` on a miss.

    ``own_facts(outcome)`` adds the backend's own facts to what is recorded; ``label`` names the
    artifact in `mlbench cache ls` only.
    """

    def build(folder: Path) -> BuildResult:
        outcome = export(folder)
        return BuildResult(outcome.artifact.name, {
            "export_path": outcome.export_path, "fallback_reason": outcome.fallback_reason,
            "export_seconds": outcome.seconds, "warnings": outcome.warnings, "label": label,
            **(own_facts(outcome) if own_facts is not None else {}),
        })

    entry, hit = cache.get_or_build(artifact_key(key_inputs), key_inputs, build)
    meta = entry.meta
    info = ArtifactInfo(key=entry.key, cache_hit=hit, export_seconds=meta.get("export_seconds", 0.0),
                        path=str(entry.artifact_path), size_bytes=entry.size_bytes,
                        export_path=meta.get("export_path"))
    return CachedExport(entry.artifact_path, meta, info)
