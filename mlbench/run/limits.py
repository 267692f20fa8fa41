"""Limits on the child processes that run user models, and the one-line causes when a child fails.

A variant's limits are its target's `limits:` over the pipeline's `limits:` (defaults: export_s
1800, measure_s 600, no memory limit).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant

_OUT_OF_MEMORY = re.compile(r"MemoryError|can't allocate memory|Cannot allocate memory|bad_alloc|out of memory",
                            re.IGNORECASE)


@dataclass(frozen=True)
class ChildLimits:
    """What the supervisor enforces on one variant's child process (None: no limit)."""

    export_s: float | None = None
    measure_s: float | None = None
    memory_gb: float | None = None

    @property
    def memory_bytes(self) -> int:
        return 0 if self.memory_gb is None else int(self.memory_gb * 1e9)


def limits_for(config: PipelineConfig, variant: Variant) -> ChildLimits:
    """The variant's target's limits over the pipeline's."""
    target = [*config.targets, *config.include][variant.target_index]
    own = target.limits
    pipeline = config.limits

    def pick(name: str) -> float | None:
        value = getattr(own, name) if own is not None else None
        return value if value is not None else getattr(pipeline, name)

    return ChildLimits(pick("export_s"), pick("measure_s"), pick("memory_gb"))


def memory_note(limits: ChildLimits, returncode: int | None) -> str:
    """For the deaths an allocation can cause (SIGKILL, SIGABRT), the memory limit the child ran under."""
    if limits.memory_gb is None or returncode not in (-signal.SIGKILL, -signal.SIGABRT):
        return ""
    return f", under a memory limit of {limits.memory_gb:g} GB (limits.memory_gb)"


def out_of_memory(error: str | None, limits: ChildLimits, peak_bytes: int | None = None) -> str | None:
    """`error` said again as running out of memory when it is one and a memory limit was set, else None;
    with the child's peak resident memory where it could be read (`peak_bytes`: the limit counts what it
    allocated, RLIMIT_DATA, more than it touched)."""
    if error is None or limits.memory_gb is None or not _OUT_OF_MEMORY.search(error):
        return None
    from mlbench.units import format_size

    seen = f", peak resident memory seen {format_size(peak_bytes)}" if peak_bytes is not None else ""
    return f"out of memory: over the limit of {limits.memory_gb:g} GB (limits.memory_gb{seen}); {error}"
