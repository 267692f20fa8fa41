"""How busy the machine was while a run measured: load averages at the start and end of the window,
and, where the OS reports them (Linux's /proc/stat), the share of the machine's CPU time that other
processes used and that the hypervisor stole.

A median that moved 33 → 255 ms between two runs minutes apart says more about the machine than
the model; recording the load lets `mlbench compare` say so, and `mlbench ab` avoids the question
by measuring both sides interleaved.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

_USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
VERY_DIFFERENT_SHARE = 0.25  # other processes' share of the machine's CPU differing by this much
VERY_DIFFERENT_LOAD = 1.0  # or the load average per core differing by this much


@dataclass(frozen=True)
class LoadSample:
    wall: float
    load_average: tuple[float, float, float] | None
    busy_s: float | None  # all processes' non-idle CPU seconds since boot (steal excluded)
    steal_s: float | None
    own_s: float  # this process's (and its reaped children's) CPU seconds


def _proc_stat() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds from the first line of /proc/stat, or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]] + [0] * 8
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq) / _USER_HZ, steal / _USER_HZ


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def sample() -> LoadSample:
    stat = _proc_stat()
    return LoadSample(
        wall=time.monotonic(),
        load_average=tuple(os.getloadavg()) if hasattr(os, "getloadavg") else None,  # type: ignore[arg-type]
        busy_s=stat[0] if stat else None,
        steal_s=stat[1] if stat else None,
        own_s=_own_cpu_s(),
    )


def load_between(start: LoadSample, end: LoadSample, window: str) -> dict[str, Any]:
    """The machine's load over a window, as the report's `machine.load`: shares are of all the
    machine's CPU time over the window (cores × seconds); absent with the reason where not reported."""
    seconds = max(end.wall - start.wall, 1e-9)
    cores = os.cpu_count() or 1
    out: dict[str, Any] = {
        "window": window,
        "seconds": round(seconds, 3),
        "cores": cores,
        "load_average_start": list(start.load_average) if start.load_average else None,
        "load_average_end": list(end.load_average) if end.load_average else None,
        "source": "measured",
    }
    if start.busy_s is None or end.busy_s is None or start.steal_s is None or end.steal_s is None:
        out.update(other_share=None, steal_share=None,
                   reason="this OS does not report CPU time per machine (/proc/stat)")
        return out
    capacity = seconds * cores
    other = (end.busy_s - start.busy_s) - (end.own_s - start.own_s)
    out["other_share"] = round(min(max(other / capacity, 0.0), 1.0), 4)
    out["steal_share"] = round(min(max((end.steal_s - start.steal_s) / capacity, 0.0), 1.0), 4)
    return out


def _per_core_load(load: dict[str, Any]) -> float | None:
    averages = [a[0] for a in (load.get("load_average_start"), load.get("load_average_end")) if a]
    cores = load.get("cores") or 1
    return sum(averages) / len(averages) / cores if averages else None


def describe(load: dict[str, Any]) -> str:
    parts = []
    if load.get("other_share") is not None:
        parts.append(f"other processes used {load['other_share']:.0%} of the CPU")
    if load.get("steal_share"):
        parts.append(f"{load['steal_share']:.0%} stolen")
    per_core = _per_core_load(load)
    if per_core is not None:
        parts.append(f"load {per_core:.2f} per core")
    return ", ".join(parts) or "load not recorded"


def load_warning(base: dict[str, Any] | None, head: dict[str, Any] | None) -> str | None:
    """A warning when the two runs measured under very different load; None when alike or unknown."""
    if not base or not head:
        return None
    shares = [x.get("other_share") for x in (base, head)]
    steals = [x.get("steal_share") or 0.0 for x in (base, head)]
    loads = [_per_core_load(x) for x in (base, head)]
    different = False
    if shares[0] is not None and shares[1] is not None:
        different = abs(shares[0] - shares[1]) + abs(steals[0] - steals[1]) >= VERY_DIFFERENT_SHARE
    if loads[0] is not None and loads[1] is not None:
        different = different or abs(loads[0] - loads[1]) >= VERY_DIFFERENT_LOAD
    if not different:
        return None
    return (f"the runs measured under very different load (base: {describe(base)}; head: {describe(head)}): "
            "latency differences may be the machine's; `mlbench ab` measures both sides interleaved")
