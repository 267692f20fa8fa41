"""The contract every backend fulfils: export what shapes an artifact, then measure a variant.

The runner owns ordering, caching decisions, failures and journaling; a backend only knows how
to turn a loaded model into an artifact and an artifact into figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from mlbench.records import ArtifactInfo, Latency, Metric, Placement, Verification

if TYPE_CHECKING:
    from mlbench.cache import ArtifactCache
    from mlbench.config import PipelineConfig
    from mlbench.config_base import TargetBase
    from mlbench.matrix import Variant
    from mlbench.models import LoadedModel


class VariantSkipped(Exception):
    """This machine cannot run the variant (no CUDA, not macOS, provider missing): not a failure."""


@dataclass
class Exported:
    """What `export` hands to `measure`: an in-memory object, a cached file, or both."""

    payload: Any
    info: ArtifactInfo | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Measurement:
    metrics: dict[str, Metric] = field(default_factory=dict)
    latency: Latency | None = None
    verify: Verification | None = None
    placement: Placement | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Backend:
    """Base class: one instance per target entry of a pipeline."""

    name: ClassVar[str]
    cached_export: ClassVar[bool] = False
    """True when export() builds a file in the artifact cache: such exports may run in parallel
    worker processes ahead of measurement."""

    def __init__(self, target: TargetBase, config: PipelineConfig, cache: ArtifactCache) -> None:
        self.target = target
        self.config = config
        self.cache = cache

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        """Build (or fetch from the cache) what the variant's artifact axes describe."""
        raise NotImplementedError

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        """Time, verify and analyse one variant. Raise VariantSkipped when this machine can't."""
        raise NotImplementedError
