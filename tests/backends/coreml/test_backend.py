"""The Core ML backend end to end on Linux: cached exports, analysis in the report, honest absences."""

from __future__ import annotations

import json
import sys
from datetime import datetime

import pytest

from mlbench.cli.main import main
from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache, format_size
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytest.importorskip("coremltools")
pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: cm
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: torch
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out}}
"""


def _packages(folder):
    """The cache's packages: its other entries are figures derived from them (`store/derived.py`)."""
    return [e for e in ArtifactCache(folder).entries() if "derived" not in e.meta]


def coreml_records(report):
    return [r for r in report.records if r.backend == "coreml"]


@pytest.mark.slow
def test_compute_units_share_one_export_and_a_rerun_exports_nothing(write_pipeline, tmp_path):
    pipeline = load_pipeline(write_pipeline(PIPELINE))
    first = coreml_records(run(pipeline))
    assert len(first) == 8 and all(r.status == "ok" for r in first)
    keys = {r.artifact.key for r in first}
    assert len(keys) == 2  # 2 precisions × 4 compute units = 2 exports
    assert not any(r.artifact.cache_hit for r in first)
    assert {r.variant_id: r.artifact.key for r in first}["tiny/coreml/float16/all/none"] == \
        {r.variant_id: r.artifact.key for r in first}["tiny/coreml/float16/cpu_only/none"]
    assert len(_packages(tmp_path / "cache")) == 2

    second = coreml_records(run(pipeline))
    assert all(r.artifact.cache_hit for r in second)
    assert {r.artifact.key for r in second} == keys


@pytest.mark.slow
def test_a_rerun_with_other_compute_units_hits_the_cache_and_another_precision_misses(write_pipeline, tmp_path):
    """compute_units is a load-time choice: the same package serves every value, in a later run too."""

    def only(precision: str, units: str):
        text = PIPELINE.replace("precision: [float32, float16]", f"precision: {precision}").replace(
            "compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]", f"compute_units: {units}")
        (record,) = coreml_records(run(load_pipeline(write_pipeline(text))))
        assert record.status == "ok", record.error
        return record.artifact

    built = only("float16", "all")
    assert not built.cache_hit
    other_units = only("float16", "cpu_only")
    assert other_units.cache_hit and other_units.key == built.key and other_units.path == built.path
    other_precision = only("float32", "cpu_only")
    assert not other_precision.cache_hit and other_precision.key != built.key
    assert sorted(e.key for e in _packages(tmp_path / "cache")) == sorted([built.key, other_precision.key])


@pytest.mark.slow
def test_records_carry_analysis_and_absent_timings_with_reason(core_ml_tiny_run):
    report, tmp_path = core_ml_tiny_run  # PIPELINE with estimate_on, shared with the tests that only read a run
    record = next(r for r in report.records if r.variant_id == "tiny/coreml/float16/cpu_and_ne/none")
    program = report.artifacts[record.artifact.key]["program"]
    assert program["precision"] == "FLOAT16" and program["op_counts"]["conv"] == 3
    assert record.artifact.export_path == "torch.jit.trace"
    assert report.artifacts[record.artifact.key]["export"]["deployment_target"] == "iOS15"
    assert "program" not in record.details  # kept once per artifact, not per variant
    assert record.metrics["size.package"].source == "measured"
    assert record.metrics["macs"].source == "estimated"
    if sys.platform != "darwin":
        median = record.metrics["latency.median"]
        assert (median.value, median.source) == (None, None)
        assert median.reason == "Core ML runs only on macOS; this machine runs Linux"
        assert record.latency is None
        # the program is verified on any OS: mlbench's interpreter ran it (float16: rounded per op)
        assert record.verify.source == "emulated" and record.verify.passed
        assert 0 < record.verify.max_rel <= 1e-2 and record.verify.samples == 1
        assert record.metrics["verify.max_rel"].source == "emulated"
        assert record.metrics["verify.max_rel"].value == record.verify.max_rel
        fp32 = next(r for r in report.records if r.variant_id == "tiny/coreml/float32/cpu_only/none")
        assert fp32.verify.source == "emulated" and fp32.verify.max_rel <= 1e-5
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "#### Program of `tiny/coreml/float16/none` (artifact " in markdown
    assert "<details><summary>Layers (" in markdown
    assert "not timed: Core ML runs only on macOS" in markdown or sys.platform == "darwin"
    assert f"| †{record.verify.max_rel:.2e} |" in markdown or sys.platform == "darwin"
    assert "`†` (**emulated**: mlbench's interpreter ran the saved program" in markdown


