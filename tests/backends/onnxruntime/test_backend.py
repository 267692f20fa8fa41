"""The ONNX Runtime backend end to end on this machine: real torch.onnx exports, real sessions, real profiles."""

from __future__ import annotations

import itertools
import json
import sys

import pytest

from mlbench.cli.main import main
from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: ox
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: torch
  - backend: onnxruntime
    precision: [float32, float16]
    providers: [cpu, cuda]
latency: {{warmup: 2, repeats: 5, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out}}
"""


def ort_records(report):
    return {r.variant_id: r for r in report.records if r.backend == "onnxruntime"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One real run of PIPELINE, shared by the tests that only read its results."""
    folder = tmp_path_factory.mktemp("ort")
    path = folder / "pipeline.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    return folder, run(load_pipeline(path))


def test_providers_share_one_export_and_a_rerun_exports_nothing(tiny_run):
    folder, report = tiny_run
    records = ort_records(report)
    assert len(records) == 4
    keys = {r.artifact.key for r in records.values()}
    assert len(keys) == 2  # 2 precisions × 2 providers = 2 exports
    assert records["tiny/onnxruntime/float32/cpu"].artifact.key == records["tiny/onnxruntime/float32/cuda"].artifact.key
    entries = ArtifactCache(folder / "cache").entries()
    assert len(entries) == 2
    for entry in entries:
        assert entry.meta["key_inputs"]["format"] == "onnx"
        assert set(entry.meta["key_inputs"]["options"]) == {"precision", "opset"}
        assert set(entry.meta["key_inputs"]["versions"]) == {"torch", "onnx", "onnxruntime", "mlbench"}
        assert "providers" not in json.dumps(entry.meta["key_inputs"])

    # graph_optimization is chosen when the session is created: another level reuses both files
    text = PIPELINE.replace("providers: [cpu, cuda]", "providers: cpu\n    graph_optimization: basic").replace("dir: out", "dir: out-basic")
    (folder / "basic.yaml").write_text(text, encoding="utf-8")
    again = ort_records(run(load_pipeline(folder / "basic.yaml")))
    assert all(r.artifact.cache_hit for r in again.values())
    assert {r.artifact.key for r in again.values()} == keys
    assert all(r.status == "ok" for r in again.values())


def test_missing_provider_is_skipped_with_the_reason(tiny_run):
    _, report = tiny_run
    record = ort_records(report)["tiny/onnxruntime/float32/cuda"]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine's onnxruntime has the CUDA provider")
    assert record.status == "skipped"
    assert record.error.startswith(f"onnxruntime {ort.__version__} on this machine has no CUDAExecutionProvider "
                                   "(available: ")
    assert "CPUExecutionProvider" in record.error
    assert report.summary["failed"] == 0


