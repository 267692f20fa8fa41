"""A fake of coremltools 9.0's `coremltools/models/ml_program/experimental/perf_utils.py` (`MLModelBenchmarker`),
for tests only, with the ModelRunner's model service behind it.

`Statistics`, `Measurement` (151-212), `benchmark_load` (265-314: each iteration a new loaded model, the first kept
as `_loaded_model`, the others unloaded), `benchmark_predict` (316-397) and `benchmark_operation_execution`
(399-484: each operation's samples are the prediction samples × its estimated cost) follow the real code. The
loaded model stands in for `RemoteMLModelAsyncWrapper` over `_RemoteMLModelService` (async_wrapper.py 314-443,
remote_device.py 2230-2570) the way coremltools' own `MockDeviceCtlSocket` does in
coremltools/test/ml_program/experimental/test_remote_device.py (49-221): loads and predictions answered with the
device's `duration`, outputs keyed by the model's output names. Durations, outputs, the compute plan and the load
at which a device goes away come from the scenario (MLBENCH_FAKE_DEVICES).
"""

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np


def _remote_device():
    """The fake remote_device, found without importing the package around it (whose __init__ imports this module)."""
    name = __name__.rsplit(".", 1)[0] + ".remote_device"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("remote_device.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_remote = _remote_device()
_s = _remote._s


def _devices():
    from coremltools.models import compute_device

    return {"cpu": compute_device.MLCPUComputeDevice, "gpu": compute_device.MLGPUComputeDevice,
            "neural_engine": compute_device.MLNeuralEngineComputeDevice}


def _device(name: str):
    cls = _devices()[name]
    return cls.__new__(cls)  # no proxy: the fake's devices are only told apart by class, as mlbench reads them


class _LoadedRemoteModel:
    """One model loaded in the ModelRunner app on the device."""

    def __init__(self, model, device) -> None:
        self.model = model
        self.device = device
        self.load_duration_in_nano_seconds = None
        self.last_predict_duration_in_nano_seconds = None
        self._predictions = 0

    async def load(self) -> None:
        _remote._RemoteMLModelService._validate_device_state(self.device)
        udid = self.device.udid
        behaviour = _s.device_settings(udid)
        state = _s.state()
        count = state["loads"].get(udid, 0) + 1
        state["loads"][udid] = count
        if behaviour.get("disconnect_at_load") == count:
            state["gone"].append(udid)
            _s.save(state)
            _s.log("disconnected", udid=udid, load=count)
            raise _remote._DeviceCtlError(message="(fake) the device is no longer connected", error_code=-1)
        _s.save(state)
        loads = behaviour.get("load_ms", [100.0, 20.0])
        self.load_duration_in_nano_seconds = int(loads[min(count - 1, len(loads) - 1)] * 1e6)
        _s.log("load", udid=udid, compute_units=self.model.compute_unit.name, load=count)

    async def unload(self) -> None:
        _s.log("unload", udid=self.device.udid)

    def make_state_if_needed(self):
        return None

    async def predict(self, inputs: dict[str, Any], state=None) -> dict[str, np.ndarray]:
        _remote._RemoteMLModelService._validate_device_state(self.device)
        behaviour = _s.device_settings(self.device.udid)
        durations = behaviour.get("predict_ms", [2.0])
        self.last_predict_duration_in_nano_seconds = int(durations[self._predictions % len(durations)] * 1e6)
        self._predictions += 1
        names = [output.name for output in self.model.get_spec().description.output]
        outputs = _s.scenario().get("outputs") or [np.zeros(1).tolist() for _ in names]
        return {name: np.asarray(value, dtype=np.float32) for name, value in zip(names, outputs)}


class MLModelBenchmarker:
    @dataclass(frozen=True)
    class Statistics:
        minimum: float
        maximum: float
        average: float
        std_dev: float
        median: float

        @staticmethod
        def from_values(values: list[float]) -> Optional["MLModelBenchmarker.Statistics"]:
            if len(values) == 0:
                return None
            return MLModelBenchmarker.Statistics(minimum=float(np.min(values)), maximum=float(np.max(values)),
                                                 average=float(np.mean(values)), std_dev=float(np.std(values)),
                                                 median=float(np.median(values)))

    @dataclass(frozen=True)
    class Measurement:
        statistics: Optional["MLModelBenchmarker.Statistics"]
        samples: list[float]

        @staticmethod
        def from_samples(samples: list[float]) -> "MLModelBenchmarker.Measurement":
            return MLModelBenchmarker.Measurement(statistics=MLModelBenchmarker.Statistics.from_values(samples),
                                                  samples=samples)

    @dataclass
    class OperationExecutionInfo:
        spec: Any
        path: Any
        compute_device_usage: Any
        measurement: "MLModelBenchmarker.Measurement"

    def __init__(self, model, device=None) -> None:
        self.model = model
        self.model_spec = model.get_spec()
        self.device = device
        self._loaded_model = None

    async def benchmark_load(self, iterations: int = 1) -> "MLModelBenchmarker.Measurement":
        durations = []
        for _ in range(iterations):
            loaded = _LoadedRemoteModel(self.model, self.device)
            await loaded.load()
            durations.append(loaded.load_duration_in_nano_seconds / 1e6)
            if self._loaded_model is None:
                self._loaded_model = loaded
            else:
                await loaded.unload()
        return MLModelBenchmarker.Measurement.from_samples(durations)

    async def benchmark_predict(self, inputs=None, iterations: int = 1, warmup: bool = False):
        if self._loaded_model is None:
            self._loaded_model = _LoadedRemoteModel(self.model, self.device)
            await self._loaded_model.load()
        durations = []
        for iteration in range(iterations + 1 if warmup else iterations):
            await self._loaded_model.predict(inputs)
            if iteration > 0 or not warmup:
                durations.append(self._loaded_model.last_predict_duration_in_nano_seconds / 1e6)
        _s.log("benchmark_predict", udid=self.device.udid, iterations=iterations)
        return MLModelBenchmarker.Measurement.from_samples(durations)

    async def benchmark_operation_execution(self, inputs=None, iterations: int = 1, warmup: bool = False):
        predicted = await self.benchmark_predict(inputs=inputs, iterations=iterations, warmup=warmup)
        result = []
        for op in _s.scenario().get("ops", []):
            usage = (SimpleNamespace(preferred_compute_device=_device(op["preferred"]),
                                     supported_compute_devices=[_device(d) for d in op.get("supported", [])])
                     if op.get("preferred") else None)
            cost = op.get("cost")
            samples = [sample * cost for sample in predicted.samples] if cost is not None else []
            spec = SimpleNamespace(type=op["type"], outputs=[SimpleNamespace(name=op["output"])])
            result.append(MLModelBenchmarker.OperationExecutionInfo(
                spec=spec, path=op["output"], compute_device_usage=usage,
                measurement=MLModelBenchmarker.Measurement.from_samples(samples)))
        return sorted(result, key=lambda info: (info.measurement.statistics is not None,
                                                info.measurement.statistics.median if info.measurement.statistics
                                                else None), reverse=True)