@pytest.mark.slow
def test_corrupt_entry_is_rebuilt_with_a_warning(write_pipeline, tmp_path, capsys):
    path = write_pipeline(PIPELINE.replace("precision: [float32, float16]", "precision: float16").replace(
        "compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]", "compute_units: all"))
    assert main(["run", "-q", str(path)]) == 0
    (entry,) = _packages(tmp_path / "cache")
    weights = next(entry.artifact_path.rglob("weight.bin"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    capsys.readouterr()

    assert main(["run", "-q", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"warning: cache entry {entry.key[:12]} is corrupt (checksum mismatch); rebuilding\n" in err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    record = next(r for r in report["records"] if r["backend"] == "coreml")
    assert record["artifact"]["cache_hit"] is False and record["status"] == "ok"
    assert ArtifactCache(tmp_path / "cache").lookup(entry.key) is not None


@pytest.mark.slow
def test_failed_export_fails_its_variants_only(write_pipeline, tmp_path):
    model_file = tmp_path / "unsupported.py"
    model_file.write_text(
        "import torch\n"
        "class Erfinv(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.special.erfinv(x.clamp(-0.5, 0.5))\n"
    )
    text = PIPELINE.replace(
        "targets:", "  - name: erfinv\n    source: unsupported.py:Erfinv\n    inputs: [{name: x, shape: [1, 8]}]\ntargets:")
    report = run(load_pipeline(write_pipeline(text)))
    failed = [r for r in report.records if r.status == "failed"]
    assert {r.model for r in failed} == {"erfinv"} and len(failed) == 8
    assert failed[0].error.startswith(
        "export: Core ML export failed: PyTorch convert function for op 'erfinv' not implemented")
    assert "\n" not in failed[0].error
    assert report.summary == {"ok": 10, "failed": 8, "skipped": 0}


def test_unknown_recipe_and_too_low_target_are_config_errors(write_pipeline):
    text = PIPELINE.replace("compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]",
                            "compute_units: all\n    optimize: [none, palettise4]\n    deployment_target: iOS15")
    text += "optimizations:\n  palettize4: {kind: palettize, nbits: 4}\n"
    path = write_pipeline(text)
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == (
        f"{path}:12:22: targets[1].optimize[1]: unknown optimization 'palettise4'; did you mean 'palettize4'? "
        "(define it under `optimizations`; known: none, palettize4)"
    )
    path = write_pipeline(text.replace("[none, palettise4]", "[none, palettize4]"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == (
        f"{path}:13:24: targets[1].deployment_target: deployment target iOS15 is too low for palettize: "
        "it needs iOS16 or later"
    )


def test_inspect_reads_a_package_saved_by_coremltools(tmp_path, capsys):
    import coremltools as ct
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from tiny_cnn import TinyCNN

    traced = torch.jit.trace(TinyCNN().eval(), torch.randn(1, 3, 32, 32))
    mlmodel = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(1, 3, 32, 32))], convert_to="mlprogram",
                         compute_precision=ct.precision.FLOAT16)
    package = tmp_path / "direct.mlpackage"
    mlmodel.save(str(package))

    assert main(["inspect", str(package)]) == 0
    out = capsys.readouterr().out
    assert "| Precision | FLOAT16 |" in out and "| conv | 3 |" in out
    assert main(["inspect", "--json", str(package)]) == 0
    assert json.loads(capsys.readouterr().out)["op_counts"]["conv"] == 3

    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_text("hello")
    assert main(["inspect", str(not_a_model)]) == 2
    assert capsys.readouterr().err == (
        f"{not_a_model}: not a Core ML model: expected an .mlpackage directory or an .mlmodel file\n")


@pytest.mark.slow
def test_cache_commands(write_pipeline, tmp_path, capsys):
    path = write_pipeline(PIPELINE.replace("precision: [float32, float16]", "precision: float16"))
    assert main(["run", "-q", str(path)]) == 0
    cache_dir = str(tmp_path / "cache")
    capsys.readouterr()
    (entry,) = _packages(tmp_path / "cache")
    on_disk = sum(f.stat().st_size for f in entry.artifact_path.rglob("*") if f.is_file())  # the package's own bytes
    size = format_size(on_disk)
    used = datetime.fromtimestamp(entry.last_used).strftime("%Y-%m-%d %H:%M")
    everything = ArtifactCache(tmp_path / "cache").entries()  # the package and the figures derived from it
    derived = [e for e in everything if "derived" in e.meta]
    assert derived and all(e.meta["derived"].startswith("coreml.") for e in derived)
    assert main(["cache", "ls", "--dir", cache_dir]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert f"{entry.key[:12]}  {size:>9}  used {used}  tiny/coreml/float16/none" in listing
    assert sum(" of tiny/coreml/float16/none" in line for line in listing) == len(derived)
    assert listing[-1].startswith(f"{len(everything)} entries, ") and listing[-1].endswith(f" in {cache_dir} (most recently used first)")
    key = entry.key[:12]
    assert main(["cache", "info", key, "--dir", cache_dir]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["key_inputs"]["options"] == {"precision": "float16", "optimization": None,
                                             "deployment_target": "iOS15"}
    assert "compute_units" not in json.dumps(info["key_inputs"])
    assert main(["cache", "prune", "--max-size", "1kB", "--dir", cache_dir]) == 0
    left = ArtifactCache(tmp_path / "cache").entries()  # least recently used first, until 1 kB or less is left
    assert entry.key not in {e.key for e in left}
    assert capsys.readouterr().out.startswith(f"removed {len(everything) - len(left)} entries (")
    assert main(["cache", "clear", "--dir", cache_dir]) == 0
    assert capsys.readouterr().out == f"removed {len(left)} entries from {cache_dir}\n"
    assert main(["cache", "prune", "--max-size", "lots", "--dir", cache_dir]) == 2
    assert capsys.readouterr().err == "invalid size 'lots': use e.g. 500MB, 5GB\n"


@pytest.mark.slow
def test_an_analysis_stored_by_an_older_mlbench_is_made_again(write_pipeline, tmp_path):
    """Packages cached before placement v2.1 carry an analysis that called a float32 model with a mask
    "mixed": a cache hit reads the package again rather than trust an analysis of another version."""
    path = write_pipeline(PIPELINE.replace("precision: [float32, float16]", "precision: float32").replace(
        "compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]", "compute_units: cpu_and_ne"))
    assert main(["run", "-q", str(path)]) == 0
    (entry,) = _packages(tmp_path / "cache")
    meta_path = entry.path / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["analysis"]["analysis_version"] == 2 and meta["analysis"]["precision"] == "FLOAT32"
    del meta["analysis"]["analysis_version"]
    meta["analysis"]["precision"] = "MIXED"  # what the older analysis said of such a model
    meta_path.write_text(json.dumps(meta))

    report = run(load_pipeline(path))
    (record,) = coreml_records(report)
    assert record.artifact.cache_hit
    assert report.artifacts[record.artifact.key]["program"]["precision"] == "FLOAT32"
    assert record.placement.by_count == {"cpu": 1.0}
