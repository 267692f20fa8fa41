"""The thermal state: Linux's sysfs read from a fake tree (this machine's own may expose nothing), macOS's
ProcessInfo.thermalState through a fake pyobjc, what counts as a rise, and the wait for a cool machine."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from mlbench import thermal


def sysfs(root: Path, *, temps: dict[str, float], trips: dict[str, list[tuple[str, float]]] | None = None,
          mhz: list[float] | None = None, throttles: list[int] | None = None) -> Path:
    """A fake /sys with thermal zones (°C), their trip points, per-CPU frequencies and throttle counters."""
    for index, (kind, celsius) in enumerate(temps.items()):
        zone = root / f"sys/class/thermal/thermal_zone{index}"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text(kind + "\n")
        (zone / "temp").write_text(f"{int(celsius * 1000)}\n")
        for n, (trip_type, trip_c) in enumerate((trips or {}).get(kind, [])):
            (zone / f"trip_point_{n}_type").write_text(trip_type + "\n")
            (zone / f"trip_point_{n}_temp").write_text(f"{int(trip_c * 1000)}\n")
    for cpu, freq in enumerate(mhz or []):
        folder = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "scaling_cur_freq").write_text(f"{int(freq * 1000)}\n")
    for cpu, count in enumerate(throttles or []):
        folder = root / f"sys/devices/system/cpu/cpu{cpu}/thermal_throttle"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "core_throttle_count").write_text(f"{count}\n")
        (folder / "package_throttle_count").write_text("1\n")
    return root


TRIPS = {"x86_pkg_temp": [("passive", 90.0), ("critical", 105.0)]}


@pytest.mark.parametrize("celsius, state", [(50.0, "nominal"), (81.0, "fair"), (92.0, "serious"), (106.0, "critical")])
def test_linux_state_comes_from_the_zones_trip_points(tmp_path, celsius, state):
    root = sysfs(tmp_path, temps={"x86_pkg_temp": celsius, "acpitz": 40.0}, trips=TRIPS, mhz=[2400, 2600],
                 throttles=[3, 4])
    reading = thermal.read_linux(root)
    assert reading["state"] == state
    assert reading["zones"] == {"x86_pkg_temp": celsius, "acpitz": 40.0}
    assert reading["cpu_mhz"] == 2500.0 and reading["throttle_events"] == 3 + 1 + 4 + 1
    assert "reason" not in reading


def test_nothing_readable_is_absent_with_every_reason(tmp_path):
    reading = thermal.read_linux(tmp_path)
    assert reading == {"method": "linux sysfs", "state": None, "cpu_mhz": None, "throttle_events": None, "zones": {},
                       "reason": "no cpufreq (/sys/devices/system/cpu/cpu*/cpufreq): CPU frequency unread; no "
                       "thermal_throttle counters (x86 only); no thermal zone with a trip point (/sys/class/thermal): "
                       "thermal state unread"}
    assert not thermal.readable(reading)
    zones_only = thermal.read_linux(sysfs(tmp_path / "z", temps={"acpitz": 40.0}))
    assert zones_only["state"] is None and zones_only["reason"].endswith("thermal zones have no trip points: thermal "
                                                                          "state not derived")
    assert thermal.readable(zones_only)


def test_a_rise_names_what_rose_and_nothing_else(tmp_path):
    cool = thermal.read_linux(sysfs(tmp_path / "a", temps={"x86_pkg_temp": 50.0}, trips=TRIPS, mhz=[3000, 3000],
                                    throttles=[0]))
    hot = thermal.read_linux(sysfs(tmp_path / "b", temps={"x86_pkg_temp": 95.0}, trips=TRIPS, mhz=[2000, 2000],
                                   throttles=[7]))
    assert thermal.rose(cool, hot) == "thermal state nominal → serious; 7 CPU throttle events; CPU frequency 3000 → 2000 MHz"
    assert thermal.rose(hot, cool) is None and thermal.rose(cool, cool) is None
    slightly = {**cool, "cpu_mhz": 2800.0}  # within FREQUENCY_FALL: idle-state noise, not heat
    assert thermal.rose(cool, slightly) is None


@pytest.mark.parametrize("raw, state", [(0, "nominal"), (1, "fair"), (2, "serious"), (3, "critical")])
def test_macos_reads_process_info_thermal_state_through_pyobjc(monkeypatch, raw, state):
    info = types.SimpleNamespace(thermalState=lambda: raw)
    foundation = types.ModuleType("Foundation")
    foundation.NSProcessInfo = types.SimpleNamespace(processInfo=lambda: info)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "Foundation", foundation)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert thermal.read() == {"method": "ProcessInfo.thermalState", "state": state, "raw": raw}


def test_macos_without_pyobjc_is_absent_with_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "Foundation", None)  # import fails
    reading = thermal.read_macos()
    assert reading["state"] is None
    assert reading["reason"] == ("pyobjc (pyobjc-framework-Cocoa) is not installed: "
                                 "pip install 'mlbench-ondevice[macos]'")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_when_the_machine_cools_and_says_how_long_it_took():
    clock = Clock()
    states = iter(["serious", "serious", "fair", "nominal"])
    facts = thermal.wait_until_cool("nominal", 60, reader=lambda: {"state": next(states)}, sleep=clock.sleep,
                                    clock=clock, poll_s=2)
    assert facts == {"cool": True, "waited_s": 6.0, "state": "nominal"}
    assert thermal.wait_until_cool("fair", 60, reader=lambda: {"state": "fair"}, sleep=clock.sleep,
                                   clock=clock)["waited_s"] == 0.0


def test_the_wait_gives_up_at_its_limit_and_an_unreadable_state_waits_for_nothing():
    clock = Clock()
    facts = thermal.wait_until_cool("nominal", 5, reader=lambda: {"state": "critical"}, sleep=clock.sleep,
                                    clock=clock, poll_s=2)
    assert facts == {"cool": False, "waited_s": 5.0, "state": "critical",
                     "reason": "still critical after 5 s (latency.thermal_wait_s); measured anyway"}
    unread = thermal.wait_until_cool("nominal", 5, reader=lambda: {"state": None, "reason": "no zones"},
                                     sleep=clock.sleep, clock=clock)
    assert unread == {"cool": None, "waited_s": 0.0, "state": None, "reason": "did not wait: no zones"}


def test_a_variant_records_its_readings_either_side(monkeypatch):
    readings = iter([{"state": "nominal"}, {"state": "nominal"}, {"state": "serious"}])
    monkeypatch.setattr(thermal, "read", lambda: next(readings))
    facts = thermal.before_variant("nominal", 10)
    assert facts["wait"]["cool"] is True and facts["before"] == {"state": "nominal"}
    assert thermal.after_variant(facts)["rose"] == "thermal state nominal → serious"
