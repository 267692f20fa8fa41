"""Whether Core AI's wheels can exist on this machine, and are installed: one line saying why not.

coreai-core ships cp311+ wheels for manylinux_2_34 x86_64 and macOS arm64 only (no Linux arm64, no older
glibc, no Windows); coreai-torch and coreai-opt need it.
"""

from __future__ import annotations

import functools
import importlib.util
import platform
import sys

PACKAGES = ("coreai-core", "coreai-torch", "coreai-opt")
MODULES = ("coreai", "coreai_torch", "coreai_opt")
INSTALL = "pip install 'mlbench-ondevice[coreai]'"


def platform_reason(system: str, machine: str, python: tuple[int, int], glibc: str | None) -> str | None:
    """Why Core AI's wheels do not exist for this platform; None when they do."""
    if python < (3, 11):
        return f"Core AI's wheels need Python 3.11 or later; this is Python {python[0]}.{python[1]}"
    machine = machine.lower()
    if system == "linux":
        if machine not in ("x86_64", "amd64"):
            return f"Core AI has no wheel for Linux {machine} (only Linux x86_64 and macOS arm64)"
        if glibc is not None and tuple(int(p) for p in glibc.split(".")[:2] if p.isdigit()) < (2, 34):
            return f"Core AI's Linux wheel needs glibc 2.34 or later; this machine has glibc {glibc}"
        return None
    if system == "darwin":
        return None if machine == "arm64" else f"Core AI has no wheel for macOS {machine} (only Apple silicon)"
    return f"Core AI has no wheel for {system} (only Linux x86_64 and macOS arm64)"


@functools.cache
def unavailable() -> str | None:
    """One line on why Core AI cannot run here (platform, then installation); None when it can."""
    libc, version = platform.libc_ver()
    why = platform_reason(sys.platform if sys.platform != "linux2" else "linux", platform.machine(),
                          sys.version_info[:2], version if libc == "glibc" and version else None)
    if why is not None:
        return why
    missing = [package for package, module in zip(PACKAGES, MODULES) if importlib.util.find_spec(module) is None]
    if missing:
        return f"{', '.join(missing)} not installed ({INSTALL})"
    return None
