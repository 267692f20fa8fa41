"""The Core AI backend end to end with the real packages: coreai-torch conversion, coreai-opt recipes, Core AI's
bundled reference runtime (in its own process), the asset summary, the cache, and `mlbench inspect`."""

from __future__ import annotations

import json
import sys

import pytest

from mlbench.backends.coreai.availability import unavailable
from mlbench.cli.main import main
from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = [pytest.mark.torch, pytest.mark.coreai,
              pytest.mark.skipif(unavailable() is not None, reason=f"needs Core AI: {unavailable()}")]

PIPELINE = f"""\
version: 1
name: cai
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: coreai
    precision: [float32]
    optimize: [none, int8, int4_block, palettize4, prune50, sparse_pal, w8a8]
  - backend: coreai
    precision: [float16]
optimizations:
  int8: {{kind: linear_quantize}}
  int4_block: {{kind: linear_quantize, dtype: int4, granularity: per_block, block_size: 16}}
  palettize4: {{kind: palettize, nbits: 4}}
  prune50: {{kind: prune, target_sparsity: 0.5}}
  sparse_pal: {{kind: chain, steps: [prune50, palettize4]}}
  w8a8: {{kind: linear_quantize_activations}}
verify:
  samples: 2
  tolerance: {{float32: 1.0e-5, float16: 1.0e-2, int8: 1.0e-2, int4_block: 5.0e-2, palettize4: 5.0e-2,
              prune50: 0.1, sparse_pal: 0.1, w8a8: 5.0e-2}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown]}}
"""

COMPRESSED = 4608 + 18432
"""TinyCNN's weights of at least 2048 elements (the second and third convolutions): the ones every recipe
compresses, as coremltools would (its weight_threshold); the first convolution (432) and the head (640) stay."""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coreai")
    path = folder / "pipeline.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    return folder, run(load_pipeline(path))


def records(report):
    return {r.variant_id.removeprefix("tiny/coreai/"): r for r in report.records}


@pytest.mark.slow
def test_float32_asset_is_verified_by_the_reference_runtime_within_1e_5(tiny_run):
    _, report = tiny_run
    record = records(report)["float32/all/none"]
    assert record.status == "ok", record.error
    assert record.verify.source == "reference" and record.verify.samples == 2
    assert record.verify.max_abs <= 1e-5 and record.verify.passed
    assert record.verify.method.startswith("Core AI's bundled CPU reference runtime")
    assert record.metrics["verify.max_rel"].source == "reference"
    # the reference runtime's time is kept as such, never as latency
    assert record.latency is None
    for name in ("latency.median", "latency.best", "first_call", "load_time"):
        assert record.metrics[name].value is None
        assert record.metrics[name].reason.startswith("Core AI runs on a device only on macOS 27")
    assert len(record.details["reference_runtime"]["seconds_per_call"]) == 2
    assert record.details["reference_runtime"]["note"].endswith("not latency")
    op_time = record.details["reference_runtime"]["op_time"]  # Core AI's Profiler, per op
    assert op_time["source"] == "reference" and op_time["runs"] == 2
    conv = next(row for row in op_time["by_op"] if row["op"] == "coreai.conv2d")
    assert conv["calls_per_run"] == 3 and 0 < conv["ms_per_run"] < op_time["execute_ms_per_run"]
    # memory in the reference runtime's own process: labelled reference, never a device's
    for name in ("memory.load", "memory.peak"):
        assert record.metrics[name].source == "reference" and record.metrics[name].value > 0, name
    assert record.details["reference_runtime"]["memory"]["method"].startswith("linux VmHWM")


