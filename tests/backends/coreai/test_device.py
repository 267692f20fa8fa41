"""Core AI on macOS 27, driven on any OS through a fake `coreai` put at the import boundary: each compute-units
value becomes its SpecializationOptions, the asset is loaded with them, timed with the usual loop, and its
outputs verified as measured figures; placement stays absent with the reason."""

from __future__ import annotations

import sys
import types
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlbench.config.pipeline import PipelineConfig
from mlbench.matrix import Variant

pytestmark = pytest.mark.torch

CONFIG = PipelineConfig.model_validate({
    "version": 1, "name": "fake", "targets": [{"backend": "coreai"}],
    "models": [{"name": "m", "source": "m.py:M", "inputs": [{"name": "x", "shape": [1, 4]}]}],
    "latency": {"warmup": 1, "repeats": 3, "min_time_s": 0.0},
})


def fake_coreai(calls: list[tuple]) -> dict[str, types.ModuleType]:
    """coreai.runtime (ComputeUnitKind, SpecializationOptions, NDArray) and coreai.authoring (AIModelAsset)."""
    runtime = types.ModuleType("coreai.runtime")
    authoring = types.ModuleType("coreai.authoring")
    package = types.ModuleType("coreai")
    package.runtime, package.authoring = runtime, authoring  # type: ignore[attr-defined]

    class ComputeUnitKind:
        gpu = staticmethod(lambda: "GPU")
        neural_engine = staticmethod(lambda: "NE")

    class SpecializationOptions:
        def __init__(self, name: str) -> None:
            self.name = name

        def __str__(self) -> str:
            return self.name

        cpu_only = classmethod(lambda cls: cls("cpu_only"))
        default = classmethod(lambda cls: cls("default"))
        from_preferred_compute_unit_kind = classmethod(lambda cls, kind: cls(f"preferred {kind}"))

    class NDArray:
        def __init__(self, data: np.ndarray) -> None:
            self.data = data

        def numpy(self) -> np.ndarray:
            return self.data

    descriptor = SimpleNamespace(input_names=["x"], output_names=["y"],
                                 input_descriptor=lambda name: SimpleNamespace(dtype="float16"))

    class Function:
        desc = descriptor

        async def __call__(self, inputs: dict) -> dict:
            calls.append(("call", inputs["x"].data.dtype.name))
            return {"y": NDArray(inputs["x"].data * 2)}

    class Model:
        def load_function(self, name: str) -> Function:
            calls.append(("load_function", name))
            return Function()

    class AIModelAsset:
        def __init__(self, path: Path) -> None:
            self.path = path

        @classmethod
        def load(cls, path: Path) -> AIModelAsset:
            calls.append(("load", str(path)))
            return cls(path)

        @asynccontextmanager
        async def executable(self, specialization_options=None):
            calls.append(("executable", str(specialization_options)))
            yield Model()
            calls.append(("released",))

    runtime.ComputeUnitKind, runtime.SpecializationOptions, runtime.NDArray = ComputeUnitKind, SpecializationOptions, NDArray  # type: ignore[attr-defined]
    authoring.AIModelAsset = AIModelAsset  # type: ignore[attr-defined]
    return {"coreai": package, "coreai.runtime": runtime, "coreai.authoring": authoring}


def variant(units: str) -> Variant:
    return Variant(model="m", backend="coreai", target_index=0, artifact_axes=("precision", "optimize"), fixed="{}",
                   axes=(("precision", "float16"), ("compute_units", units), ("optimize", "none")))


def loaded():
    torch = pytest.importorskip("torch")
    from mlbench.config.models import ModelSpec
    from mlbench.sources.loading import LoadedModel

    spec = ModelSpec.model_validate({"name": "m", "source": "model.py:M", "inputs": [{"name": "x", "shape": [1, 4]}]})
    return LoadedModel(spec=spec, module=torch.nn.Identity(), example_inputs=[torch.ones(1, 4)],
                       reference=[("y", np.full((1, 4), 2.0))])


@pytest.mark.parametrize(("units", "options"), [
    ("cpu_only", "cpu_only"), ("cpu_and_gpu", "preferred GPU"), ("cpu_and_ne", "preferred NE"), ("all", "default"),
])
def test_compute_units_load_the_asset_with_their_specialization_options(monkeypatch, tmp_path, units, options):
    from mlbench.backends.coreai.device import measure_on_device

    calls: list[tuple] = []
    for name, module in fake_coreai(calls).items():
        monkeypatch.setitem(sys.modules, name, module)
    result = measure_on_device(tmp_path / "model.aimodel", loaded(), variant(units), CONFIG, {})
    assert calls[:3] == [("load", str(tmp_path / "model.aimodel")), ("executable", options), ("load_function", "main")]
    assert calls[-1] == ("released",)
    assert {c for c in calls if c[0] == "call"} == {("call", "float16")}  # inputs cast to what the function takes
    assert result.latency is not None and len(result.latency.samples) >= 3
    assert result.metrics["latency.median"].source == "measured" and result.metrics["load_time"].value >= 0
    assert result.verify is not None and result.verify.source == "measured" and result.verify.max_abs == 0.0
    assert result.details["session"] == {"compute_units": units, "options": options}
    assert result.details["placement"]["absent"].startswith("Core AI tells no placement")
