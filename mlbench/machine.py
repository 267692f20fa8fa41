"""A snapshot of the machine a run happened on: results are only comparable on like machines."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata

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


def machine_words(machine: dict) -> str:
    parts = [machine.get("os"), machine.get("arch"), machine.get("cpu")]
    return " ".join(str(p) for p in parts if p) or "unknown machine"


def machine_key(machine: dict) -> tuple:
    """What makes two runs' machines alike: OS, architecture, CPU model and count (not the hostname,
    so two ephemeral CI runners of one kind count as one machine)."""
    return (machine.get("os"), machine.get("arch"), machine.get("cpu"), machine.get("cpu_count"))
