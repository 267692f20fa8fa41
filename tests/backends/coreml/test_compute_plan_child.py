"""The compute-plan child's protocol end to end, on any OS: the real child process
(`python -m mlbench.backends.coreml.compute_plan`) runs against a fake coremltools placed first on its
PYTHONPATH (tests/fake_coremltools: MLComputePlan, compute devices, compile_model with coremltools 8's
names). What the plan says and how the child misbehaves comes from a scenario file per test.

On macOS the same child runs against the real coremltools; these tests pin what mlbench does with
whatever it says: the mapping onto a Placement, a crash, a hang, a child that ends without its plan,
and stray output on stdout (the operations travel in a file, so stdout is never read).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, Totals
from mlbench.backends.coreml import backend, compute_plan
from mlbench.backends.coreml.artifact import CoremlArtifact
from mlbench.backends.coreml.compute_plan import plan_operations
from tests.conftest import ROOT, TESTS

FAKE = TESTS / "fake_coremltools"

CONV = {"operator": "ios17.conv", "outputs": ["conv_0"], "preferred": "neural_engine",
        "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.6}
MAIN = [
    {"operator": "ios17.const", "outputs": ["weight"]},                          # no device: a constant
    {"operator": "ios17.cast", "outputs": ["x_fp16"]},                            # no device: a boundary cast
    CONV,
    {"operator": "ios17.cond", "outputs": ["branch"], "preferred": "cpu", "supported": ["cpu"], "cost": 0.1,
     "blocks": [[{"operator": "ios17.relu", "outputs": ["inner"], "preferred": "gpu",
                  "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.3}], []]},
    {"operator": "ios17.gather", "outputs": [], "preferred": "cpu", "supported": ["cpu", "gpu"]},  # no output, no cost
]
EXPECTED = [
    {"operator": "ios17.const", "output": "weight", "preferred": None, "supported": None, "cost": None},
    {"operator": "ios17.cast", "output": "x_fp16", "preferred": None, "supported": None, "cost": None},
    {"operator": "ios17.conv", "output": "conv_0", "preferred": "neural_engine",
     "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.6},
    {"operator": "ios17.cond", "output": "branch", "preferred": "cpu", "supported": ["cpu"], "cost": 0.1},
    {"operator": "ios17.relu", "output": "inner", "preferred": "gpu", "supported": ["neural_engine", "gpu", "cpu"],
     "cost": 0.3},  # a nested block's operations follow the operation that holds them
    {"operator": "ios17.gather", "output": None, "preferred": "cpu", "supported": ["cpu", "gpu"], "cost": None},
]


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    """Write the fake plan's scenario, put the fake coremltools first on the child's path; return the log."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), str(ROOT)]))
    path = tmp_path / "scenario.json"
    monkeypatch.setenv("MLBENCH_FAKE_PLAN", str(path))

    def write(**plan) -> Path:
        plan.setdefault("functions", {"main": MAIN})
        path.write_text(json.dumps(plan), encoding="utf-8")
        return Path(f"{path}.log")

    return write


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def package(tmp_path) -> Path:
    folder = tmp_path / "model.mlpackage"
    folder.mkdir(exist_ok=True)
    return folder


def artifact(tmp_path) -> CoremlArtifact:
    layers = [LayerInfo(name=f"op{i}", op_type=t, output_dtype="fp16", output_shape=[1, 64, 32, 32])
              for i, t in enumerate(["conv", "relu", "conv", "relu", "conv", "relu"])]
    analysis = ProgramAnalysis(path=str(package(tmp_path)), model_type="mlProgram", spec_version=8,
                               precision="FLOAT16", op_counts={"conv": 3, "relu": 3}, const_count=2, layers=layers,
                               totals=Totals(compute_ops=6, const_ops=2, weight_ops=0, params=0, weight_bytes=0,
                                             macs=10**9, flops=2 * 10**9, macs_complete=True),
                               package_size_bytes=1, inputs=[], outputs=[])
    return CoremlArtifact(package(tmp_path), analysis)


def test_the_child_compiles_then_reads_the_plan_and_prints_every_operation(scenario, tmp_path):
    log = scenario()
    assert plan_operations(package(tmp_path), "cpu_and_ne") == EXPECTED
    compiled, loaded = calls(log)
    assert compiled["event"] == "compile_model" and compiled["model"] == str(package(tmp_path))
    assert compiled["destination"].endswith("/model.mlmodelc")  # a package path would abort the process
    assert loaded == {"event": "load_from_path", "path": compiled["destination"], "compute_units": "CPU_AND_NE"}


@pytest.mark.parametrize("units, member", [("cpu_only", "CPU_ONLY"), ("cpu_and_gpu", "CPU_AND_GPU"),
                                           ("cpu_and_ne", "CPU_AND_NE"), ("all", "ALL")])
def test_compute_units_reach_the_plan_as_coremltools_members(scenario, tmp_path, units, member):
    log = scenario(functions={"main": [CONV]})
    plan_operations(package(tmp_path), units)
    assert calls(log)[-1]["compute_units"] == member


def test_a_program_without_main_reads_its_first_function(scenario, tmp_path):
    scenario(functions={"encoder": [CONV], "decoder": []})
    assert [op["output"] for op in plan_operations(package(tmp_path), "all")] == ["conv_0"]