@pytest.mark.slow
def test_every_recipe_gives_a_smaller_asset_that_still_verifies(tiny_run):
    _, report = tiny_run
    by_id = records(report)
    plain = by_id["float32/all/none"].metrics["size.weights"].value
    stored = {}
    for name in ("int8", "int4_block", "palettize4", "prune50", "sparse_pal", "w8a8"):
        record = by_id[f"float32/all/{name}"]
        assert record.status == "ok", (name, record.error)
        assert record.verify.source == "reference" and record.verify.passed
        assert record.metrics["size.weights"].value < plain, name
        assert record.metrics["size.package"].value < by_id["float32/all/none"].metrics["size.package"].value
        stored[name] = report.artifacts[record.artifact.key]["coreai_asset"]["storage_types"]
    zero_points = 32 + 64  # at most one per output channel, stored in the quantized type
    assert COMPRESSED <= stored["int8"]["Int8"] <= COMPRESSED + zero_points
    blocks = 32 * 1 + 64 * 2  # 16 input channels per block: a zero point per output channel and block
    assert COMPRESSED <= stored["int4_block"]["Int4"] <= COMPRESSED + blocks
    assert stored["palettize4"]["UInt4"] == COMPRESSED  # the indices; the tables stay float32
    assert stored["prune50"]["UInt1"] == COMPRESSED  # the sparsity mask, one bit per weight
    assert stored["sparse_pal"]["UInt1"] == COMPRESSED and "UInt4" in stored["sparse_pal"]
    assert stored["w8a8"]["Int8"] > 432 + COMPRESSED + 640  # coreai-opt's W8A8 quantizes every weight
    w8a8 = report.artifacts[by_id["float32/all/w8a8"].artifact.key]["coreai_asset"]["op_histogram"]
    plain_ops = report.artifacts[by_id["float32/all/none"].artifact.key]["coreai_asset"]["op_histogram"]
    assert w8a8["broadcasting_sub"] > plain_ops.get("broadcasting_sub", 0)  # activations' (de)quantize, lowered


@pytest.mark.slow
def test_float16_casts_weights_and_inputs(tiny_run):
    _, report = tiny_run
    record = records(report)["float16/all/none"]
    assert record.status == "ok", record.error
    asset = report.artifacts[record.artifact.key]["coreai_asset"]
    assert asset["functions"][0]["inputs"] == [{"name": "image", "type": "NDArray (Float16, 1 × 3 × 32 × 32)"}]
    assert asset["storage_types"]["Float16"] > COMPRESSED
    assert record.metrics["size.weights"].value < records(report)["float32/all/none"].metrics["size.weights"].value


@pytest.mark.slow
def test_summary_op_histogram_counts_the_model_and_the_compression(tiny_run):
    _, report = tiny_run
    by_id = records(report)
    plain = report.artifacts[by_id["float32/all/none"].artifact.key]["coreai_asset"]
    assert plain["op_histogram"]["conv2d"] == 3 and "lut_to_dense" not in plain["op_histogram"]
    assert plain["compute_ops"] == plain["ops_total"] - plain["op_histogram"]["constant"]
    assert by_id["float32/all/none"].metrics["ops.compute"].value == plain["compute_ops"]
    palettized = report.artifacts[by_id["float32/all/palettize4"].artifact.key]["coreai_asset"]
    assert palettized["op_histogram"]["lut_to_dense"] == 2  # one per compressed weight
    assert plain["functions"] == [{"name": "main", "inputs": [{"name": "image", "type": "NDArray (Float32, 1 × 3 × 32 × 32)"}],
                                   "outputs": [{"name": "output", "type": "NDArray (Float32, 1 × 10)"}], "states": []}]


@pytest.mark.slow
def test_cache_keys_hold_what_shapes_the_asset_and_a_rerun_exports_nothing(tiny_run):
    folder, report = tiny_run
    keys = {r.variant_id: r.artifact.key for r in report.records}
    assert len(set(keys.values())) == len(keys) == 8
    entries = [e for e in ArtifactCache(folder / "cache").entries() if "derived" not in e.meta]  # the assets
    assert len(entries) == 8
    again = run(load_pipeline(folder / "pipeline.yaml"))
    assert all(r.artifact.cache_hit for r in again.records)
    assert {r.variant_id: r.artifact.key for r in again.records} == keys


@pytest.mark.slow
def test_cache_info_shows_the_key_inputs(tiny_run, capsys):
    folder, report = tiny_run
    record = records(report)["float32/all/int4_block"]
    assert main(["cache", "info", record.artifact.key, "--dir", str(folder / "cache")]) == 0
    info = json.loads(capsys.readouterr().out)
    inputs = info["key_inputs"]
    assert inputs["backend"] == "coreai" and inputs["format"] == "aimodel"
    assert inputs["options"] == {"precision": "float32", "optimization": {
        "kind": "linear_quantize", "dtype": "int4", "mode": "linear_symmetric", "granularity": "per_block",
        "block_size": 16}}
    assert set(inputs["versions"]) == {"torch", "coreai-torch", "coreai-core", "coreai-opt", "mlbench"}
    assert "compute_units" not in json.dumps(inputs)


