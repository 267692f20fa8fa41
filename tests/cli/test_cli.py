"""The command line as a user meets it: exit codes, one-line errors, no torch on validate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlbench.cli.main import main
from tests.conftest import ROOT


def test_validate_ok_and_errors(write_pipeline, tiny_pipeline_text, capsys):
    good = write_pipeline(tiny_pipeline_text, "good.yaml")
    bad = write_pipeline(tiny_pipeline_text.replace("seed", "sede").replace("version: 1", "version: 1\nsede: 1"),
                         "bad.yaml")
    assert main(["validate", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == f"{good}: ok\n"
    assert err == f"{bad}:2:1: sede: unknown key 'sede'; did you mean 'seed'?\n"


def test_validate_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'nope.yaml'}: cannot read: no such file or directory\n"


def test_validate_never_imports_torch():
    code = (
        "import sys; from mlbench.cli.main import main; "
        "rc = main(['validate', '-q', *sys.argv[1:]]); "
        "heavy = [m for m in ('torch', 'torchvision', 'coremltools', 'onnxruntime', 'numpy') if m in sys.modules]; "
        "print(heavy); sys.exit(rc)"
    )
    pipelines = sorted(str(p) for p in (ROOT / "pipelines").glob("*.yaml"))
    result = subprocess.run([sys.executable, "-c", code, *pipelines], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_plan_counts(write_pipeline, tiny_pipeline_text, capsys):
    text = tiny_pipeline_text.replace("device: [cpu]", "device: [cpu, cuda]").replace(
        "precision: [float32]", "precision: [float32, bfloat16]")
    assert main(["plan", str(write_pipeline(text))]) == 0
    out = capsys.readouterr().out
    assert "tiny_cnn/torch/cuda/bfloat16" in out
    assert "4 variants, 2 artifacts to build, 1 models" in out


def test_schema_prints_json(capsys):
    assert main(["schema", "report"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "mlbench report"


def test_committed_schemas_match_the_models(tmp_path):
    assert main(["schema", "--write", str(tmp_path)]) == 0
    for name in ("pipeline", "report"):
        generated = (tmp_path / f"{name}.schema.json").read_text()
        committed = (ROOT / "schemas" / f"{name}.schema.json").read_text()
        assert committed == generated, f"schemas/{name}.schema.json is stale: run `mlbench schema --write schemas`"


def test_every_shipped_pipeline_validates():
    pipelines = sorted((ROOT / "pipelines").glob("*.yaml"))
    assert pipelines
    assert main(["validate", "-q", *map(str, pipelines)]) == 0


def test_run_against_a_missing_base_stops_before_running_in_one_line(write_pipeline, tiny_pipeline_text, tmp_path,
                                                                     capsys):
    path = write_pipeline(tiny_pipeline_text)
    assert main(["run", str(path), "--against", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"--against: {tmp_path / 'nope.json'}: no such report file, and not a history "
                                        "reference (last, last-on-this-machine or a run id)"]
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


@pytest.mark.torch
@pytest.mark.slow
def test_run_against_a_base_report_opens_report_md_with_what_changed(write_pipeline, tiny_pipeline_text, tmp_path):
    path = write_pipeline(tiny_pipeline_text + "history: {enabled: false}\n")
    assert main(["run", "-q", str(path)]) == 0
    (tmp_path / "out").rename(tmp_path / "base")
    assert main(["run", "-q", str(path), "--against", str(tmp_path / "base")]) in (0, 1)
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.index("## What changed against the base run") < text.index("## Which variant to ship")
    assert "tiny_cnn/torch/cpu/float32" in text[:text.index("## Which variant to ship")]
