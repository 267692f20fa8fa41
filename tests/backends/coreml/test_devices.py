"""Connected devices through the fake remote device at coremltools' boundary (tests/fake_coremltools): discovery
by kind, name or UDID, the one-line skips when devicectl cannot run or lists none, the device's model and chip,
signing from the environment or the machine's devices file (never the pipeline), and the Dask resources a Mac
with a phone attached advertises. The real coremltools on this machine answers the no-Xcode case itself."""

from __future__ import annotations

import sys

import pytest

from mlbench.backends.base import VariantSkipped
from mlbench.backends.coreml import devices
from mlbench.errors import UserError
from tests.backends.coreml.fake_devices import IPAD, IPHONE, devicectl_entry, install, log, write_scenario


@pytest.fixture
def listed(tmp_path, monkeypatch):
    """The fake devicectl listing the test's devices, installed in this process: returns the remote module."""

    def make(*entries, **options):
        install(monkeypatch, write_scenario(tmp_path, list(entries), **options))
        return devices.remote_api()

    return make


def test_connected_iphone_is_the_first_connected_one_and_its_chip_comes_from_its_product_type(listed):
    rd = listed(devicectl_entry("Old iPhone", "u-old", "iPhone", "iPhone13,2", "17.0", "21A329", state="disconnected"),
                devicectl_entry(*IPAD), devicectl_entry(*IPHONE))
    found = devices.find_device(rd, "connected:iphone")
    assert (found.name, found.udid) == (IPHONE[0], IPHONE[1])
    identity = devices.identify(rd, found)
    assert identity.facts() == {"name": "Test iPhone", "kind": "iphone", "udid": IPHONE[1], "os": "iOS",
                                "os_version": "18.1", "os_build": "22B83", "product_type": "iPhone16,1",
                                "model": "iPhone 15 Pro", "chip": "a17pro"}
    assert identity.words() == "iPhone 15 Pro (iOS 18.1 22B83, a17pro)"
    assert devices.resource_names(identity) == ["device:iphone", "device:iphone15pro"]
    ipad = devices.identify(rd, devices.find_device(rd, "connected:ipad"))
    assert (ipad.os, ipad.model, ipad.chip) == ("iPadOS", "iPad Air (M2)", "m2")


def test_a_device_by_name_or_udid_and_why_one_is_not_there(listed):
    rd = listed(devicectl_entry(*IPHONE), devicectl_entry("Lab iPad", "u-lab", "iPad", "iPad16,3", "18.0", "22A3354",
                                                          state="unavailable"))
    assert devices.find_device(rd, IPHONE[1]).name == "Test iPhone"
    assert devices.find_device(rd, "Test iPhone").udid == IPHONE[1]
    with pytest.raises(VariantSkipped) as gone:
        devices.find_device(rd, "Lab iPad")
    assert str(gone.value) == "no connected device 'Lab iPad': 'Lab iPad' is unavailable"
    with pytest.raises(VariantSkipped) as unknown:
        devices.find_device(rd, "Ann's iPhone")
    assert str(unknown.value) == "no connected device 'Ann's iPhone': devicectl lists 'Test iPhone', 'Lab iPad'"


def test_no_device_attached_is_a_skip_in_one_line(listed):
    rd = listed(devicectl_entry(*IPAD))
    with pytest.raises(VariantSkipped) as info:
        devices.find_device(rd, "connected:iphone")
    assert str(info.value) == "no connected iPhone: devicectl lists none"


def test_no_xcode_is_a_skip_in_one_line(listed, monkeypatch):
    rd = listed(missing=True)
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(VariantSkipped) as info:
        devices.find_device(rd, "connected:ipad")
    assert str(info.value) == "no connected iPad: devicectl is not installed (Xcode 15 or later, on macOS; this machine runs macOS)"


@pytest.mark.torch  # the real remote-device package imports coremltools' torch debugging utilities
@pytest.mark.skipif(sys.platform != "linux", reason="the real devicectl check answers on a machine without Xcode")
def test_the_real_coremltools_on_linux_says_devicectl_is_missing():
    pytest.importorskip("coremltools")
    rd = devices.remote_api()
    assert not hasattr(rd, "_s"), "the real module, not the fake"
    with pytest.raises(VariantSkipped) as info:
        devices.find_device(rd, "connected:iphone")
    assert str(info.value) == ("no connected iPhone: devicectl is not installed (Xcode 15 or later, on macOS; this "
                               "machine runs Linux)")


