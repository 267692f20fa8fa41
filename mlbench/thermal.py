"""The machine's thermal state, read before and after a variant is measured, and a wait for a cool machine.

A phone or a fanless laptop that heats up slows down: the ranking at minute 1 is not the ranking at minute 30.
A figure taken hot says so (`rose`), and a sweep can wait before each variant until the machine is cool
(`latency.max_thermal_state`, `wait_until_cool`).

What is read, per OS (absent with the reason where nothing is readable, never a guess):
- macOS: `ProcessInfo.thermalState` through pyobjc (`Foundation.NSProcessInfo`), where pyobjc is installed: the
  OS's own nominal / fair / serious / critical (Apple, "ProcessInfo.ThermalState", developer.apple.com; high
  confidence: the values and their order are Apple's).
- Linux: CPU frequency (`/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`), thermal throttle counters
  (`cpu*/thermal_throttle/*_throttle_count`, x86) and thermal zones (`/sys/class/thermal/thermal_zone*`, with their
  trip points); the kernel's documentation names these files (docs.kernel.org, "Generic Thermal Sysfs driver",
  "cpufreq"). Linux has no nominal/serious scale: mlbench derives one from the zones' trip points (`linux_state`),
  its own rule, stated where it is used. Virtual machines and containers often expose none of these.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

ThermalStateName = Literal["nominal", "fair", "serious", "critical"]
STATES: tuple[ThermalStateName, ...] = ("nominal", "fair", "serious", "critical")
"""In rising order: Apple's ProcessInfo.ThermalState cases (raw values 0-3)."""
FAIR_MARGIN_C = 10.0
"""Linux: a zone within this many °C of its first passive (or hot) trip point counts as `fair` (mlbench's rule)."""
FREQUENCY_FALL = 0.10
"""A mean CPU frequency this much lower after measuring than before counts as a rise of the thermal state."""
WAIT_POLL_S = 2.0


def read(root: Path = Path("/")) -> dict[str, Any]:
    """The thermal reading of this machine, as a record's `thermal.before` / `thermal.after` keeps it."""
    if sys.platform == "darwin":
        return read_macos()
    return read_linux(root)


def read_macos() -> dict[str, Any]:
    """`ProcessInfo.thermalState` through pyobjc; absent, saying so, where pyobjc is not installed."""
    try:
        from Foundation import NSProcessInfo  # type: ignore[import-not-found]
    except ImportError:
        return {"method": "ProcessInfo.thermalState", "state": None,
                "reason": "pyobjc (pyobjc-framework-Cocoa) is not installed: pip install 'mlbench-ondevice[macos]'"}
    raw = int(NSProcessInfo.processInfo().thermalState())
    state = STATES[raw] if 0 <= raw < len(STATES) else None
    return {"method": "ProcessInfo.thermalState", "state": state, "raw": raw,
            **({} if state else {"reason": f"unknown thermal state value {raw}"})}


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _zones(root: Path) -> list[dict[str, Any]]:
    """Each readable thermal zone: its type, temperature and trip points (°C)."""
    zones = []
    for folder in sorted((root / "sys/class/thermal").glob("thermal_zone*")):
        temp = _read_int(folder / "temp")
        if temp is None:
            continue
        try:
            kind = (folder / "type").read_text().strip()
        except OSError:
            kind = folder.name
        trips = []
        for trip in sorted(folder.glob("trip_point_*_temp")):
            value = _read_int(trip)
            try:
                trip_type = trip.with_name(trip.name.replace("_temp", "_type")).read_text().strip()
            except OSError:
                continue
            if value is not None and value > 0:
                trips.append((trip_type, value / 1000))
        zones.append({"zone": folder.name, "type": kind, "celsius": temp / 1000, "trips": trips})
    return zones


def linux_state(zones: list[dict[str, Any]]) -> ThermalStateName | None:
    """mlbench's scale for Linux zones: critical at a zone's critical trip, serious at its first passive or hot
    trip (where the kernel starts to cool it by slowing it down), fair within FAIR_MARGIN_C of that, else nominal;
    None when no zone has a trip point."""
    rank, judged = 0, False
    for zone in zones:
        temp = zone["celsius"]
        critical = [t for kind, t in zone["trips"] if kind == "critical"]
        throttling = [t for kind, t in zone["trips"] if kind in ("passive", "hot")]
        if critical or throttling:
            judged = True
        if critical and temp >= min(critical):
            rank = max(rank, 3)
        elif throttling and temp >= min(throttling):
            rank = max(rank, 2)
        elif throttling and temp >= min(throttling) - FAIR_MARGIN_C:
            rank = max(rank, 1)
    return STATES[rank] if judged else None


