"""`mlbench calibrate` round trip, on any OS: tiny real models exported by coremltools, "measured" on a fake
Mac — the compute-plan child against the fake coremltools (tests/fake_coremltools) and Core ML's own
prediction durations from a fake CompiledMLModel — with placements and timings generated from a known true
profile. Calibrating on those reports must give back the true parameters and placements, estimate a
held-out model within 10%, and refuse what too few runs cannot determine."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlbench.backends.apple.calibration.priors import flat
from mlbench.backends.apple.calibration.profile import chip_parameters, load_profiles
from mlbench.backends.apple.chips import builtin_chips, calibration
from mlbench.backends.apple.latency import estimate_latency, latency_metrics
from mlbench.backends.apple.placement import estimate_placement
from mlbench.backends.coreml import backend, compute_plan
from mlbench.cli.main import main as cli_main
from mlbench.config.pipeline import PipelineConfig
from mlbench.matrix import Variant
from mlbench.records import ArtifactInfo, PipelineInfo, RunRecord, RunReport
from tests.conftest import ROOT, TESTS

torch = pytest.importorskip("torch")
pytest.importorskip("coremltools")

FAKE = TESTS / "fake_coremltools"
CHIP = "m1pro"
MACHINE = {"os": "Darwin", "os_version": "15.1", "cpu": "Apple M1 Pro", "arch": "arm64"}
SHIPPED = chip_parameters(calibration(), CHIP)[0]  # the prior calibrating starts from
# the fake Mac's true profile: unlike the shipped estimate where the runs can tell (every "all" model here has one
# GPU op and two switches, so the GPU's dispatch and the switch overhead cannot be told apart: they stay shipped)
TRUTH = SHIPPED.model_copy(update={
    "efficiency": {**SHIPPED.efficiency, "neural_engine": 0.35, "cpu": 0.6},
    "dispatch_ms": {**SHIPPED.dispatch_ms, "neural_engine": 0.004, "cpu": 0.02}, "fixed_ms": 0.12})
MOVED = ("softmax", "gpu")  # the Mac runs softmax under ALL on the GPU; mlbench's rules say the Neural Engine
CONFIG = PipelineConfig.model_validate({
    "version": 1, "name": "nightly", "targets": [{"backend": "coreml"}],
    "models": [{"name": "m", "source": "m.py:M", "inputs": [{"name": "x", "shape": [1, 3, 32, 32]}]}],
    "latency": {"warmup": 1, "repeats": 3, "min_time_s": 0.0},
})


class Net(torch.nn.Module):
    """Convolutions at `size`² with `width` channels, `depth` 3×3 layers, a softmax and a linear head."""

    def __init__(self, width: int, depth: int, size: int, hidden: int) -> None:
        super().__init__()
        self.size = size
        self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
        self.body = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU())
                                          for _ in range(depth)])
        self.head = torch.nn.Linear(width, hidden)
        self.out = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        y = self.body(torch.relu(self.stem(x))).mean(dim=(2, 3))
        return self.out(torch.softmax(self.head(y), dim=-1))


MODELS = {"a": (16, 1, 32, 64), "b": (64, 2, 64, 256), "c": (8, 8, 16, 32), "d": (32, 3, 48, 1024),
          "e": (256, 2, 32, 2048), "held_out": (96, 2, 40, 512)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each model exported at float16 by coremltools and analysed, with its seeded input and eager output."""
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.coreml.artifact import CoremlArtifact
    from mlbench.backends.coreml.export import export_coreml

    out = {}
    for name, (width, depth, size, hidden) in MODELS.items():
        torch.manual_seed(0)
        module = Net(width, depth, size, hidden).eval()
        x = torch.randn(1, 3, size, size)
        dest = tmp_path_factory.mktemp(name)
        result = export_coreml(module, [x], ["x"], precision="float16", optimization=None, deployment_target=None,
                               dest=dest)
        with torch.no_grad():
            reference = module(x).numpy()
        out[name] = (CoremlArtifact(result.artifact, analyse_package(result.artifact)), module, x, reference)
    return out


def true_placement(analysis, units: str):
    """Where the fake Mac runs each op: mlbench's rules, except MOVED."""
    placement = estimate_placement(analysis, units)
    if units == "all":
        for op in placement.ops:
            if op.op_type == MOVED[0]:
                op.device = MOVED[1]
    return placement


def true_ms(analysis, units: str) -> float:
    return estimate_latency(analysis, true_placement(analysis, units), builtin_chips()[CHIP], TRUTH).total_ms


