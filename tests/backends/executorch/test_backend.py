"""The ExecuTorch backend on real executorch: a tiny model with an op XNNPACK does not take (cumsum)."""

from __future__ import annotations

import json
import sys

import pytest

from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache
from mlbench.validate import load_pipeline

pytest.importorskip("torch")
pytest.importorskip("executorch.runtime", reason="the executorch extra is not installed")
pytestmark = pytest.mark.torch

MODEL = (
    "import torch\n"
    "class Cum(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.a = torch.nn.Linear(64, 64)\n"
    "        self.b = torch.nn.Linear(64, 32)\n"
    "    def forward(self, x):\n"
    "        return self.b(torch.relu(self.a(x)).cumsum(-1))\n"  # cumsum: no XNNPACK kernel, a portable one
    "class Branchy(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        if x.sum() > 0:\n"  # data-dependent control flow: torch.export cannot capture it
    "            return x * 2\n"
    "        return x * 3\n"
)

PIPELINE = """\
version: 1
name: et
models:
  - name: cum
    source: model.py:Cum
    inputs: [{name: x, shape: [2, 64]}]
targets:
  - backend: torch
  - backend: executorch
    delegate: [xnnpack, portable, coreml]
    estimate_on: [m1, a17pro]
  - backend: executorch
    optimize: q8
optimizations:
  q8: {kind: xnnpack_quantize, scheme: int8_dynamic}
latency: {warmup: 1, repeats: 5, min_time_s: 0.0, retry_s: 0}
verify: {tolerance: {q8: 0.5}}
cache: {dir: cache}
report: {dir: out, formats: [json, markdown]}
"""


def et_records(report):
    return {r.variant_id.removeprefix("cum/executorch/"): r for r in report.records if r.backend == "executorch"}


