"""How many CPUs this process may use: the affinity mask and the container's CPU quota, not the host's count.

`os.cpu_count()` says how many CPUs the machine has. In a container limited to 2 CPUs on a 64-core
host, or under `taskset -c 0-3`, starting 64 export processes oversubscribes the cores and slows
every export; the machine snapshot would also call two unlike runs alike.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _own_paths(proc_cgroup: Path) -> dict[str, str]:
    """Controller → this process's cgroup path (`""` for the v2 unified hierarchy)."""
    paths: dict[str, str] = {}
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths[controller] = parts[2]
    return paths


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """CPUs the container's quota allows (e.g. 1.5), or None when there is no quota.

    cgroup v2: `cpu.max` holds "QUOTA PERIOD" or "max PERIOD"; v1: `cpu.cfs_quota_us` (-1: none) and
    `cpu.cfs_period_us`. The process's own cgroup is tried first, then the hierarchy's root (what a
    container with its own cgroup namespace sees)."""
    own = _own_paths(proc_cgroup)
    v2 = [root / own[""].lstrip("/")] if "" in own else []
    for folder in [*v2, root]:
        text = _read(folder / "cpu.max")
        if text is not None:
            quota, _, period = text.partition(" ")
            return None if quota == "max" else _ratio(quota, period or "100000")
    rel = own.get("cpu", "").lstrip("/")
    for base in (root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"):
        for folder in ([base / rel] if rel else []) + [base]:
            quota_us, period_us = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
            if quota_us is not None and period_us is not None:
                return _ratio(quota_us, period_us)
    return None


def affinity_count() -> int:
    """CPUs the scheduler lets this process run on (all of them where affinity is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0)) or 1
        except OSError:
            pass
    return os.cpu_count() or 1


def available_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The CPUs this process can keep busy: its affinity, capped by the container quota (rounded up)."""
    count = affinity_count()
    limit = cgroup_cpu_limit(root, proc_cgroup)
    if limit is not None:
        count = min(count, max(1, math.ceil(limit)))
    return max(1, count)