def test_float32_cpu_is_measured_placed_profiled_and_verified(tiny_run):
    folder, report = tiny_run
    record = ort_records(report)["tiny/onnxruntime/float32/cpu"]
    assert record.status == "ok"
    assert record.artifact.export_path == "torch.onnx.export(dynamo=True)"
    graph = onnx.load(record.artifact.path).graph

    placement = record.placement
    assert (placement.source, placement.method, placement.preferred) == ("measured", "onnxruntime profiling", "cpu")
    assert placement.by_count == {"cpu": 1.0} and placement.by_cost == {"cpu": pytest.approx(1.0)}
    assert placement.cost_basis == "time" and placement.switches == 0 and placement.note is None
    assert placement.constants == len(graph.initializer) + sum(n.op_type == "Constant" for n in graph.node) > 0
    assert placement.compute_ops == len(placement.ops) > 0
    assert {op.provider for op in placement.ops} == {"CPUExecutionProvider"}
    # ORT runs its optimized graph: BatchNorm is folded, each Conv+ReLU is one fused Conv node
    assert sum(op.op_type == "Conv" for op in placement.ops) == 3
    assert "Relu" not in {op.op_type for op in placement.ops}
    assert record.metrics["placement.cpu"].model_dump() == {"value": 1.0, "unit": "ratio", "source": "measured",
                                                             "reason": None}
    assert record.metrics["placement.switches"].value == 0

    op_time = record.details["op_time"]
    assert op_time["runs"] == 10 and op_time["warmup_runs"] == 2
    by_type, by_node = op_time["by_type"], op_time["by_node"]
    # which type is slowest depends on the machine's load: the Conv row's node count does not
    assert next(r for r in by_type if r["op_type"] == "Conv")["nodes"] == 3
    assert [r["time_ms"] for r in by_type] == sorted((r["time_ms"] for r in by_type), reverse=True)
    assert len(by_node) == placement.compute_ops
    assert sum(r["time_ms"] for r in by_node) == pytest.approx(op_time["total_ms"])
    assert sum(r["share"] for r in by_type) == pytest.approx(1.0)
    assert {op.name: op.time_ms for op in placement.ops} == {r["name"]: r["time_ms"] for r in by_node}

    latency = record.latency
    assert latency.warmup == 2 and len(latency.samples) >= 5 and latency.threads >= 1
    assert record.details["session"]["intra_op_threads"] == latency.threads
    assert record.metrics["latency.median"].value == latency.median > 0
    for name in ("load_time", "first_call", "latency.best", "latency.p90"):
        assert record.metrics[name].source == "measured" and record.metrics[name].value > 0
    assert record.verify.reference == "torch/cpu/float32" and record.verify.passed
    assert record.verify.max_rel <= 1e-5 and record.verify.tolerance == 1e-4
    assert record.metrics["size.package"].value == record.artifact.size_bytes
    assert record.metrics["macs"].value is None and record.metrics["macs"].reason

    details = report.artifacts[record.artifact.key]
    assert details["export"]["fallback_reason"] is None and details["export"]["float16_conversion"] is None
    assert details["onnx_graph"]["op_counts"]["Conv"] == 3 and details["onnx_graph"]["inputs"] == ["image"]

    markdown = (folder / "out" / "report.md").read_text()
    assert "<summary>Per-operator time of <code>onnxruntime/float32/cpu</code>" in markdown
    assert "| Conv | 3 |" in markdown
    assert "| `onnxruntime/float32/cuda` | skipped |" in markdown or "CUDAExecutionProvider" in ort.get_available_providers()


def test_float16_keeps_float32_io_and_says_what_ran_in_float32(tiny_run):
    _, report = tiny_run
    record = ort_records(report)["tiny/onnxruntime/float16/cpu"]
    assert record.status == "ok", record.error
    model = onnx.load(record.artifact.path)
    float_, half = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [float_]
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [float_]
    assert {i.data_type for i in model.graph.initializer if i.dims and len(i.dims) == 4} == {half}
    assert report.artifacts[record.artifact.key]["export"]["float16_conversion"] == (
        "onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)")
    assert record.artifact.size_bytes < ort_records(report)["tiny/onnxruntime/float32/cpu"].artifact.size_bytes * 0.7
    assert record.verify.passed and 0 < record.verify.max_rel <= 1e-2  # float16 weights: not bit-exact
    # onnxruntime's CPU provider has no float16 Conv on x86: it inserts Casts and runs it in float32
    note = record.placement.note
    if any(op.op_type == "Conv" and op.name.startswith("InsertedPrecisionFreeCast_") for op in record.placement.ops):
        assert note.startswith("float16 graph, but ") and "Conv ×3" in note


@pytest.mark.slow
def test_export_falls_back_to_torchscript_and_says_why(write_pipeline, tmp_path):
    (tmp_path / "branchy.py").write_text(
        "import torch\n"
        "class Branchy(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:\n"  # data-dependent control flow: torch.export refuses, tracing records one branch
        "            return x * 2\n"
        "        return x * 3\n"
    )
    path = write_pipeline(PIPELINE.replace(
        "targets:", "  - name: branchy\n    source: branchy.py:Branchy\n    inputs: [{name: x, shape: [1, 8]}]\ntargets:"
    ).replace("providers: [cpu, cuda]", "providers: cpu").replace("precision: [float32, float16]", "precision: float32"))
    report = run(load_pipeline(path))
    record = ort_records(report)["branchy/onnxruntime/float32/cpu"]
    assert record.status == "ok", record.error
    assert record.artifact.export_path == "torch.onnx.export(dynamo=False)"
    reason = report.artifacts[record.artifact.key]["export"]["fallback_reason"]
    assert reason.startswith("torch.onnx.export(dynamo=True): GuardOnDataDependentSymNode: ")
    assert record.verify.max_rel == 0.0
    assert ort_records(report)["tiny/onnxruntime/float32/cpu"].artifact.export_path == "torch.onnx.export(dynamo=True)"