class FakeCoremltools(types.ModuleType):
    """What the runtime calls, with Core ML's own prediction duration set to the true profile's latency."""

    def __init__(self, duration_ms: float, outputs: dict) -> None:
        super().__init__("coremltools")
        self.__version__ = "9.0"
        self.ComputeUnit = SimpleNamespace(ALL="ALL", CPU_ONLY="CPU_ONLY")

        def compile_model(package: str, dest: str) -> str:
            Path(dest).mkdir(parents=True, exist_ok=True)
            return dest

        class CompiledMLModel:
            def __init__(self, path: str, compute_units: str) -> None:
                nanos = round(duration_ms * 1e6)
                self._proxy = SimpleNamespace(get_last_predict_duration_in_nano_seconds=lambda: nanos)

            def predict(self, inputs: dict) -> dict:
                return outputs

        self.models = SimpleNamespace(CompiledMLModel=CompiledMLModel, utils=SimpleNamespace(compile_model=compile_model))


def measured_record(name: str, units: str, exported, tmp_path: Path, monkeypatch) -> tuple[RunRecord, dict]:
    """One variant as a Mac would record it: the compute plan's placement (the real child process against the
    fake plan) and Core ML's own timings (the real runtime against the fake CompiledMLModel)."""
    from mlbench.backends.coreml.runtime import measure_package
    from mlbench.config.models import ModelSpec
    from mlbench.sources.loading import LoadedModel

    artifact, module, x, reference = exported[name]
    analysis = artifact.analysis
    truth = true_placement(analysis, units)
    plan = [{"operator": f"ios18.{op.op_type}", "outputs": [op.name], "preferred": op.device,
             "supported": ["neural_engine", "gpu", "cpu"]} for op in truth.ops]
    scenario = tmp_path / f"{name}-{units}.json"
    scenario.write_text(json.dumps({"functions": {"main": plan}}), encoding="utf-8")
    monkeypatch.setenv("MLBENCH_FAKE_PLAN", str(scenario))
    placement = backend.placement_for(artifact, units)

    output = analysis.outputs[0].name
    monkeypatch.setitem(sys.modules, "coremltools", FakeCoremltools(true_ms(analysis, units),
                                                                    {output: reference.astype(np.float32)}))
    spec = ModelSpec.model_validate({"name": name, "source": "m.py:M",
                                     "inputs": [{"name": "x", "shape": list(x.shape)}]})
    model = LoadedModel(spec=spec, module=module, example_inputs=[x], reference=[(output, reference)])
    variant = Variant(model=name, backend="coreml", target_index=0, artifact_axes=("precision", "optimize"),
                      fixed="{}", axes=(("precision", "float16"), ("compute_units", units), ("optimize", "none")))
    measured = measure_package(artifact, model, variant, CONFIG, {})
    monkeypatch.delitem(sys.modules, "coremltools")
    key = f"{name}-key"
    record = RunRecord(variant_id=f"{name}/coreml/float16/{units}", model=name, backend="coreml",
                       axes=dict(variant.axes), artifact_id=f"{name}/coreml/float16", status="ok",
                       metrics=measured.metrics, latency=measured.latency, placement=placement,
                       artifact=ArtifactInfo(key=key, cache_hit=False, export_seconds=1.0, path=str(artifact.package),
                                             size_bytes=1),
                       started="2026-12-01T01:00:00Z", seconds=1.0)
    return record, {key: {"program": analysis.model_dump(mode="json")}}


def write_report(path: Path, records: list[tuple[RunRecord, dict]]) -> Path:
    artifacts = {k: v for _r, a in records for k, v in a.items()}
    report = RunReport(mlbench_version="test", run_id="nightly-1", created="2026-12-01T01:00:00Z",
                       finished="2026-12-01T01:10:00Z", pipeline=PipelineInfo(name="nightly", path="n.yaml", sha256="0"),
                       machine=MACHINE, settings={}, records=[r for r, _a in records], artifacts=artifacts,
                       summary={"ok": len(records)})
    path.write_text(report.model_dump_json(), encoding="utf-8")
    return path


@pytest.fixture
def mac(tmp_path, monkeypatch):
    """The fake Mac: compute plans through the real child with the fake coremltools first on its path."""
    monkeypatch.setenv("PYTHONPATH", f"{FAKE}:{ROOT}")
    monkeypatch.setattr(compute_plan, "compute_plan_available", lambda: None)  # as on macOS 14.4+

    def nightly(names: list[str], units: tuple[str, ...] = ("all", "cpu_only"), *, exported) -> Path:
        records = [measured_record(n, u, exported, tmp_path, monkeypatch) for n in names for u in units]
        return write_report(tmp_path / "report.json", records)

    return nightly


