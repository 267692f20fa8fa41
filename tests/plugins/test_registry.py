"""Backends are found through the `mlbench.backends` entry points, as an outside package's would be.

The toy backend in tests/toy_backend/ is a distribution of its own (a dist-info folder with one
entry point): put on the path of a fresh `mlbench` process, it validates, runs, reports and
compares like the built-ins, with no edit to mlbench/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench.compare.comparison import default_rules
from mlbench.metrics import catalog
from mlbench.plugins.registry import devices, specs
from tests.conftest import ROOT, TESTS

TOY = TESTS / "toy_backend"

TOY_PIPELINE = f"""\
version: 1
name: toy
models:
  - name: tiny_cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
  - backend: toy
    gain: ["1", "2"]
    mode: [fast, steady]
  - backend: torch
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
report: {{dir: out, formats: [json, markdown, html]}}
history: {{enabled: false}}
"""


def _mlbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOY), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "mlbench.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_builtin_backends_register_through_entry_points():
    assert list(specs()) == ["torch", "coreml", "onnxruntime", "coreai", "litert", "executorch"]
    assert list(devices()) == ["neural_engine", "gpu", "cpu"]
    assert default_rules() == ["latency.median:+10%", "placement.neural_engine:-5pp", "status:failed"]
    assert [m for m in catalog() if m.startswith("placement.")] == [
        "placement.neural_engine", "placement.gpu", "placement.cpu", "placement.count.neural_engine",
        "placement.count.gpu", "placement.count.cpu", "placement.switches"]


@pytest.mark.torch  # the run builds the TinyCNN torch model (validate and schema alone would not need it)
@pytest.mark.slow
def test_a_backend_from_outside_runs_a_pipeline(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_PIPELINE, encoding="utf-8")

    assert _mlbench("validate", str(path), cwd=tmp_path).stdout.strip() == f"{path}: ok"
    schema = json.loads(_mlbench("schema", "pipeline", cwd=tmp_path).stdout)
    assert "ToyTarget" in schema["$defs"]

    bad = tmp_path / "bad.yaml"
    bad.write_text(TOY_PIPELINE.replace('gain: ["1", "2"]', 'gain: ["3"]'), encoding="utf-8")
    result = _mlbench("validate", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"{bad}:10:12: targets[0].gain[0]: '3' is not allowed; expected '1' or '2'"

    result = _mlbench("run", "-q", "--jobs", "1", str(path), cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # gain 2 fails its verification, as it should
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    toy = [r for r in report["records"] if r["backend"] == "toy"]
    assert [r["variant_id"] for r in toy] == ["tiny_cnn/toy/1/fast", "tiny_cnn/toy/1/steady",
                                               "tiny_cnn/toy/2/fast", "tiny_cnn/toy/2/steady"]
    assert [r["status"] for r in toy] == ["ok", "ok", "failed", "failed"]  # gain 2 doubles the outputs
    assert toy[0]["metrics"]["placement.toy_accel"]["value"] == 1.0  # its share of the cost
    assert toy[0]["metrics"]["placement.count.toy_accel"]["value"] == 1.0  # and of the operations
    assert toy[0]["metrics"]["latency.median"]["source"] == "measured"

    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| TOY / ANE / GPU / CPU % of cost |" in markdown  # its device leads, by its rank
    assert "Toy section: 4 toy records." in markdown
    assert "Toy accelerator" in (tmp_path / "out" / "report.html").read_text()

    compared = _mlbench("compare", str(tmp_path / "out"), str(tmp_path / "out"), "--format", "json", cwd=tmp_path)
    assert "placement.toy_accel:-5pp" in json.loads(compared.stdout)["rules"]
