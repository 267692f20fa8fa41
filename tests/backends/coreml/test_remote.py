"""A sweep measured on connected devices, end to end on any OS: a real Core ML export, mlbench's real children,
and coremltools' remote device served by the fake at its boundary (tests/fake_coremltools, put in the children by
`remote_site/sitecustomize.py`). An iPhone and an iPad are attached; the iPhone goes away at its third model load,
in the middle of the sweep: its variant in hand fails in one line, every other variant finishes. The records carry
the device's model, chip, OS and build, the machine snapshot lists the devices, and `mlbench calibrate` keys its
groups on the devices' chips, not on the machine the sweep ran on."""

from __future__ import annotations

import json
import os

import pytest

from mlbench.run.runner import run
from mlbench.validate import load_pipeline
from tests.backends.coreml.fake_devices import IPAD, IPHONE, REMOTE_SITE, devicectl_entry, log, write_scenario

pytest.importorskip("torch")
pytest.importorskip("coremltools")
pytestmark = [pytest.mark.torch, pytest.mark.slow]  # one Core ML export and the remote-device imports in a child

MODEL = """\
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))
"""

PIPELINE = """\
version: 1
name: phones
models:
  - name: tiny
    source: model.py:Tiny
    inputs: [{name: x, shape: [1, 16]}]
targets:
  - backend: torch
  - backend: coreml
    compute_units: [all, cpu_only]
    device: [connected:iphone, connected:ipad]
    estimate_on: [a17pro]
latency: {warmup: 1, repeats: 4, min_time_s: 0.0, retry_s: 0}
cache: {dir: cache}
report: {dir: out, formats: [json, markdown]}
history: {enabled: false}
"""