@pytest.mark.torch
@pytest.mark.slow  # past 10 s on a quiet 2-core machine: out of the fast lane
def test_calibrating_on_measured_runs_recovers_the_true_profile(exported, mac, tmp_path, capsys, monkeypatch):
    report = mac(["a", "b", "c", "d", "e"], exported=exported)
    assert cli_main(["calibrate", str(report), "--out", str(tmp_path / "profiles")]) == 0
    printed = capsys.readouterr().out
    profiles = load_profiles(tmp_path / "profiles")
    loaded = profiles[CHIP]
    profile = loaded.profile
    assert loaded.path.name == "m1pro-macos-15.1.yaml"
    assert (profile.chip, profile.os, profile.runs) == (CHIP, "macOS 15.1", 10)
    assert printed.startswith(f"m1pro (M1 Pro, macOS 15.1): 10 measured runs -> {loaded.path}\n")
    assert "leave-one-out: median ×" in printed and "10 of 10 runs within 1.5×" in printed

    # latency: every parameter the runs determined is the true one; the fit reproduces every run
    flat_truth, flat_fit = flat(TRUTH), flat(profile.parameters)
    assert {"fixed_ms", "efficiency.neural_engine", "efficiency.cpu", "dispatch_ms.cpu",
            "dispatch_ms.neural_engine"} <= set(profile.fitted)
    for name in profile.fitted:
        assert flat_fit[name] == pytest.approx(flat_truth[name], rel=0.02), name
    assert set(profile.kept_prior) == set(flat_fit) - set(profile.fitted)
    assert profile.kept_prior["switch_overhead_ms"] == (
        f"kept the prior {flat(SHIPPED)['switch_overhead_ms']:.4g}: the runs cannot tell it apart from the "
        "parameters fitted before it")
    assert profile.worst_ratio is not None and profile.worst_ratio < 1.02

    # placement: the Mac's softmax under ALL is observed on the GPU, against the rules' Neural Engine
    softmax = [o for o in profile.placements if o.op_type == "softmax" and o.compute_units == "all"]
    assert softmax and all((o.device, o.rules_said, o.agreed == o.seen) == ("gpu", "neural_engine", True)
                           for o in softmax)
    assert "softmax fp16" in printed and "rules said neural_engine, the Mac ran" in printed

    # a held-out model: placed by the observations before the rules, estimated within 10% of the truth
    monkeypatch.setattr(compute_plan, "compute_plan_available", lambda: "compute plans need macOS")  # on Linux
    artifact = exported["held_out"][0]
    placement = backend.placement_for(artifact, "all", observed=loaded)
    truth = true_placement(artifact.analysis, "all")
    assert [op.device for op in placement.ops] == [op.device for op in truth.ops]
    moved = [op for op in placement.ops if op.op_type == "softmax"]
    assert moved and all((op.device, op.rule) == ("gpu", "observed") for op in moved)
    assert moved[0].reason.startswith("observed on M1 Pro (macOS 15.1): ")
    assert placement.rules is not None and placement.rules.get("observed", 0) >= 1
    metrics, _parts = latency_metrics(artifact.analysis, placement, [CHIP, "a17pro"], calibrations=profiles)
    estimate = metrics[f"latency.estimated.{CHIP}"]
    assert estimate.value == pytest.approx(true_ms(artifact.analysis, "all"), rel=0.10)
    assert estimate.band is not None and estimate.band.basis.startswith(
        f"m1pro (calibrated on 10 measured runs, LOO ×{profile.loo_median_ratio:.2f}; macOS 15.1, profile "
        "m1pro-macos-15.1.yaml)")
    assert "uncalibrated chip" in metrics["latency.estimated.a17pro"].band.basis  # no profile, no shipped rows


@pytest.mark.torch
def test_too_few_runs_keep_the_priors_and_say_why(exported, mac, tmp_path, capsys):
    report = mac(["a"], exported=exported)
    assert cli_main(["calibrate", str(report), "--out", str(tmp_path / "p")]) == 0
    profile = load_profiles(tmp_path / "p")[CHIP].profile
    prior = flat(chip_parameters(calibration(), CHIP)[0])
    assert profile.fitted == ["fixed_ms"]
    assert profile.kept_prior["dispatch_ms.cpu"] == (
        f"kept the prior {prior['dispatch_ms.cpu']:.4g}: 2 measured runs determine at most 1 parameter (one run "
        "is kept apart for leave-one-out)")
    assert profile.kept_prior["efficiency.cpu"] == (
        f"kept the prior {prior['efficiency.cpu']:.4g}: doubling it changes no run's latency by 2%")
    assert profile.parameters.efficiency == chip_parameters(calibration(), CHIP)[0].efficiency
    printed = capsys.readouterr().out
    assert f"  dispatch_ms.cpu: {profile.kept_prior['dispatch_ms.cpu']}\n" in printed


