"""The macOS measurement path, driven on any OS through a fake `coremltools` put at the import boundary:
coremltools ≥ 8.3 is required, each artifact is compiled once into a cache beside its package and
reused, the compiled model is what gets loaded and timed, compile time is apart from load time, and
the compute-plan child's protocol is a file of its own."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlbench.backends.apple.analysis.records import TensorDescription
from mlbench.backends.base import VariantSkipped
from mlbench.backends.coreml.runtime import LOAD_ORDER, measure_package
from mlbench.config.pipeline import PipelineConfig
from mlbench.matrix import Variant


class FakeCoremltools(types.ModuleType):
    """The parts of coremltools the runtime calls, recording each call."""

    def __init__(self, version: str) -> None:
        super().__init__("coremltools")
        self.__version__ = version
        self.calls: list[tuple] = []
        self.ComputeUnit = SimpleNamespace(ALL="ALL", CPU_ONLY="CPU_ONLY")
        calls = self.calls

        def compile_model(package: str, dest: str) -> str:
            calls.append(("compile_model", package, dest))
            Path(dest).mkdir(parents=True)
            (Path(dest) / "model.espresso.net").write_text("{}")
            return dest

        class CompiledMLModel:
            def __init__(self, path: str, compute_units: str) -> None:
                calls.append(("CompiledMLModel", path, compute_units))
                self._proxy = SimpleNamespace(get_last_predict_duration_in_nano_seconds=lambda: 250_000)

            def predict(self, inputs: dict) -> dict:
                return {"y": inputs["x"] * 2.0}

        self.models = SimpleNamespace(CompiledMLModel=CompiledMLModel, utils=SimpleNamespace(compile_model=compile_model))


CONFIG = PipelineConfig.model_validate({
    "version": 1, "name": "fake", "targets": [{"backend": "coreml"}],
    "models": [{"name": "m", "source": "m.py:M", "inputs": [{"name": "x", "shape": [1, 4]}]}],
    "latency": {"warmup": 1, "repeats": 3, "min_time_s": 0.0},
})


def variant(units: str) -> Variant:
    return Variant(model="m", backend="coreml", target_index=0, artifact_axes=("precision", "optimize"), fixed="{}",
                   axes=(("precision", "float32"), ("compute_units", units), ("optimize", "none")))


def artifact(tmp_path: Path):
    from mlbench.backends.coreml.artifact import CoremlArtifact

    package = tmp_path / "entry" / "model.mlpackage"
    package.mkdir(parents=True)
    analysis = SimpleNamespace(inputs=[TensorDescription(name="x", kind="tensor", dtype="fp32")],
                               outputs=[TensorDescription(name="y", kind="tensor", dtype="fp32")])
    return CoremlArtifact(package, analysis)  # type: ignore[arg-type]


def loaded():
    torch = pytest.importorskip("torch")
    from mlbench.config.models import ModelSpec
    from mlbench.sources.loading import LoadedModel

    spec = ModelSpec.model_validate({"name": "m", "source": "model.py:M", "inputs": [{"name": "x", "shape": [1, 4]}]})
    return LoadedModel(spec=spec, module=torch.nn.Identity(), example_inputs=[torch.ones(1, 4)],
                       reference=[("y", np.full((1, 4), 2.0))])


@pytest.fixture
def fake(monkeypatch):
    def install(version: str) -> FakeCoremltools:
        module = FakeCoremltools(version)
        monkeypatch.setitem(sys.modules, "coremltools", module)
        return module

    return install


@pytest.mark.torch
def test_compiles_once_beside_the_package_and_times_the_compiled_model(fake, tmp_path):
    ct = fake("8.3.0")
    art, model = artifact(tmp_path), loaded()
    first = measure_package(art, model, variant("all"), CONFIG, {})
    second = measure_package(art, model, variant("cpu_only"), CONFIG, {})
    compiled = Path(first.details["compiled_model"])
    compiles = [c for c in ct.calls if c[0] == "compile_model"]
    kept = [c for c in compiles if "mlbench-cold-" not in c[2]]  # the cold loads' fresh compiles go elsewhere
    assert len(kept) == 1 and kept[0][1] == str(art.package)
    assert compiled.parent.parent == art.package.parent / "compiled" and compiled.name == "model.mlmodelc"
    assert compiled.is_dir() and json.loads((compiled.parent / "compile.json").read_text())["compile_ms"] >= 0
    fresh = [c[2] for c in compiles if c not in kept]
    assert len(fresh) == 2 and len(set(fresh)) == 2 and all(not Path(f).exists() for f in fresh)  # one per variant
    # per variant: the timed load, then the cold load of a fresh compile, then the warm load of the kept one
    assert [c[1:] for c in ct.calls if c[0] == "CompiledMLModel"] == [
        (str(compiled), "ALL"), (fresh[0], "ALL"), (str(compiled), "ALL"),
        (str(compiled), "CPU_ONLY"), (fresh[1], "CPU_ONLY"), (str(compiled), "CPU_ONLY")]
    for result in (first, second):
        assert result.metrics["compile_time"].source == "measured"
        assert result.metrics["load_time"].source == "measured"
        assert result.metrics["latency.coreml_median"].value == 0.25  # Core ML's own duration, not our clock
        assert result.details["load_time"] == LOAD_ORDER
        assert result.verify is not None and result.verify.passed
        assert result.metrics["load_time.cold"].source == result.metrics["load_time.warm"].source == "measured"
        cleared = result.details["load_caches"]["cleared"]
        assert cleared[0].startswith("mlbench's compiled model: the package compiled afresh into a new folder")
        assert result.details["load_caches"]["not_cleared"][-1].startswith("Core ML's own caches")
    assert first.details["compile"].startswith("compiled by this variant into ")
    assert second.details["compile"].startswith("compiled once into ")
    assert second.metrics["compile_time"].value == first.metrics["compile_time"].value

    fake("8.3.0")  # a later run (a fresh module) reuses the compiled model on disk
    assert measure_package(art, model, variant("all"), CONFIG, {}).details["compile"].startswith("compiled once")


@pytest.mark.torch
def test_coremltools_before_8_3_is_a_skip_with_the_reason(fake, tmp_path):
    fake("8.2.1")
    with pytest.raises(VariantSkipped) as info:
        measure_package(artifact(tmp_path), loaded(), variant("all"), CONFIG, {})
    assert str(info.value) == ("Core ML measurement needs coremltools 8.3 or later (it compiles a package by path "
                               "and reads Core ML's own load and prediction durations); this machine has 8.2.1")


def test_compute_plan_child_writes_a_file_of_its_own(tmp_path):
    from mlbench.backends.coreml.compute_plan import read_plan

    out = tmp_path / "plan.json"
    out.write_text(json.dumps({"operations": [{"operator": "ios17.conv", "preferred": "neural_engine"}]}))
    assert read_plan(out, 0, "compiler chatter on stderr\n") == [{"operator": "ios17.conv",
                                                                  "preferred": "neural_engine"}]
    with pytest.raises(RuntimeError) as info:
        read_plan(tmp_path / "absent.json", -6, "Fatal: an .mlpackage was passed\n\n")
    assert str(info.value) == "compute plan failed (killed by signal 6): Fatal: an .mlpackage was passed"
    out.write_text("[]")
    with pytest.raises(RuntimeError, match=r"^compute plan failed: the child wrote no operations$"):
        read_plan(out, 0, "")
