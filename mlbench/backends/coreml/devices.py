"""Connected iPhones and iPads: which device a variant's `device:` names, the signing the ModelRunner app needs,
and what the record says of the device (model, chip, OS, build).

Written against coremltools 9.0's `coremltools/models/ml_program/experimental/remote_device.py`: `Device`
(name, type, identifier, udid, os_version, os_build_number, developer_mode_state, state, session),
`Device.get_devices()` and `Device.get_connected_devices(DeviceType)` (through `xcrun devicectl list devices`),
`DeviceType`, `DeviceState` and `AppSigningCredentials(development_team, provisioning_profile_uuid,
bundle_identifier)`. The product type and marketing name are not kept by `Device`: they are read from the same
`devicectl` JSON through `_DeviceCtl._run_command` (private; absent, with the reason, if it moves).

Signing never comes from the pipeline file, which is checked into a repository: it comes from the environment
(`MLBENCH_DEVICE_TEAM`, `MLBENCH_DEVICE_PROFILE`, `MLBENCH_DEVICE_BUNDLE_ID`) or from a `devices:` section in a
file on the machine (`MLBENCH_DEVICES_FILE`, else `devices.yaml` in mlbench's user config folder).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from mlbench.backends.apple.device_models import device_chip
from mlbench.backends.base import VariantSkipped
from mlbench.config.base import StrictModel
from mlbench.errors import UserError

KINDS = {"connected:iphone": ("IPHONE", "iPhone"), "connected:ipad": ("IPAD", "iPad")}
TEAM_ENV, PROFILE_ENV, BUNDLE_ENV, FILE_ENV = ("MLBENCH_DEVICE_TEAM", "MLBENCH_DEVICE_PROFILE",
                                               "MLBENCH_DEVICE_BUNDLE_ID", "MLBENCH_DEVICES_FILE")


def remote_api() -> Any:
    """coremltools' remote-device module; VariantSkipped when this coremltools has none (before 9.0)."""
    import importlib

    try:
        remote_device = importlib.import_module("coremltools.models.ml_program.experimental.remote_device")
    except ImportError as exc:
        raise VariantSkipped(f"this coremltools cannot measure on a connected device (coremltools 9.0 or later has "
                             f"coremltools.models.ml_program.experimental.remote_device): {exc}") from None
    return remote_device


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def find_device(rd: Any, wanted: str) -> Any:
    """The connected device `wanted` names (`connected:iphone`, `connected:ipad`, a name or a UDID); VariantSkipped,
    in one line, when devicectl cannot run here or lists no such device connected."""
    kind, label = KINDS.get(wanted, (None, f"device '{wanted}'"))
    what = f"no connected {label}"
    try:
        if kind is not None:
            found = rd.Device.get_connected_devices(getattr(rd.DeviceType, kind))
            if not found:
                raise VariantSkipped(f"{what}: devicectl lists none")
            return found[0]
        devices = rd.Device.get_devices()
    except VariantSkipped:
        raise
    except Exception as exc:  # noqa: BLE001 - no Xcode, no macOS, devicectl failing: the variant cannot run here
        raise VariantSkipped(f"{what}: {devicectl_unavailable(exc)}") from None
    named = [d for d in devices if wanted in (d.name, d.udid, d.identifier)]
    if not named:
        listed = ", ".join(f"'{d.name}'" for d in devices) or "none"
        raise VariantSkipped(f"{what}: devicectl lists {listed}")
    device = named[0]
    if device.state != rd.DeviceState.CONNECTED:
        raise VariantSkipped(f"{what}: '{device.name}' is {device.state.value}")
    return device


def devicectl_unavailable(exc: BaseException) -> str:
    """Why devicectl could not list devices, in a few words."""
    import sys

    line = first_line(exc)
    if "devicectl" in line and "required" in line:
        system = {"linux": "Linux", "win32": "Windows", "darwin": "macOS"}.get(sys.platform, sys.platform)
        return f"devicectl is not installed (Xcode 15 or later, on macOS; this machine runs {system})"
    return f"devicectl failed ({line})"


