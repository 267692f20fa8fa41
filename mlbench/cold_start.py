"""Cold and warm loads kept apart: `load_time.cold` (the first load, after clearing the caches mlbench can clear)
and `load_time.warm` (a second load of the same artifact, everything still cached).

An app's first launch after an install or an update pays for reading the file, compiling and specialising;
every later launch does not (coremltools#1369, "Long start up time then loading model"). One `load_time` mixes
the two depending on what ran before. What "cold" can mean depends on the OS and runtime, so each record says
which caches were cleared and which could not be (`details.load_caches`):

- the artifact's pages in the OS page cache: cleared on Linux with `posix_fadvise(POSIX_FADV_DONTNEED)` on each
  of its files (clean pages are dropped; no root needed; the kernel's documentation, "posix_fadvise(2)"); macOS
  has no per-file eviction (its `purge` drops every cache and needs root), so there it stays;
- the runtime's process-wide state (ONNX Runtime's environment and thread pools, ExecuTorch's kernel registry)
  is never cleared: an earlier variant in the same process may have warmed it (each backend names its own);
- Core ML: the compiled model mlbench keeps is replaced by a fresh compile into a new folder for the cold load;
  Core ML's own caches of compiled and specialised programs are the OS's, and stay.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mlbench.records import Metric


def _files(path: Path) -> list[Path]:
    return [p for p in sorted(path.rglob("*")) if p.is_file()] if path.is_dir() else [path]


def evict_files(paths: list[Path], runtime_keeps: str) -> dict[str, Any]:
    """Drop the artifact's files from the OS page cache where this OS allows it; what was and was not cleared
    (`runtime_keeps`: what the backend's runtime keeps per process, in words, which nothing clears)."""
    cleared: list[str] = []
    not_cleared = [runtime_keeps]
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        not_cleared.insert(0, f"the artifact's pages in the OS file cache ({_system()} has no per-file eviction: "
                              "posix_fadvise is Linux's; purging every cache needs root)")
        return {"cleared": cleared, "not_cleared": not_cleared}
    failed = []
    for path in paths:
        for file in _files(path):
            try:
                fd = os.open(file, os.O_RDONLY)
            except OSError as exc:
                failed.append(f"{file.name}: {exc.strerror}")
                continue
            try:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError as exc:
                failed.append(f"{file.name}: {exc.strerror}")
            finally:
                os.close(fd)
    if failed:
        not_cleared.insert(0, f"some of the artifact's pages in the page cache ({'; '.join(failed[:3])})")
    else:
        cleared.append("the artifact's pages in the OS page cache (posix_fadvise DONTNEED on each file)")
    return {"cleared": cleared, "not_cleared": not_cleared}


def load_metrics(cold_ms: float, warm_ms: float | None, warm_reason: str | None = None) -> dict[str, Metric]:
    """`load_time.cold` and `load_time.warm` (absent with the reason when no second load was made)."""
    return {"load_time.cold": Metric.measured(cold_ms, "ms"),
            "load_time.warm": (Metric.measured(warm_ms, "ms") if warm_ms is not None
                               else Metric.absent("ms", warm_reason or "no second load was made"))}


def _system() -> str:
    return {"darwin": "macOS", "win32": "Windows", "linux": "Linux"}.get(sys.platform, sys.platform)
