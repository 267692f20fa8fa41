"""`mlbench devices [--resources]`: the iPhones and iPads devicectl lists as connected to this Mac, and the Dask
worker resources that advertise them (a thin layer over `devices.py`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    from mlbench.plugins.commands import add_command

    p = add_command(
        subparsers, "devices", "list the iPhones and iPads connected to this Mac, as Core ML's device: sees them",
        "Lists each connected iPhone and iPad (through coremltools' remote device and devicectl) with its model,\n"
        "chip, OS and build. With --resources, prints the Dask worker resources that advertise them, for\n"
        "  dask worker tcp://scheduler:8786 --resources \"measure=1 $(mlbench devices --resources)\"\n"
        "so a target with `runs_on: device:iphone15pro` is measured only on a worker with that phone attached.")
    p.add_argument("--resources", action="store_true", help="print Dask resources (device:iphone=1 ...) only")
    p.set_defaults(func=run)


def connected() -> tuple[list[Any], str | None]:
    """(identities of the connected iPhones and iPads, why none could be listed)."""
    from mlbench.backends.base import VariantSkipped
    from mlbench.backends.coreml import devices

    try:
        rd = devices.remote_api()
        found = [d for kind in ("IPHONE", "IPAD") for d in rd.Device.get_connected_devices(getattr(rd.DeviceType, kind))]
    except VariantSkipped as exc:
        return [], str(exc)
    except Exception as exc:  # noqa: BLE001 - no Xcode, no macOS: nothing to advertise, and why
        return [], devices.devicectl_unavailable(exc)
    return [devices.identify(rd, d) for d in found], None


def resources_line(identities: list[Any]) -> str:
    from mlbench.backends.coreml.devices import resource_names

    names = dict.fromkeys(name for identity in identities for name in resource_names(identity))
    return " ".join(f"{name}=1" for name in names)


def run(args: argparse.Namespace) -> int:
    import sys

    identities, why = connected()
    if args.resources:
        print(resources_line(identities))
        if why:
            print(f"no connected devices: {why}", file=sys.stderr)
        return 0
    if not identities:
        print(f"no connected iPhone or iPad: {why or 'devicectl lists none'}")
        return 0
    for identity in identities:
        print(f"{identity.name}  {identity.udid}  {identity.words()}"
              + (f"  (chip unknown: {identity.chip_reason})" if identity.chip is None else ""))
    return 0