def test_reports_without_measured_core_ml_runs_are_one_line_errors(tmp_path):
    from mlbench.errors import UserError

    report = write_report(tmp_path / "linux.json", [])
    with pytest.raises(UserError) as info:
        from mlbench.backends.apple.calibration.run import calibrate

        calibrate([report], tmp_path / "out")
    assert str(info.value) == (
        f"no measured Core ML runs in {report}: calibrate reads Core ML records measured on a Mac (macOS 14.4+: "
        "a compute plan and Core ML's own latency)")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(UserError) as info:
        calibrate([bad], tmp_path / "out")
    assert str(info.value) == f"{bad}: not an mlbench report: invalid JSON at line 1 column 2"  # as compare reads it


PIPELINE = f"""\
version: 1
name: pr
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: coreml
    precision: [float16]
    compute_units: [all]
    estimate_on: [m1pro, a17pro]
    calibration: profiles/
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out}}
"""


def reviewed_profile(folder: Path) -> None:
    """A profile as `mlbench calibrate` writes them (here by hand: the Mac saw relu on the GPU under ALL)."""
    import yaml

    from mlbench.backends.apple.calibration.profile import CalibrationProfile, Observation

    folder.mkdir()
    relu = [Observation(op_type="relu", dtype="fp16", shape=f"4d:1e{k}", rule="all-prefers-cpu-fallback",
                        compute_units="all", device="gpu", seen=4, agreed=3, rules_said="neural_engine")
            for k in range(2, 6)]
    profile = CalibrationProfile(chip=CHIP, chip_name="M1 Pro", os="macOS 15.1", created="2026-12-01", method="test",
                                 data=["nightly/report.json"], runs=42, parameters=TRUTH, fitted=["fixed_ms"],
                                 median_ratio=1.02, worst_ratio=1.2, loo_median_ratio=1.08, loo_worst_ratio=1.4,
                                 placements=relu)
    (folder / "m1pro-macos-15.1.yaml").write_text(yaml.safe_dump(profile.model_dump(mode="json")), encoding="utf-8")


@pytest.mark.torch
@pytest.mark.slow  # past 10 s on a quiet 2-core machine: out of the fast lane
def test_a_linux_run_with_calibration_estimates_from_the_profile_and_says_so(write_pipeline, tmp_path):
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    path = write_pipeline(PIPELINE)
    reviewed_profile(tmp_path / "profiles")
    (record,) = run(load_pipeline(path)).records
    m1pro, a17pro = record.metrics["latency.estimated.m1pro"], record.metrics["latency.estimated.a17pro"]
    assert m1pro.band.basis == ("m1pro (calibrated on 42 measured runs, LOO ×1.08; macOS 15.1, profile "
                                "m1pro-macos-15.1.yaml)")
    assert (m1pro.band.median_ratio, m1pro.band.worst_ratio) == (1.08, 1.4)
    assert a17pro.band.basis.startswith("uncalibrated chip (a17pro): no calibration row on the chip")
    relu = [op for op in record.placement.ops if op.op_type == "relu"]
    assert relu and all((op.device, op.rule) == ("gpu", "observed") for op in relu)
    assert relu[0].reason == "observed on M1 Pro (macOS 15.1): 3 of 4 such ops ran on the gpu"
    assert {op.rule for op in record.placement.ops if op.op_type == "conv"} == {"all-prefers-cpu-fallback"}
    assert record.placement.note.startswith(f"{len(relu)} of {len(record.placement.ops)} operations placed as "
                                            "observed on M1 Pro (macOS 15.1; calibration profile m1pro-macos-15.1.yaml)")
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "(m1pro (calibrated on 42 measured runs, LOO ×1.08; macOS 15.1, profile m1pro-macos-15.1.yaml))" in markdown

    # without the profile, the estimate is the shipped one
    (tmp_path / "profiles" / "m1pro-macos-15.1.yaml").unlink()
    path.write_text(PIPELINE.replace("    calibration: profiles/\n", ""), encoding="utf-8")
    (plain,) = run(load_pipeline(path)).records
    assert plain.metrics["latency.estimated.m1pro"].band.basis.startswith(f"{len(calibration().rows)} published Core ML latencies (m1pro ")
    assert "observed" not in {op.rule for op in plain.placement.ops}


def test_a_missing_calibration_folder_is_one_line_naming_it(tmp_path):
    from mlbench.backends.apple.calibration.profile import load_profiles
    from mlbench.errors import UserError

    with pytest.raises(UserError) as info:
        load_profiles(tmp_path / "profiles")
    assert str(info.value) == f"{tmp_path / 'profiles'}: no such calibration profile or folder (write one with " \
                              "`mlbench calibrate`)"
    (tmp_path / "bad.yaml").write_text("version: 1\nchip: M1\n", encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_profiles(tmp_path / "bad.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'bad.yaml'}: chip: not a calibration profile (")
