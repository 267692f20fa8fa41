"""A roofline "time-like" cost: max(FLOPs / peak FLOP/s, bytes / bandwidth) on a device class.

The device figures are a parameter (a ``Roofline`` per device); by default they come from
``mlbench/backends/apple/roofline.yaml`` (a generic reference chip, the Apple M1), which is
good enough to weigh operations against each other in cost shares. It is not a latency: no
efficiency, no fixed costs, no device switches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["ROOFLINE_PATH", "Roofline", "load_roofline", "time_like_cost"]

ROOFLINE_PATH = Path(__file__).resolve().parent.parent / "roofline.yaml"


@dataclass(frozen=True)
class Roofline:
    """One device's peaks: FLOP/s and bytes/s, with where the figures come from."""

    peak_flops: float
    bandwidth: float
    peak_source: str = ""
    peak_confidence: str = ""
    bandwidth_source: str = ""
    bandwidth_confidence: str = ""

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which an op is compute bound."""
        return self.peak_flops / self.bandwidth


@lru_cache(maxsize=4)
def load_roofline(path: str | Path | None = None) -> dict[str, Roofline]:
    """Device class -> Roofline, from a roofline YAML file (default: the reference chip)."""
    import yaml

    data = yaml.safe_load(Path(path or ROOFLINE_PATH).read_text(encoding="utf-8"))
    devices: dict[str, Roofline] = {}
    for name, d in data["devices"].items():
        devices[name] = Roofline(
            peak_flops=float(d["peak_flops"]), bandwidth=float(d["bandwidth"]),
            peak_source=" ".join(str(d.get("peak_source", "")).split()),
            peak_confidence=str(d.get("peak_confidence", "")),
            bandwidth_source=" ".join(str(d.get("bandwidth_source", "")).split()),
            bandwidth_confidence=str(d.get("bandwidth_confidence", "")),
        )
    return devices


def time_like_cost(cost: Any, device: str | None, devices: Mapping[str, Roofline] | None = None) -> float | None:
    """max(flops / peak_flops, bytes / bandwidth) in seconds, for anything with ``flops`` and ``bytes``.

    Unknown terms (None) are left out, so an op with unknown FLOPs but known bytes costs its
    memory time (a lower bound). None when both are unknown or the device has no profile.
    """
    profile = (devices if devices is not None else load_roofline()).get(device or "")
    if profile is None:
        return None
    flops, nbytes = getattr(cost, "flops", None), getattr(cost, "bytes", None)
    terms = []
    if flops is not None:
        terms.append(flops / profile.peak_flops)
    if nbytes is not None:
        terms.append(nbytes / profile.bandwidth)
    return max(terms) if terms else None