OPS = [{"type": "ios18.linear", "output": "linear_0", "preferred": "neural_engine",
        "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.6},
       {"type": "ios18.relu", "output": "relu_0", "preferred": "neural_engine",
        "supported": ["neural_engine", "gpu", "cpu"], "cost": 0.1},
       {"type": "ios18.linear", "output": "out", "preferred": "cpu", "supported": ["cpu"], "cost": 0.3}]
BEHAVIOUR = {IPHONE[1]: {"load_ms": [180.0, 35.0, 30.0], "predict_ms": [1.5, 1.6, 1.4], "disconnect_at_load": 3},
             IPAD[1]: {"load_ms": [150.0, 30.0], "predict_ms": [2.0, 2.2, 1.8]}}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """(report, scenario file, folder) of one sweep on the fake iPhone and iPad."""
    from mlbench.sources.loading import load_model

    folder = tmp_path_factory.mktemp("phones")
    (folder / "model.py").write_text(MODEL, encoding="utf-8")
    (folder / "phones.yaml").write_text(PIPELINE, encoding="utf-8")
    pipeline = load_pipeline(folder / "phones.yaml")
    reference = load_model(pipeline.config.models[0], pipeline.config.seed, folder).reference
    scenario = write_scenario(folder, [devicectl_entry(*IPHONE), devicectl_entry(*IPAD)], behaviour=BEHAVIOUR,
                              outputs=[array.tolist() for _, array in reference], ops=OPS)
    saved = dict(os.environ)
    os.environ.update({"MLBENCH_FAKE_DEVICES": str(scenario), "MLBENCH_DEVICE_TEAM": "TEAM123456",
                       "PYTHONPATH": os.pathsep.join([str(REMOTE_SITE), os.environ.get("PYTHONPATH", "")])})
    os.environ.pop("MLBENCH_DEVICES_FILE", None)
    try:
        report = run(pipeline)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return report, scenario, folder


def by_id(report):
    return {r.variant_id.removeprefix("tiny/"): r for r in report.records}


def test_a_measurement_round_trip_on_a_connected_ipad(sweep):
    report, _, _ = sweep
    record = by_id(report)["coreml/float16/all/none/connected:ipad"]
    assert record.status == "ok", record.error
    assert record.axes["device"] == "connected:ipad"
    metrics = record.metrics
    assert (metrics["load_time.cold"].value, metrics["load_time.warm"].value) == (150.0, 30.0)
    assert metrics["load_time"].value == 150.0 and metrics["load_time.cold"].source == "measured"
    assert record.latency is not None and record.latency.source == "measured"
    assert set(record.latency.samples) <= {2.0, 2.2, 1.8} and len(record.latency.samples) == 4  # warmup dropped
    assert metrics["latency.coreml_median"].value == record.latency.median
    assert record.placement is not None and record.placement.source == "measured"
    assert record.placement.method == "MLComputePlan on Test iPad (iPad Air (M2))"
    assert record.placement.by_count == {"neural_engine": 2 / 3, "cpu": 1 / 3}
    assert record.placement.by_cost == pytest.approx({"neural_engine": 0.7, "cpu": 0.3})
    estimated = record.details["op_time_estimated"]
    assert estimated["source"] == "estimated" and [op["op"] for op in estimated["ops"]] == ["linear_0", "out", "relu_0"]
    assert record.verify is not None and record.verify.passed and record.verify.source == "measured"
    assert record.details["device"] == {"name": "Test iPad", "kind": "ipad", "udid": IPAD[1], "os": "iPadOS",
                                        "os_version": "17.6", "os_build": "21G80", "product_type": "iPad14,8",
                                        "model": "iPad Air (M2)", "chip": "m2"}
    assert record.details["thermal"]["before"]["state"] is None
    assert record.details["thermal"]["before"]["reason"].startswith("the ModelRunner app reports no thermal state")
    assert metrics["latency.estimated.a17pro"].source == "estimated"  # estimates stay beside the device's figures
    assert metrics["size.package"].source == "measured"


def test_the_device_that_disconnects_fails_its_variant_in_one_line_and_the_others_finish(sweep):
    report, scenario, _ = sweep
    records = by_id(report)
    assert records["coreml/float16/all/none/connected:iphone"].status == "ok"
    lost = records["coreml/float16/cpu_only/none/connected:iphone"]
    assert lost.status == "failed"
    assert lost.error == ("measure: DeviceLost: iPhone 'Test iPhone' disconnected during the measurement ((fake) the "
                          "device is no longer connected)")
    assert "\n" not in lost.error
    assert records["coreml/float16/cpu_only/none/connected:ipad"].status == "ok"
    assert records["torch/cpu/float32"].status == "ok"
    events = log(scenario)
    prepared = [e for e in events if e["event"] == "prepare_for_model_debugging"]
    assert sorted(e["udid"] for e in prepared) == sorted([IPHONE[1], IPAD[1]])  # once per device per process
    assert all(e["team"] == "TEAM123456" for e in prepared)  # from the environment, never the pipeline
    assert [e["load"] for e in events if e["event"] == "disconnected"] == [3]


def test_the_machine_snapshot_and_the_report_name_the_devices(sweep):
    from mlbench.machine import machine_key, machine_words

    report, _, folder = sweep
    devices = {d["udid"]: d for d in report.machine["devices"]}
    assert set(devices) == {IPHONE[1], IPAD[1]} and devices[IPHONE[1]]["chip"] == "a17pro"
    assert report.machine["timed_here"] is True  # the eager variant was timed on this machine
    words = machine_words(report.machine)
    assert "iPhone 15 Pro (iOS 18.1 22B83, a17pro)" in words and "iPad Air (M2) (iPadOS 17.6 21G80, m2)" in words
    only_devices = {**report.machine, "timed_here": False, "cpu": "another Mac"}
    assert machine_key(only_devices) == machine_key({**only_devices, "cpu": "a third Mac", "os": "Darwin"})
    assert machine_key(only_devices) != machine_key({**only_devices, "devices": [devices[IPAD[1]]]})
    saved = json.loads((folder / "out" / "report.json").read_text(encoding="utf-8"))
    assert len(saved["machine"]["devices"]) == 2


def test_calibrate_keys_records_measured_on_a_device_on_its_chip(sweep):
    from mlbench.backends.apple.calibration.measured import gather

    _, _, folder = sweep
    groups, left_out = gather([folder / "out" / "report.json"])
    assert set(groups) == {"a17pro iOS 18.1", "m2 iPadOS 17.6"}  # this Linux machine's CPU matches no chip
    assert [case.label for case in groups["a17pro iOS 18.1"].cases] == ["tiny/coreml/float16/all/none/connected:iphone"]
    assert len(groups["m2 iPadOS 17.6"].cases) == 2
    assert left_out == [f"{folder / 'out' / 'report.json'}: 1 Core ML record left out: did not run"]