@pytest.mark.slow
def test_report_marks_reference_figures_and_explains_the_mark(tiny_run):
    folder, _ = tiny_run
    text = next((folder / "out").rglob("*.md")).read_text(encoding="utf-8")
    assert "`‡` (**reference**: a vendor's reference runtime ran the saved program on this machine's CPU" in text
    assert "| ‡" in text
    assert "<details><summary>Core AI asset of tiny/coreai/float32/none" in text
    assert "| `tiny/coreai/float32/palettize4` |" in text
    assert "not device latency" in text and "its Profiler's top ops: `" in text and "`conv2d` " in text


@pytest.mark.slow
def test_an_op_without_a_lowering_fails_its_variants_naming_the_op(write_pipeline, tmp_path):
    (tmp_path / "unsupported.py").write_text(
        "import torch\n"
        "class Erfinv(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.special.erfinv(x.clamp(-0.5, 0.5))\n")
    path = write_pipeline("""\
        version: 1
        name: erf
        models:
          - name: erfinv
            source: unsupported.py:Erfinv
            inputs: [{name: x, shape: [1, 8]}]
        targets:
          - backend: coreai
            precision: [float32, float16]
        cache: {dir: cache}
        report: {dir: out, formats: [json]}
        """)
    report = run(load_pipeline(path))
    assert [r.status for r in report.records] == ["failed", "failed"]
    from mlbench.machine import package_version

    for record in report.records:
        assert record.error == (f"export: Core AI has no lowering for aten.erfinv.default (coreai-torch "
                                f"{package_version('coreai-torch')}; register_torch_lowering() can add one)")