@pytest.mark.slow
def test_failed_export_fails_its_variants_only(write_pipeline, tmp_path):
    (tmp_path / "unsupported.py").write_text(
        "import torch\n"
        "class Erfinv(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.special.erfinv(x.clamp(-0.5, 0.5))\n"
    )
    path = write_pipeline(PIPELINE.replace(
        "targets:", "  - name: erfinv\n    source: unsupported.py:Erfinv\n    inputs: [{name: x, shape: [1, 8]}]\ntargets:"
    ).replace("providers: [cpu, cuda]", "providers: cpu"))
    report = run(load_pipeline(path))
    failed = [r for r in report.records if r.status == "failed"]
    assert {r.variant_id for r in failed} == {"erfinv/onnxruntime/float32/cpu", "erfinv/onnxruntime/float16/cpu"}
    assert failed[0].error.startswith("export: ONNX export failed: dynamo exporter: DispatchError: No ONNX function "
                                      "found for <OpOverload(op='prims.erf_inv'")
    assert "; TorchScript exporter: UnsupportedOperatorError: Exporting the operator 'aten::erfinv'" in failed[0].error
    assert "\n" not in failed[0].error and "\x1b" not in failed[0].error
    assert report.summary == {"ok": 4, "failed": 2, "skipped": 0}


def test_config_mistakes_are_one_line_errors(write_pipeline):
    path = write_pipeline(PIPELINE.replace("providers: [cpu, cuda]", "providers: [cpu, cdua]"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value).startswith(f"{path}:11:22: targets[1].providers[1]: 'cdua' is not allowed; expected 'cpu', ")
    path = write_pipeline(PIPELINE.replace("providers: [cpu, cuda]", "providers: cpu\n    coreml_compute_units: cpu_and_ne"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == (f"{path}:12:27: targets[1].coreml_compute_units: coreml_compute_units applies to the "
                               "coreml provider only; add coreml to providers or remove this key")
    path = write_pipeline(PIPELINE.replace("providers: [cpu, cuda]", "providers: cpu\n    graph_optimisation: all"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == (f"{path}:12:5: targets[1].graph_optimisation: unknown key 'graph_optimisation'; "
                               "did you mean 'graph_optimization'?")


def test_cache_info_shows_the_onnx_key(tiny_run, capsys):
    folder, _ = tiny_run
    cache_dir = str(folder / "cache")
    assert main(["cache", "ls", "--dir", cache_dir]) == 0
    out = capsys.readouterr().out
    assert "tiny/onnxruntime/float16" in out and "tiny/onnxruntime/float32" in out
    key = next(line.split()[0] for line in out.splitlines() if "tiny/onnxruntime/float16" in line)
    assert main(["cache", "info", key, "--dir", cache_dir]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["key_inputs"]["options"] == {"precision": "float16", "opset": None}
    assert info["export_path"] == "torch.onnx.export(dynamo=True)" and info["opset"] >= 18


@pytest.mark.slow
def test_opset_is_part_of_the_key(write_pipeline, tmp_path):
    path = write_pipeline(PIPELINE.replace("providers: [cpu, cuda]", "providers: cpu\n    opset: 18").replace(
        "precision: [float32, float16]", "precision: float32"))
    record = ort_records(run(load_pipeline(path)))["tiny/onnxruntime/float32/cpu"]
    assert record.status == "ok", record.error
    model = onnx.load(record.artifact.path)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [18]
    (entry,) = ArtifactCache(tmp_path / "cache").entries()
    assert entry.meta["key_inputs"]["options"] == {"precision": "float32", "opset": 18}


# -- profile parsing, on a real profile written by onnxruntime ---------------------------------


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory):
    """(events, onnx path) of 3 runs of TinyCNN in a one-thread profiled session."""
    import numpy as np
    import torch

    from mlbench.backends.onnxruntime.export import export_onnx
    from mlbench.backends.onnxruntime.profile import load_events

    sys.path.insert(0, str(ROOT / "examples"))
    from tiny_cnn import TinyCNN

    folder = tmp_path_factory.mktemp("profile")
    torch.manual_seed(0)
    result = export_onnx(TinyCNN().eval(), [torch.randn(1, 3, 32, 32)], ["image"], ["output"],
                         precision="float32", opset=None, dest=folder)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "prof")
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(result.artifact), options, providers=["CPUExecutionProvider"])
    feed = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32), dtype=np.float32)}
    for _ in range(3):
        session.run(None, feed)
    return load_events(session.end_profiling()), result.artifact