def test_the_plan_maps_onto_a_measured_placement(scenario, tmp_path, monkeypatch):
    scenario()
    monkeypatch.setattr(compute_plan, "compute_plan_available", lambda: None)  # as on macOS 14.4+
    placement = backend.placement_for(artifact(tmp_path), "cpu_and_ne")
    assert (placement.source, placement.method, placement.preferred) == ("measured", "MLComputePlan", "neural_engine")
    assert (placement.constants, placement.compute_ops, placement.unknown) == (1, 5, 1)
    assert [(op.name, op.op_type, op.device) for op in placement.ops] == [
        ("x_fp16", "cast", None), ("conv_0", "conv", "neural_engine"), ("branch", "cond", "cpu"),
        ("inner", "relu", "gpu"), ("gather", "gather", "cpu")]
    assert placement.by_count == {"neural_engine": 0.25, "gpu": 0.25, "cpu": 0.5}
    assert placement.by_cost == pytest.approx({"neural_engine": 0.6, "gpu": 0.3, "cpu": 0.1})
    assert placement.switches == 3
    assert [op.reason for op in placement.ops] == [
        None, None, "not supported on the Neural Engine", "Core ML preferred the gpu (the Neural Engine supports it)",
        "not supported on the Neural Engine"]
    assert placement.note == (
        "3 of 5 compute operations run off the Neural Engine: cond (not supported on the Neural Engine) ×1; "
        "relu (Core ML preferred the gpu (the Neural Engine supports it)) ×1; gather (not supported on the Neural "
        "Engine) ×1. Core ML named no device for 1 operation (e.g. casts at the boundary): counted apart "
        "as unknown.")


def test_a_crash_in_the_child_costs_the_placement_measurement_only(scenario, tmp_path, monkeypatch):
    scenario(behaviour="crash")
    with pytest.raises(RuntimeError) as info:
        plan_operations(package(tmp_path), "cpu_and_ne")
    assert str(info.value) == ("compute plan failed (killed by signal 6): fake MLComputePlan: the compiler service "
                               "crashed")

    monkeypatch.setattr(compute_plan, "compute_plan_available", lambda: None)
    placement = backend.placement_for(artifact(tmp_path), "cpu_and_ne")
    assert placement.source == "estimated" and placement.by_count == {"neural_engine": 1.0}
    assert placement.note.endswith(" Not measured: the compute plan failed (compute plan failed (killed by signal 6): "
                                   "fake MLComputePlan: the compiler service crashed).")


def test_a_model_that_is_not_an_ml_program_is_refused_with_the_childs_reason(scenario, tmp_path):
    scenario(behaviour="not-program")
    with pytest.raises(RuntimeError) as info:
        plan_operations(package(tmp_path), "all")
    assert str(info.value) == ("compute plan failed (exit 1): not an ML program: compute plans of neural-network "
                               "models are not read")


def test_a_hanging_child_is_stopped_at_the_time_limit(scenario, tmp_path, monkeypatch):
    import subprocess
    import time

    scenario(behaviour="hang")
    monkeypatch.setattr(compute_plan, "PLAN_TIMEOUT_S", 3)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        plan_operations(package(tmp_path), "cpu_and_ne")
    assert time.monotonic() - started < 30  # the fake sleeps 120 s: the child was stopped, not waited for

    monkeypatch.setattr(compute_plan, "compute_plan_available", lambda: None)
    placement = backend.placement_for(artifact(tmp_path), "cpu_and_ne")
    assert placement.source == "estimated" and "Not measured: the compute plan failed (" in placement.note
    assert placement.note.endswith("timed out after 3 seconds).")


def test_whatever_the_child_prints_on_stdout_is_not_read(scenario, tmp_path):
    """The compiler and coremltools talk on stdout; the operations travel in a file of their own."""
    scenario(stdout=["Compiling the model...", "", "{'compiler': 'ANECompiler', 'status': 'ok'}",
                     '{"operator": "ios17.fake", "output": "not an operation"}', "[1, 2, 3]"])
    assert plan_operations(package(tmp_path), "cpu_and_ne") == EXPECTED


def test_a_compiled_model_is_read_as_it_is(scenario, tmp_path):
    compiled = tmp_path / "model.mlmodelc"
    compiled.mkdir()
    log = scenario()
    assert plan_operations(compiled, "all") == EXPECTED
    assert calls(log) == [{"event": "load_from_path", "path": str(compiled), "compute_units": "ALL"}]


def test_a_child_that_ends_without_writing_the_plan_is_a_failure(scenario, tmp_path):
    scenario(behaviour="vanish")
    with pytest.raises(RuntimeError) as info:
        plan_operations(package(tmp_path), "cpu_and_ne")
    assert str(info.value) == "compute plan failed (exit 0): no message"


def test_a_plan_file_without_operations_is_a_failure(tmp_path):
    from mlbench.backends.coreml.compute_plan import read_plan

    out = tmp_path / "plan.json"
    for document in ("[]", '{"ops": []}', '{"operations": {}}'):
        out.write_text(document, encoding="utf-8")
        with pytest.raises(RuntimeError) as info:
            read_plan(out, 0, "")
        assert str(info.value) == "compute plan failed: the child wrote no operations"
    out.write_text('{"operations": [{"operator": "ios17.relu"}]}', encoding="utf-8")
    assert read_plan(out, 0, "") == [{"operator": "ios17.relu"}]
    with pytest.raises(RuntimeError) as info:
        read_plan(out, 3, "a warning\n\nTraceback ...\nValueError: bad model  \n")
    assert str(info.value) == "compute plan failed (exit 3): ValueError: bad model"