@dataclass(frozen=True)
class DeviceIdentity:
    """What a record keeps of the device it was measured on: history, compare and calibrate key on it."""

    name: str
    kind: str
    udid: str
    os: str
    os_version: str
    os_build: str
    product_type: str | None
    model: str | None
    chip: str | None
    chip_reason: str | None = None

    def kind_name(self) -> str:
        return {"iphone": "iPhone", "ipad": "iPad", "mac": "Mac"}.get(self.kind, self.kind)

    def facts(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def words(self) -> str:
        chip = f", {self.chip}" if self.chip else ""
        return f"{self.model or self.product_type or self.kind} ({self.os} {self.os_version} {self.os_build}{chip})"


def identify(rd: Any, device: Any) -> DeviceIdentity:
    """The device's model and chip (from devicectl's product type) with its OS and build."""
    kind = device.type.value
    os_name = {"iphone": "iOS", "ipad": "iPadOS", "mac": "macOS"}.get(kind, kind)
    product, reason = None, None
    try:  # coremltools' Device keeps no product type: devicectl's JSON has it (remote_device.py _DeviceCtl.get_devices)
        listing = rd._DeviceCtl._run_command("xcrun devicectl list devices")
        for entry in listing.get("result", {}).get("devices", []):
            hardware = entry.get("hardwareProperties", {})
            if hardware.get("udid") == device.udid:
                product = hardware.get("productType")
    except Exception as exc:  # noqa: BLE001 - the chip is then unknown, and the record says why
        reason = f"devicectl's product type could not be read ({first_line(exc)})"
    model, chip = device_chip(product)
    if chip is None and reason is None:
        reason = (f"product type {product} is not in mlbench's table (backends/apple/device_models.py)" if product
                  else "devicectl named no product type")
    return DeviceIdentity(name=device.name, kind=kind, udid=device.udid, os=os_name, os_version=device.os_version,
                          os_build=device.os_build_number, product_type=product, model=model, chip=chip,
                          chip_reason=reason)


class Signing(StrictModel):
    """How the ModelRunner app is signed (coremltools' AppSigningCredentials)."""

    team_id: str | None = Field(default=None, description="Apple developer team id: Xcode manages the profile.")
    provisioning_profile: str | None = Field(default=None, description="A provisioning profile's UUID.")
    bundle_id: str | None = Field(default=None, description="The app's bundle id (must match the profile's).")


class DevicesFile(StrictModel):
    """A machine's own device settings (never in a pipeline file): `devices: {signing: {...}}`."""

    devices: dict[str, Signing] = Field(description="signing: the ModelRunner app's signing settings.")


def devices_file() -> Path:
    explicit = os.environ.get(FILE_ENV)
    if explicit:
        return Path(explicit)
    import platformdirs

    return Path(platformdirs.user_config_dir("mlbench")) / "devices.yaml"


def signing() -> Signing:
    """Signing from the environment, else the devices file; one line naming the settings when neither has it."""
    path = devices_file()
    stored = Signing()
    if path.is_file():
        import yaml

        try:
            stored = DevicesFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {}).devices.get(
                "signing", Signing())
        except yaml.YAMLError as exc:
            raise UserError(f"not YAML: {first_line(exc)}", file=path) from None
        except ValidationError as exc:
            error = exc.errors()[0]
            place = ".".join(str(part) for part in error["loc"])
            raise UserError(f"{place}: {error['msg']}", file=path) from None
    chosen = Signing(team_id=os.environ.get(TEAM_ENV) or stored.team_id,
                     provisioning_profile=os.environ.get(PROFILE_ENV) or stored.provisioning_profile,
                     bundle_id=os.environ.get(BUNDLE_ENV) or stored.bundle_id)
    if not chosen.team_id and not chosen.provisioning_profile:
        raise UserError(f"signing for the ModelRunner app is not set: set {TEAM_ENV} (your Apple developer team id), "
                        f"or {PROFILE_ENV} with {BUNDLE_ENV}, or devices.signing.team_id in {path}")
    if chosen.provisioning_profile and not chosen.bundle_id:
        raise UserError(f"signing: {PROFILE_ENV} (or devices.signing.provisioning_profile) needs {BUNDLE_ENV} (or "
                        f"devices.signing.bundle_id), the bundle id the profile names; in {path}")
    return chosen


def credentials(rd: Any, chosen: Signing) -> Any:
    return rd.AppSigningCredentials(development_team=chosen.team_id, provisioning_profile_uuid=chosen.provisioning_profile,
                                    bundle_identifier=chosen.bundle_id)


def resource_names(identity: DeviceIdentity) -> list[str]:
    """The Dask worker resources a Mac with this device attached advertises: `device:<kind>` and, where the model is
    known, `device:<model>` (`device:iphone`, `device:iphone15pro`)."""
    names = [f"device:{identity.kind}"]
    if identity.model:
        slug = "".join(c for c in identity.model.lower() if c.isalnum())
        names.append(f"device:{slug}")
    return names