def read_linux(root: Path = Path("/")) -> dict[str, Any]:
    """CPU frequency, throttle counters and thermal zones where readable; each absent with the reason."""
    cpus = sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*"))
    freqs = [f for f in (_read_int(c / "cpufreq/scaling_cur_freq") for c in cpus) if f is not None]
    counts = [n for c in cpus for name in ("core_throttle_count", "package_throttle_count")
              if (n := _read_int(c / "thermal_throttle" / name)) is not None]
    zones = _zones(root)
    reading: dict[str, Any] = {"method": "linux sysfs", "state": linux_state(zones)}
    reading["cpu_mhz"] = round(sum(freqs) / len(freqs) / 1000, 1) if freqs else None
    reading["throttle_events"] = sum(counts) if counts else None
    reading["zones"] = {z["type"]: z["celsius"] for z in zones}
    reasons = []
    if not freqs:
        reasons.append("no cpufreq (/sys/devices/system/cpu/cpu*/cpufreq): CPU frequency unread")
    if not counts:
        reasons.append("no thermal_throttle counters (x86 only)")
    if reading["state"] is None:
        reasons.append("no thermal zone with a trip point (/sys/class/thermal): thermal state unread"
                       if not zones else "thermal zones have no trip points: thermal state not derived")
    if reasons:
        reading["reason"] = "; ".join(reasons)
    return reading


def readable(reading: dict[str, Any]) -> bool:
    """Whether a reading holds anything a rise could be seen in."""
    return any(reading.get(k) is not None for k in ("state", "cpu_mhz", "throttle_events")) or bool(reading.get("zones"))


def rose(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """What says the machine got hotter between two readings, in words; None when nothing does."""
    said = []
    first, last = before.get("state"), after.get("state")
    if first in STATES and last in STATES and STATES.index(last) > STATES.index(first):
        said.append(f"thermal state {first} → {last}")
    if before.get("throttle_events") is not None and after.get("throttle_events") is not None:
        extra = after["throttle_events"] - before["throttle_events"]
        if extra > 0:
            said.append(f"{extra} CPU throttle events")
    if before.get("cpu_mhz") and after.get("cpu_mhz") and after["cpu_mhz"] < before["cpu_mhz"] * (1 - FREQUENCY_FALL):
        said.append(f"CPU frequency {before['cpu_mhz']:.0f} → {after['cpu_mhz']:.0f} MHz")
    return "; ".join(said) or None


def wait_until_cool(max_state: ThermalStateName, limit_s: float, *, reader: Callable[[], dict[str, Any]] | None = None,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                    poll_s: float = WAIT_POLL_S) -> dict[str, Any]:
    """Wait until the thermal state is `max_state` or cooler, at most `limit_s` seconds: what happened, for the
    record (`waited_s`, `state`, `cool`: False when the limit passed first, None when the state is unreadable)."""
    reader = reader or read
    start = clock()
    reading = reader()
    while True:
        state = reading.get("state")
        if state is None:
            return {"cool": None, "waited_s": round(clock() - start, 1), "state": None,
                    "reason": f"did not wait: {reading.get('reason') or 'thermal state unreadable'}"}
        if STATES.index(state) <= STATES.index(max_state):
            return {"cool": True, "waited_s": round(clock() - start, 1), "state": state}
        if clock() - start >= limit_s:
            return {"cool": False, "waited_s": round(clock() - start, 1), "state": state,
                    "reason": f"still {state} after {limit_s:g} s (latency.thermal_wait_s); measured anyway"}
        sleep(min(poll_s, max(limit_s - (clock() - start), 0.0)))
        reading = reader()


def before_variant(max_state: ThermalStateName | None, limit_s: float) -> dict[str, Any]:
    """The record's `thermal` facts before a variant is measured: the wait for a cool machine (when
    `latency.max_thermal_state` asks for one) and the reading measuring starts from; `after_variant` completes it."""
    facts: dict[str, Any] = {}
    if max_state is not None:
        facts["wait"] = {"max_state": max_state, **wait_until_cool(max_state, limit_s)}
    facts["before"] = read()
    return facts


def after_variant(facts: dict[str, Any]) -> dict[str, Any]:
    """`facts` with the reading after measuring, and what rose between the two (`rose`, absent when nothing)."""
    after = read()
    hotter = rose(facts["before"], after)
    return {**facts, "after": after, **({"rose": hotter} if hotter else {})}
