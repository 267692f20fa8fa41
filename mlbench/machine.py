"""A snapshot of the machine a run happened on: results are only comparable on like machines."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from typing import Any

from mlbench import __version__
from mlbench.cpus import available_cpus

CORE_PACKAGES = ("mlbench", "numpy", "pydantic")
"""Always recorded; each backend adds the packages its figures depend on (its spec's `packages`)."""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            import subprocess

            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or "unknown"


def package_version(package: str) -> str | None:
    """An installed package's version from its metadata (importing nothing), or None."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def packages() -> tuple[str, ...]:
    from mlbench.plugins.registry import packages as backend_packages

    return tuple(dict.fromkeys([CORE_PACKAGES[0], *backend_packages(), *CORE_PACKAGES[1:]]))


def snapshot() -> dict[str, object]:
    """OS, CPU, Python and tool versions (read from package metadata: nothing heavy is imported)."""
    return {
        "hostname": socket.gethostname(),
        "os": platform.system(),
        "os_release": platform.release(),
        "os_version": platform.mac_ver()[0] or platform.version(),
        "arch": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": available_cpus(),  # what this run could use: affinity and container quota honoured
        "cpu_count_host": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,  # a busy machine skews timings
        # mlbench's own version from the code that runs (its distribution is called mlbench-ondevice)
        "packages": {name: __version__ if name == "mlbench" else package_version(name) for name in packages()},
    }


def with_devices(machine: dict, records: list[Any]) -> dict:
    """The snapshot with the connected devices the run's records were measured on (`devices`: each device's facts
    as its records keep them, `details.device`), and whether any figure was timed on this machine itself
    (`timed_here`): a run timed only on devices is keyed on them, not on the Mac they were attached to."""
    devices = {d["udid"]: d for r in records if isinstance(d := r.details.get("device"), dict) and "udid" in d}
    if not devices:
        return machine
    here = any(r.status == "ok" and r.latency is not None and "device" not in r.details for r in records)
    return {**machine, "devices": list(devices.values()), "timed_here": here}


def _device_words(device: dict) -> str:
    chip = f", {device['chip']}" if device.get("chip") else ""
    what = device.get("model") or device.get("product_type") or device.get("kind", "device")
    return f"{what} ({device.get('os', '')} {device.get('os_version', '')} {device.get('os_build', '')}{chip})"


def machine_words(machine: dict) -> str:
    parts = [machine.get("os"), machine.get("arch"), machine.get("cpu")]
    host = " ".join(str(p) for p in parts if p) or "unknown machine"
    devices = machine.get("devices") or []
    return " + ".join([*(_device_words(d) for d in devices), host]) if devices else host


def _device_key(device: dict) -> tuple:
    return tuple(str(device.get(k) or "") for k in ("product_type", "chip", "os_version", "os_build"))


def machine_key(machine: dict) -> tuple:
    """What makes two runs' machines alike: OS, architecture, CPU model and count (not the hostname,
    so two ephemeral CI runners of one kind count as one machine); for a run timed only on connected devices, the
    devices' product types, chips and OS builds (not the Mac they were attached to)."""
    host = (machine.get("os"), machine.get("arch"), machine.get("cpu"), machine.get("cpu_count"))
    devices = tuple(sorted(_device_key(d) for d in machine.get("devices") or []))
    if not devices:
        return host
    return ("devices", devices) if not machine.get("timed_here", True) else (*host, devices)
