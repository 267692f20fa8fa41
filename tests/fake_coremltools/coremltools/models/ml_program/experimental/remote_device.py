"""A fake of coremltools 9.0's `coremltools/models/ml_program/experimental/remote_device.py`, for tests only.

Names, fields and checks are the real module's (line numbers of coremltools 9.0's file): `AppSigningCredentials`
(39-73), `DeviceType` (75-114), `DeviceState` (117-151), `Device` with `get_devices` / `get_connected_devices`
(155-231) and `prepare_for_model_debugging`'s state check (362-367), `_DeviceCtl._validate`'s message (600-612),
`_DeviceCtl.get_devices`' parsing of `xcrun devicectl list devices` JSON (923-1005), the signing check of
`_AppBuilder.check_app_signing_credentials` (1141-1154) and `_RemoteMLModelService._validate_device_state`'s
message (2379-2390). What devicectl lists, and when a device goes away, come from the scenario
(MLBENCH_FAKE_DEVICES); every call is logged. The ModelRunner's model service is `perf_utils`' fake.
"""

import importlib.util
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any


def _scenario_module():
    name = "mlbench_fake_devices_scenario"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_devices_scenario.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


_s = _scenario_module()


@dataclass(frozen=True)
class AppSigningCredentials:
    development_team: str | None = ""
    provisioning_profile_uuid: str | None = None
    bundle_identifier: str | None = None


class DeviceType(Enum):
    MAC = "mac"
    IPHONE = "iphone"
    IPAD = "ipad"
    APPLETV = "apppletv"
    WATCH = "applewatch"
    HOMEPOD = "homepod"
    UNKNOWN = "unknown"

    @classmethod
    def _missing_(cls, value):
        return DeviceType.UNKNOWN


class DeviceState(Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"
    DISCONNECTED = "disconnected"
    UNKNOWN = "unknown"

    @classmethod
    def _missing_(cls, value):
        return DeviceState.UNKNOWN


class _DeviceCtlError(Exception):
    def __init__(self, message, error_code=None):
        self.message = message
        self.error_code = error_code
        super().__init__(message)


class _AppSession:
    """The launched ModelRunner app: alive until the scenario says its device went away."""

    def __init__(self, udid: str) -> None:
        self.udid = udid

    @property
    def is_alive(self) -> bool:
        return self.udid not in _s.state()["gone"]


@dataclass(frozen=True)
class Device:
    name: str
    type: DeviceType
    identifier: str
    udid: str
    os_version: str
    os_build_number: str
    developer_mode_state: str
    state: DeviceState
    session: Any | None

    @staticmethod
    def get_devices() -> list["Device"]:
        return _DeviceCtl.get_devices()

    @staticmethod
    def get_connected_devices(device_type: DeviceType) -> list["Device"]:
        def is_device_connected(device: Device) -> bool:
            return device.state == DeviceState.CONNECTED and device.type == device_type

        return [device for device in Device.get_devices() if is_device_connected(device=device)]

    async def prepare_for_model_debugging(self, credentials=None, working_directory=None, clean=False):
        _s.log("prepare_for_model_debugging", udid=self.udid, team=getattr(credentials, "development_team", None),
               profile=getattr(credentials, "provisioning_profile_uuid", None),
               bundle=getattr(credentials, "bundle_identifier", None), working_directory=str(working_directory))
        if not (self.state == DeviceState.CONNECTED):
            raise ValueError("The device cannot be used for model debugging. "
                             f"Current state: {self.state}. Required: State must be CONNECTED.")
        if credentials is not None and credentials.provisioning_profile_uuid is None and credentials.development_team is None:
            raise ValueError("Invalid signing credentials: Either 'provisioning_profile_uuid' or 'development_team' "
                             "must be provided.")
        return Device(name=self.name, type=self.type, identifier=self.identifier, udid=self.udid, state=self.state,
                      os_version=self.os_version, os_build_number=self.os_build_number,
                      developer_mode_state=self.developer_mode_state, session=_AppSession(self.udid))


class _DeviceCtl:
    @staticmethod
    def _validate():
        if _s.scenario().get("devicectl") == "missing":
            raise ValueError("The 'devicectl' command is required. Please ensure that you have the latest version of "
                             "Xcode Command Line Tools installed.")

    @staticmethod
    def _run_command(command: str):
        _DeviceCtl._validate()
        _s.log("devicectl", command=command)
        listing = _s.scenario()["devicectl"]
        gone = _s.state()["gone"]
        for device in listing["result"]["devices"]:  # a device that went away is listed as devicectl lists it
            if device.get("hardwareProperties", {}).get("udid") in gone:
                device["connectionProperties"]["tunnelState"] = "disconnected"
        return listing

    @staticmethod
    def get_devices() -> list[Device]:
        json_data = _DeviceCtl._run_command("xcrun devicectl list devices")
        result = json_data.get("result", None)
        if result is None:
            raise _DeviceCtlError("No 'result' field in the JSON data")
        devices = result.get("devices", None)
        found = []
        for device in devices:
            device_properties = device.get("deviceProperties", {})
            hardware_properties = device.get("hardwareProperties", {})
            connection_properties = device.get("connectionProperties", {})
            identifier = device.get("identifier", "")
            kind = DeviceType(hardware_properties.get("deviceType", "").lower())
            udid = hardware_properties.get("udid", "")
            name = device_properties.get("name", "")
            if len(identifier) == 0 or len(udid) == 0 or len(name) == 0 or kind == DeviceType.UNKNOWN:
                continue
            found.append(Device(
                name=name, identifier=identifier, os_version=device_properties.get("osVersionNumber", ""),
                os_build_number=device_properties.get("osBuildUpdate", ""),
                developer_mode_state=device_properties.get("developerModeStatus", ""), type=kind,
                state=DeviceState(connection_properties.get("tunnelState", DeviceState.UNKNOWN.value).lower()),
                udid=udid, session=None))
        return found


class ComputePlan:
    """Named by compute_plan_utils' import; the fake benchmarker builds its plan itself."""


class _RemoteMLModelService:
    @staticmethod
    def _validate_device_state(device: Device):
        if device.session is None:
            raise ValueError("Device is not prepared for debugging. Please call `prepare_for_model_debugging()` on the "
                             "device before attempting to load the model.")
        if not device.session.is_alive:
            raise ValueError("The device session is not active. Please call `prepare_for_model_debugging()` on the "
                             "device to establish a new session.")