@pytest.fixture(scope="module")
def et_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("et")
    (folder / "model.py").write_text(MODEL, encoding="utf-8")
    (folder / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    return folder, run(load_pipeline(folder / "pipeline.yaml"))


@pytest.mark.slow
def test_xnnpack_leaves_cumsum_to_portable_kernels_with_its_boundaries(et_run):
    _, report = et_run
    record = et_records(report)["xnnpack/float32/none"]
    assert record.status == "ok", record.error
    placement = record.placement
    assert placement.source == "measured" and placement.preferred == "xnnpack"
    assert [(op.op_type, op.device) for op in placement.ops] == [
        ("linear", "xnnpack"), ("relu", "xnnpack"), ("cumsum", "cpu"), ("linear", "xnnpack")]
    assert placement.by_count == {"xnnpack": 0.75, "cpu": 0.25}
    assert placement.switches == 2  # into portable kernels and back
    assert placement.ops[2].reason == "not taken by the xnnpack partitioner"
    assert record.details["partition"]["portable_ops"] == ["cumsum"]
    assert record.metrics["placement.count.cpu"].value == 0.25
    # placement.<device> weighs the ops by FLOPs (the Core ML cost model's conventions), as a Core ML placement
    # weighs its ops by cost; the measured time per device is the report's and the note's
    assert placement.cost_basis == "flops" and abs(sum(placement.by_cost.values()) - 1.0) < 1e-9
    flops = record.details["partition"]["flops"]
    assert placement.by_cost == pytest.approx(flops["by_device"])
    assert record.metrics["placement.cpu"].value == pytest.approx(128 / flops["total"])
    assert record.metrics["placement.xnnpack"].source == "measured"
    assert placement.ops[2].cost == pytest.approx(128 / flops["total"])
    assert "measured time per device (ETDump): xnnpack " in placement.note


@pytest.mark.slow
def test_the_partition_weighs_each_device_by_flops_as_the_coreml_cost_model_counts_them(et_run):
    folder, report = et_run
    record = et_records(report)["xnnpack/float32/none"]
    flops = record.details["partition"]["flops"]
    # linear 2x64 @ 64x64 and 2x64 @ 64x32: 2 x MACs; relu and cumsum: one per output element (2 x 64)
    assert flops["total"] == 2 * (2 * 64 * 64) + 2 * (2 * 64 * 32) + 128 + 128
    assert flops["by_device"]["cpu"] == pytest.approx(128 / flops["total"])
    assert flops["known_ops"] == flops["ops"] == 4
    markdown = next((folder / "out").glob("*.md")).read_text(encoding="utf-8")
    coreml = et_records(report)["coreml/float32/none"]
    # not run off macOS: the FLOPs share is still a fact of the lowered program
    assert coreml.placement.by_cost == {"coreml": 1.0} and "coreml 100% of ops (100% of FLOPs)" in markdown
    assert coreml.metrics["placement.coreml"].value == 1.0


@pytest.mark.slow
def test_measured_latency_verification_size_and_planned_memory(et_run):
    _, report = et_run
    for name in ("xnnpack/float32/none", "portable/float32/none", "xnnpack/float32/q8"):
        record = et_records(report)[name]
        assert record.status == "ok", record.error
        assert record.metrics["latency.median"].source == "measured" and record.metrics["latency.median"].value > 0
        assert len(record.latency.samples) >= 5
        assert record.verify.passed, name
        assert record.metrics["size.package"].value == record.artifact.size_bytes  # the .pte, not the sidecars
        assert _sidecars(record) > 0
        assert record.metrics["memory.planned"].value > 0
        assert record.metrics["memory.peak"].source == "measured" and record.metrics["memory.peak"].value >= 0
        assert record.metrics["memory.load"].source == "measured" and record.metrics["memory.load"].value > 0
    assert et_records(report)["xnnpack/float32/none"].verify.max_rel < 1e-5
    assert et_records(report)["portable/float32/none"].placement.by_count == {"cpu": 1.0}


def _sidecars(record):
    from pathlib import Path

    folder = Path(record.artifact.path)
    return sum(p.stat().st_size for p in folder.iterdir() if p.name != "model.pte")


@pytest.mark.slow
def test_etdump_table_covers_the_method_time(et_run):
    _, report = et_run
    op_time = et_records(report)["xnnpack/float32/none"].details["op_time"]
    devices = sorted(row["device"] for row in op_time["by_call"])
    assert devices == ["cpu", "xnnpack", "xnnpack"]  # two XNNPACK partitions, one portable kernel
    assert {tuple(r["op_types"]) for r in op_time["by_call"]} == {("linear", "relu"), ("cumsum",), ("linear",)}
    # the top-level calls are the method's time less its own dispatch (medians: a sum of medians may pass the
    # method's median a little on a busy machine)
    assert 0.5 * op_time["total_ms"] <= op_time["calls_ms"] <= 1.1 * op_time["total_ms"]
    markdown = next((et_run[0] / "out").glob("*.md")).read_text()
    assert "Per-call time of <code>executorch/xnnpack/float32/none</code>" in markdown
    assert ("Partition of <code>executorch/xnnpack/float32/none</code>: xnnpack 75% of ops (99% of FLOPs, " in markdown
            and "portable kernels 25% of ops (" in markdown and "2 switches; left to portable kernels: cumsum" in markdown)


WIDE = (
    "import torch\n"
    "class Wide(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.a = torch.nn.Linear(256, 1024)\n"
    "        self.b = torch.nn.Linear(1024, 256)\n"
    "    def forward(self, x):\n"
    "        return self.b(torch.relu(self.a(x)).cumsum(-1))\n"
)


def test_the_etdump_table_sums_to_within_10_percent_of_the_measured_call(tmp_path):
    """Each traced run's top-level calls (two XNNPACK partitions, one portable cumsum) sum to within 10% of that
    same run's `Method::execute`, paired run by run. Against the wall time of the call from Python, what ETDump
    never sees is kept as `outside_ms` (the binding around the method, and on a busy machine the wait to be
    scheduled again): within 10% there too when the machine is quiet enough to say so."""
    import importlib.util
    import os

    import torch

    from mlbench.backends.executorch.export import ETRECORD, PTE, export_pte
    from mlbench.backends.executorch.profile import op_time_table

    (tmp_path / "wide.py").write_text(WIDE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("wide", tmp_path / "wide.py")
    wide = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wide)
    torch.manual_seed(0)
    x = torch.randn(256, 256)
    result = export_pte(wide.Wide(), (x,), delegate="xnnpack", precision="float32", recipe=None, dest=tmp_path)
    load = os.getloadavg()[0]
    op_time = op_time_table(result.artifact / PTE, result.artifact / ETRECORD, [x], runs=15)
    assert sorted(row["device"] for row in op_time["by_call"]) == ["cpu", "xnnpack", "xnnpack"]
    assert 0.9 <= op_time["coverage"] <= 1.0 + 1e-6, op_time
    assert 0 < op_time["wall_coverage"] <= op_time["coverage"] + 1e-6
    assert op_time["outside_ms"] == pytest.approx(op_time["wall_ms"] - op_time["total_ms"])
    if max(load, os.getloadavg()[0]) < 0.5 * (os.cpu_count() or 1):  # a quiet machine: nothing to wait for
        assert op_time["wall_coverage"] >= 0.9, op_time


@pytest.mark.skipif(sys.platform == "darwin", reason="the Core ML delegate runs on macOS")
@pytest.mark.slow
def test_coreml_delegate_is_exported_and_placed_but_not_timed_off_macos(et_run):
    _, report = et_run
    record = et_records(report)["coreml/float32/none"]
    assert record.status == "ok", record.error
    assert record.placement.by_count == {"coreml": 1.0}
    assert record.metrics["latency.median"].value is None
    assert record.metrics["latency.median"].reason == ("the ExecuTorch CoreMLBackend runs only on macOS and iOS; "
                                                       "this machine runs Linux")
    assert record.metrics["size.package"].value > 0


@pytest.mark.slow
def test_the_coreml_delegates_embedded_program_is_analysed_like_a_coreml_target(et_run):
    _, report = et_run
    record = et_records(report)["coreml/float32/none"]
    programs = record.details["coreml_programs"]["programs"]
    assert [p["package"] for p in programs] == ["coreml/0/lowered_module/model.mlpackage"]
    # the unpacked package is the Core ML program of the one partition: its ops are the model's
    assert programs[0]["precision"] == "FLOAT32"
    assert programs[0]["flops"] > 2 * 2 * (64 * 64 + 64 * 32)  # the two linear layers, at least
    shares = {k: m for k, m in record.metrics.items() if k.startswith("coreml_delegate.")}
    assert shares and all(m.source == "estimated" for m in shares.values())
    assert sum(m.value for m in shares.values()) == pytest.approx(1.0)
    assert "coreml_delegate.neural_engine" not in shares  # a float32 program never runs on the Neural Engine
    for chip in ("m1", "a17pro"):
        metric = record.metrics[f"latency.estimated.{chip}"]
        assert metric.source == "estimated" and metric.value > 0 and metric.band is not None
        parts = programs[0]["latency_estimate"][chip]
        assert sum(parts["compute_ms"].values()) + parts["dispatch_ms"] + parts["switch_ms"] + parts["fixed_ms"] \
            == pytest.approx(metric.value, abs=1e-3)
    assert "latency.estimated.m1" not in et_records(report)["xnnpack/float32/none"].metrics


def test_estimate_on_names_known_chips_and_needs_the_coreml_delegate(write_pipeline, tmp_path):
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")  # validate reads the model file
    path = write_pipeline(PIPELINE.replace("estimate_on: [m1, a17pro]", "estimate_on: [m1, m9]"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert "targets[1].estimate_on[1]: unknown chip 'm9'" in str(info.value)
    path = write_pipeline(PIPELINE.replace("delegate: [xnnpack, portable, coreml]", "delegate: [xnnpack]"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value).endswith("targets[1].estimate_on: estimate_on estimates the Core ML delegate's programs; "
                                    "add coreml to delegate or drop estimate_on")


@pytest.mark.slow
def test_delegate_and_recipe_shape_the_key_and_measurement_settings_do_not(et_run):
    folder, report = et_run
    records = et_records(report)
    assert len({r.artifact.key for r in records.values()}) == 4
    options = [e.meta["key_inputs"]["options"] for e in ArtifactCache(folder / "cache").entries()
               if "derived" not in e.meta]  # the .pte files, not the figures derived from them
    assert {json.dumps(o, sort_keys=True) for o in options} == {
        json.dumps({"delegate": d, "precision": "float32", "recipe": r}, sort_keys=True)
        for d, r in (("xnnpack", None), ("portable", None), ("coreml", None),
                     ("xnnpack", {"kind": "xnnpack_quantize", "scheme": "int8_dynamic"}))}
    text = PIPELINE.replace("repeats: 5", "repeats: 7").replace("dir: out", "dir: out2") + "  \n"
    text = text.replace("delegate: [xnnpack, portable, coreml]", "delegate: [xnnpack, portable, coreml]\n"
                        "    profile_runs: 2")
    (folder / "again.yaml").write_text(text, encoding="utf-8")
    again = et_records(run(load_pipeline(folder / "again.yaml")))
    assert all(r.artifact.cache_hit for r in again.values())
    assert {r.artifact.key for r in again.values()} == {r.artifact.key for r in records.values()}


@pytest.mark.slow
def test_a_model_torch_export_cannot_capture_fails_in_one_line(write_pipeline, tmp_path):
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    path = write_pipeline(PIPELINE.replace("source: model.py:Cum", "source: model.py:Branchy").replace(
        "delegate: [xnnpack, portable, coreml]\n    estimate_on: [m1, a17pro]", "delegate: xnnpack").replace(
        "  - backend: executorch\n    optimize: q8\n", ""))
    report = run(load_pipeline(path))
    record = et_records(report)["xnnpack/float32/none"]
    assert record.status == "failed"
    assert record.error.startswith("export: ExecuTorch export failed at torch.export: GuardOnDataDependentSymNode: ")
    assert "\n" not in record.error


def test_recipes_need_xnnpack_alone_and_float32(write_pipeline, tmp_path):
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")  # validate reads the model file
    path = write_pipeline(PIPELINE.replace("    optimize: q8", "    delegate: [xnnpack, portable]\n    optimize: q8"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value).endswith("targets[2].optimize: xnnpack_quantize recipes need delegate: xnnpack alone; "
                                    "give the other delegates a target entry of their own")
    path = write_pipeline(PIPELINE.replace("    optimize: q8", "    optimize: q88"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value).endswith("targets[2].optimize[0]: unknown xnnpack_quantize optimization 'q88'; "
                                    "did you mean 'q8'? (known: none, q8)")


def test_a_missing_extra_is_one_line(monkeypatch):
    from mlbench.backends.executorch.export import ExecutorchExportError, require_executorch

    monkeypatch.setitem(sys.modules, "executorch.exir", None)
    with pytest.raises(ExecutorchExportError) as info:
        require_executorch()
    assert str(info.value).startswith("executorch is not installed; install it with "
                                      "pip install 'mlbench-ondevice[executorch]' (")