@pytest.mark.slow
def test_inspect_prints_the_asset_summary(tiny_run, capsys):
    _, report = tiny_run
    record = records(report)["float32/all/palettize4"]
    path = record.artifact.path
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "| `main` | `image` NDArray (Float32, 1 × 3 × 32 × 32) | `output` NDArray (Float32, 1 × 10) | – |" in out
    assert f"| UInt4 | {COMPRESSED:,} | {COMPRESSED // 2:,} |" in out
    assert "| `lut_to_dense` | 2 |" in out
    assert main(["inspect", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["op_histogram"]["lut_to_dense"] == 2


def test_inspect_of_a_folder_without_a_program_is_one_line(tmp_path, capsys):
    folder = tmp_path / "empty.aimodel"
    folder.mkdir()
    assert main(["inspect", str(folder)]) == 2
    assert capsys.readouterr().err.strip() == f"{folder}: not a Core AI asset (no main.mlirb inside)"
    assert main(["inspect", str(tmp_path / "missing.aimodel")]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'missing.aimodel'}: no such file or folder"


# -- the reference runtime's process ------------------------------------------------------------------


@pytest.fixture(scope="module")
def asset(tiny_run):
    from pathlib import Path

    _, report = tiny_run
    return Path(records(report)["float32/all/none"].artifact.path)


def _feeds():
    import numpy as np

    rng = np.random.default_rng(0)
    return [{"image": rng.standard_normal((1, 3, 32, 32)).astype("float32")}]


@pytest.mark.slow
def test_an_abort_after_the_results_are_out_does_not_lose_them(asset):
    """Core AI's runtime may abort at interpreter exit: here the child aborts right after handing over."""
    from mlbench.backends.coreai.reference import run_reference

    abort_after = [sys.executable, "-c", "import os, sys\nfrom mlbench.backends.coreai.reference_child import main\n"
                   "main(sys.argv[1:])\nos.abort()"]
    clean = run_reference(asset, _feeds())
    aborted = run_reference(asset, _feeds(), command=abort_after)
    assert clean.exit_note is None
    assert aborted.exit_note.startswith("the reference runtime's process was killed by SIGABRT")
    assert aborted.exit_note.endswith("after handing over its results (Core AI may abort at interpreter exit); "
                                      "the results stand")
    assert (aborted.outputs[0][0] == clean.outputs[0][0]).all()


@pytest.mark.slow
def test_an_abort_before_the_results_fails_in_one_line(asset):
    from mlbench.backends.coreai.reference import ReferenceRunError, run_reference

    abort_first = [sys.executable, "-c", "import os\nprint('loading')\nos.abort()"]
    with pytest.raises(ReferenceRunError) as info:
        run_reference(asset, _feeds(), command=abort_first)
    message = str(info.value)
    assert message.startswith("the Core AI reference runtime was killed by SIGABRT")
    assert message.endswith("before handing over its results: loading")
    assert "\n" not in message


@pytest.mark.slow
def test_an_existing_asset_is_verified_as_it_is(tiny_run, write_pipeline, tmp_path):
    import shutil

    _, report = tiny_run
    asset = tmp_path / "mine.aimodel"
    shutil.copytree(records(report)["float16/all/none"].artifact.path, asset)
    path = write_pipeline(f"""\
        version: 1
        name: existing
        models:
          - name: tiny
            source: {ROOT}/examples/tiny_cnn.py:TinyCNN
            inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
        targets:
          - backend: coreai
            package: {asset}
            precision: float16
        cache: {{dir: cache}}
        report: {{dir: out, formats: [json]}}
        """)
    (record,) = run(load_pipeline(path)).records
    assert record.status == "ok", record.error
    assert record.artifact.path == str(asset) and record.artifact.export_path == "existing Core AI asset"
    assert record.verify.source == "reference" and record.verify.max_rel < 1e-2
    assert record.metrics["size.package"].value == records(report)["float16/all/none"].metrics["size.package"].value


@pytest.mark.slow
def test_flexible_shapes_make_one_asset_verified_at_every_size_enumerated_sizes_a_function_each(write_pipeline):
    path = write_pipeline(f"""\
        version: 1
        name: flex
        models:
          - name: text
            source: {ROOT}/examples/tiny_text.py:TinyText
            inputs:
              - {{name: input_ids, dtype: int64, shape: [1, [8, 16, 24]], range: [0, 100]}}
              - {{name: attention_mask, dtype: int64, shape: [1, [8, 16, 24]], fill: ones}}
          - name: cnn
            source: {ROOT}/examples/tiny_cnn.py:TinyCNN
            inputs: [{{name: image, shape: [1, 3, {{min: 16, max: 64, default: 32}}, {{min: 16, max: 96, default: 48}}]}}]
        targets:
          - backend: coreai
            precision: float32
        verify: {{tolerance: {{float32: 1.0e-5}}}}
        cache: {{dir: cache}}
        report: {{dir: out, formats: [json]}}
        """)
    report = run(load_pipeline(path))
    assert {r.variant_id: r.status for r in report.records} == {
        "text/coreai/float32/all/none/8": "ok", "text/coreai/float32/all/none/16": "ok",
        "text/coreai/float32/all/none/24": "ok", "cnn/coreai/float32/all/none/32x48": "ok"}, [r.error for r in report.records]
    text = [r for r in report.records if r.model == "text"]
    assert len({r.artifact.key for r in text}) == 1  # one asset serves every size
    asset = report.artifacts[text[0].artifact.key]["coreai_asset"]
    # enumerated sizes stay enumerated: one static function per size (set_static_shape_config), weights shared
    assert sorted((f["name"], [i["type"] for i in f["inputs"]]) for f in asset["functions"]) == sorted(
        (f"main_s{n}", [f"NDArray (Int32, 1 × {n})"] * 2) for n in (8, 16, 24))
    sys.path.insert(0, str(ROOT / "examples"))
    from tiny_text import TinyText

    params = sum(p.numel() for p in TinyText().parameters())
    assert 0.9 * params < asset["storage_types"]["Float32"] < 1.1 * params  # one copy of the weights, not three
    assert {r.details["reference_runtime"]["function"] for r in text} == {"main_s8", "main_s16", "main_s24"}
    assert all(r.verify.source == "reference" and r.verify.max_abs <= 1e-5 for r in report.records)
    (cnn,) = [r for r in report.records if r.model == "cnn"]
    assert report.artifacts[cnn.artifact.key]["coreai_asset"]["functions"][0]["inputs"][0]["type"] == \
        "NDArray (Float32, 1 × 3 × ? × ?)"  # height and width: a dimension each (other bounds)


@pytest.mark.slow
def test_the_reference_runtime_stops_with_its_parent_and_at_its_time_limit(asset):
    import os
    import subprocess
    import time

    from mlbench.backends.coreai.reference import LIFELINE_ENV, ReferenceRunError, run_reference

    hang = [sys.executable, "-c", "from mlbench.backends.coreai.reference_child import watch_lifeline\n"
            "watch_lifeline()\nimport time\ntime.sleep(120)"]
    started = time.monotonic()
    with pytest.raises(ReferenceRunError) as info:
        run_reference(asset, _feeds(), command=hang, timeout_s=2)
    assert str(info.value) == "the Core AI reference runtime ran past 2 s"
    assert time.monotonic() - started < 30
    read, write = os.pipe()  # the parent's side of the lifeline: closing it is what the parent's death does
    child = subprocess.Popen(hang, env={**os.environ, LIFELINE_ENV: str(read)}, pass_fds=(read,))
    os.close(read)
    os.close(write)
    assert child.wait(timeout=30) == 86