def test_profile_drops_warmup_runs_and_averages_the_rest(real_profile):
    from mlbench.backends.onnxruntime.profile import parse_profile

    events, _ = real_profile
    runs = sorted((e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"), key=lambda e: e["ts"])
    assert len(runs) == 3
    kept = runs[1:]
    expected: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and any(
                r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in kept):
            expected.setdefault(e["name"].removesuffix("_kernel_time"), []).append(e["dur"])

    profile = parse_profile(events, skip_runs=1)
    assert (profile.runs, profile.skipped_runs, profile.threads) == (2, 1, 1)  # one thread: no pool in the stats
    assert [n.name for n in profile.nodes] == list(expected)  # execution order
    for node in profile.nodes:
        assert node.time_ms == pytest.approx(sum(expected[node.name]) / 2 / 1000)
        assert (node.provider, node.device, node.output_dtype) == ("CPUExecutionProvider", "cpu", "float")
    assert profile.run_ms == [r["dur"] / 1000 for r in kept]
    assert profile.total_ms <= sum(profile.run_ms) / 2  # kernels run inside the runs


def test_profile_without_enough_runs_or_nodes_is_an_error(real_profile):
    from mlbench.backends.onnxruntime.profile import ProfileError, parse_profile

    events, _ = real_profile
    with pytest.raises(ProfileError, match="the profile holds 3 runs; 3 warmup runs leave none"):
        parse_profile(events, skip_runs=3)
    with pytest.raises(ProfileError, match="the profiled runs hold no node events"):
        parse_profile([e for e in events if e.get("cat") != "Node"])


def test_placement_counts_fallbacks_switches_and_time(real_profile):
    """The real profile with its Conv nodes relabelled as the CUDA provider's: what a CUDA run reports."""
    import copy

    from mlbench.backends.onnxruntime.profile import build_placement, op_time_tables, parse_profile

    events, path = real_profile
    relabelled = copy.deepcopy(events)
    for e in relabelled:
        if e.get("cat") == "Node" and e.get("args", {}).get("op_name") == "Conv":
            e["args"]["provider"] = "CUDAExecutionProvider"
    profile = parse_profile(relabelled, skip_runs=1)
    graph = onnx.load(str(path)).graph
    placement = build_placement(profile, constants=len(graph.initializer), preferred_provider="CUDAExecutionProvider",
                                precision="float32")
    nodes = profile.nodes
    on_gpu = [n for n in nodes if n.op_type == "Conv"]
    assert placement.preferred == "gpu" and placement.constants == len(graph.initializer)
    assert placement.by_count == {"gpu": pytest.approx(len(on_gpu) / len(nodes)),
                                  "cpu": pytest.approx(1 - len(on_gpu) / len(nodes))}
    assert placement.by_cost["gpu"] == pytest.approx(sum(n.time_ms for n in on_gpu) / profile.total_ms)
    devices = [n.device for n in nodes]
    assert placement.switches == sum(a != b for a, b in itertools.pairwise(devices)) >= 1
    cpu_types = sorted(n.op_type for n in nodes if n.op_type != "Conv")
    assert placement.note.startswith(f"{len(cpu_types)} of {len(nodes)} nodes fell back from CUDAExecutionProvider "
                                     "to the CPU provider: ")
    assert all(f"{t} ×{cpu_types.count(t)}" in placement.note for t in cpu_types)
    assert [(op.device, op.provider) for op in placement.ops if op.op_type == "Conv"] == \
        [("gpu", "CUDAExecutionProvider")] * len(on_gpu)

    tables = op_time_tables(profile)
    conv = next(r for r in tables["by_type"] if r["op_type"] == "Conv")
    assert conv["providers"] == {"CUDAExecutionProvider": len(on_gpu)}
    assert tables["by_node"][0]["time_ms"] == max(n.time_ms for n in nodes)

    none_on_gpu = build_placement(parse_profile(events, skip_runs=1), constants=0,
                                  preferred_provider="CUDAExecutionProvider", precision="float32")
    assert none_on_gpu.note == f"no node ran on CUDAExecutionProvider; all {len(nodes)} ran on CPUExecutionProvider"
