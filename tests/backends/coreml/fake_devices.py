"""Connected iPhones and iPads for tests: devicectl's listing as coremltools parses it, a scenario file for the
fake remote device (tests/fake_coremltools/coremltools/models/ml_program/experimental), and the two ways to use it:
in this process (`install`) or in mlbench's child processes (`REMOTE_SITE` first on PYTHONPATH)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import TESTS

FAKES = TESTS / "fake_coremltools" / "coremltools" / "models" / "ml_program" / "experimental"
REMOTE_SITE = TESTS / "fake_coremltools" / "remote_site"
PREFIX = "coremltools.models.ml_program.experimental."
IPHONE = ("Test iPhone", "00008130-000A1B2C3D4E5F60", "iPhone", "iPhone16,1", "18.1", "22B83")
IPAD = ("Test iPad", "00008103-0011223344556677", "iPad", "iPad14,8", "17.6", "21G80")


def devicectl_entry(name: str, udid: str, kind: str, product: str, os_version: str, build: str,
                    state: str = "connected") -> dict[str, Any]:
    """One device as `xcrun devicectl list devices -j` writes it (the fields coremltools' _DeviceCtl.get_devices
    reads, remote_device.py 923-1005, and the product type mlbench reads for the chip)."""
    return {"identifier": f"ID-{udid}",
            "deviceProperties": {"name": name, "osVersionNumber": os_version, "osBuildUpdate": build,
                                 "developerModeStatus": "enabled"},
            "hardwareProperties": {"deviceType": kind, "udid": udid, "productType": product,
                                   "marketingName": name, "platform": "iOS"},
            "connectionProperties": {"tunnelState": state}}


def write_scenario(folder: Path, devices: list[dict[str, Any]] | None = None, *, missing: bool = False,
                   behaviour: dict[str, dict[str, Any]] | None = None, outputs: list[Any] | None = None,
                   ops: list[dict[str, Any]] | None = None) -> Path:
    path = folder / "devices.json"
    path.write_text(json.dumps({
        "devicectl": "missing" if missing else {"result": {"devices": devices or []}},
        "behaviour": behaviour or {}, "outputs": outputs, "ops": ops or []}), encoding="utf-8")
    return path


def log(path: Path) -> list[dict[str, Any]]:
    log_file = Path(f"{path}.log")
    return [json.loads(line) for line in log_file.read_text().splitlines()] if log_file.exists() else []


def install(monkeypatch, scenario: Path) -> None:
    """The fake remote-device modules in this process, beside the real coremltools, reading `scenario`."""
    monkeypatch.setenv("MLBENCH_FAKE_DEVICES", str(scenario))
    sys.modules.pop("mlbench_fake_devices_scenario", None)
    for name in ("remote_device", "perf_utils"):
        spec = importlib.util.spec_from_file_location(PREFIX + name, FAKES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, PREFIX + name, module)
        spec.loader.exec_module(module)