def test_an_unknown_product_type_leaves_the_chip_absent_with_the_reason(listed):
    rd = listed(devicectl_entry("Future", "u-f", "iPhone", "iPhone99,1", "27.0", "25A1"))
    identity = devices.identify(rd, devices.find_device(rd, "connected:iphone"))
    assert identity.chip is None and identity.chip_reason == ("product type iPhone99,1 is not in mlbench's table "
                                                              "(backends/apple/device_models.py)")


# -- signing: the environment or the machine's devices file, never the pipeline ------------------------------


@pytest.fixture
def no_signing(monkeypatch, tmp_path):
    for name in (devices.TEAM_ENV, devices.PROFILE_ENV, devices.BUNDLE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(devices.FILE_ENV, str(tmp_path / "devices.yaml"))
    return tmp_path / "devices.yaml"


def test_signing_missing_is_one_line_naming_the_settings(no_signing):
    with pytest.raises(UserError) as info:
        devices.signing()
    assert str(info.value) == ("signing for the ModelRunner app is not set: set MLBENCH_DEVICE_TEAM (your Apple "
                               "developer team id), or MLBENCH_DEVICE_PROFILE with MLBENCH_DEVICE_BUNDLE_ID, or "
                               f"devices.signing.team_id in {no_signing}")


def test_signing_from_the_devices_file_and_the_environment_over_it(no_signing, monkeypatch, listed):
    no_signing.write_text("devices:\n  signing:\n    team_id: FILE123\n    bundle_id: com.example.runner\n")
    assert devices.signing().team_id == "FILE123"
    monkeypatch.setenv(devices.TEAM_ENV, "ENV4567")
    chosen = devices.signing()
    assert (chosen.team_id, chosen.bundle_id) == ("ENV4567", "com.example.runner")
    rd = listed(devicectl_entry(*IPHONE))
    credentials = devices.credentials(rd, chosen)
    assert (credentials.development_team, credentials.provisioning_profile_uuid, credentials.bundle_identifier) == (
        "ENV4567", None, "com.example.runner")


def test_a_profile_needs_its_bundle_id_and_a_bad_devices_file_names_itself(no_signing, monkeypatch):
    monkeypatch.setenv(devices.PROFILE_ENV, "4f1c-profile")
    with pytest.raises(UserError) as info:
        devices.signing()
    assert str(info.value).startswith("signing: MLBENCH_DEVICE_PROFILE (or devices.signing.provisioning_profile) "
                                      "needs MLBENCH_DEVICE_BUNDLE_ID")
    no_signing.write_text("devices:\n  signing:\n    team: X\n")
    with pytest.raises(UserError) as bad:
        devices.signing()
    assert str(bad.value) == f"{no_signing}: devices.signing: unknown key 'team'; did you mean 'team_id'?"


def test_signing_keys_in_a_pipeline_are_refused(tmp_path):
    from mlbench.config.pipeline import PipelineConfig

    with pytest.raises(ValueError, match="unknown key 'team_id'"):
        PipelineConfig.model_validate({
            "version": 1, "name": "x", "models": [{"name": "m", "source": "m.py:M", "inputs": [
                {"name": "x", "shape": [1, 4]}]}],
            "targets": [{"backend": "coreml", "device": "connected:iphone", "team_id": "ABC"}]})


def test_the_fake_logs_what_was_asked(listed, tmp_path):
    rd = listed(devicectl_entry(*IPHONE))
    devices.find_device(rd, "connected:iphone")
    assert [e["event"] for e in log(tmp_path / "devices.json")] == ["devicectl"]


def test_mlbench_devices_lists_them_and_prints_dask_resources(listed, capsys):
    from mlbench.cli.main import main

    listed(devicectl_entry(*IPHONE), devicectl_entry(*IPAD), devicectl_entry("Off", "u-off", "iPhone", "iPhone15,2",
                                                                              "17.0", "21A1", state="disconnected"))
    assert main(["devices", "--resources"]) == 0
    assert capsys.readouterr().out == "device:iphone=1 device:iphone15pro=1 device:ipad=1 device:ipadairm2=1\n"
    assert main(["devices"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Test iPhone  {IPHONE[1]}  iPhone 15 Pro (iOS 18.1 22B83, a17pro)",
        f"Test iPad  {IPAD[1]}  iPad Air (M2) (iPadOS 17.6 21G80, m2)"]


def test_mlbench_devices_without_xcode_says_why(listed, capsys):
    from mlbench.cli.main import main

    listed(missing=True)
    assert main(["devices", "--resources"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "\n" and captured.err.startswith("no connected devices: devicectl is not installed")
