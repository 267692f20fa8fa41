"""Put first on a test process's PYTHONPATH: coremltools' remote-device modules are served from the fakes in
tests/fake_coremltools (remote_device, perf_utils), the rest of coremltools stays the real one, so mlbench's
children export for real and measure on the fake connected devices the scenario (MLBENCH_FAKE_DEVICES) lists."""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

FAKES = Path(__file__).resolve().parent.parent / "coremltools" / "models" / "ml_program" / "experimental"
PREFIX = "coremltools.models.ml_program.experimental."
SERVED = {PREFIX + "remote_device": FAKES / "remote_device.py", PREFIX + "perf_utils": FAKES / "perf_utils.py"}


class _FakeRemoteDevice(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        served = SERVED.get(fullname)
        return importlib.util.spec_from_file_location(fullname, served) if served is not None else None


sys.meta_path.insert(0, _FakeRemoteDevice())
