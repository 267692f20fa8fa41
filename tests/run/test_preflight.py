"""A run where no variant can run for a missing package stops before starting: one line naming the extra to
install, exit 2, and neither the previous report nor the history is touched. The packages are made
unimportable in a subprocess (and its children) by a sitecustomize blocker, as on a core-only install."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BLOCKER = """\
import sys

# as on a machine without them: find_spec says None, an import raises ModuleNotFoundError
for name in {blocked!r}:
    sys.modules[name] = None
"""

PIPELINE = """\
version: 1
name: extra
models:
  - name: cnn
    source: tiny_cnn.py:TinyCNN
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
{targets}
report: {{dir: out, formats: [json, markdown, html]}}
history: {{path: history.sqlite}}
"""
TORCH = "  - backend: torch\n    precision: [float32, bfloat16]"
COREML = "  - backend: coreml\n    precision: [float32]\n    compute_units: [cpu_only]"


def run_blocked(tmp_path, blocked: set[str], targets: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(blocked)), encoding="utf-8")
    (tmp_path / "tiny_cnn.py").write_text((ROOT / "pipelines" / "models" / "tiny_cnn.py").read_text())
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(targets=targets), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "mlbench", "run", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("blocked, targets, line", [
    ({"torch", "torchvision"}, TORCH,
     'no variant can run on this machine: torch is not installed; pip install "mlbench-ondevice[torch]"'),
    ({"torch", "torchvision", "coremltools"}, f"{TORCH}\n{COREML}",
     'no variant can run on this machine: torch and coremltools are not installed; '
     'pip install "mlbench-ondevice[coreml]"'),
    ({"coremltools"}, COREML,
     'no variant can run on this machine: coremltools is not installed; pip install "mlbench-ondevice[coreml]"'),
])
def test_a_run_nothing_of_which_can_run_stops_before_touching_anything(tmp_path, blocked, targets, line):
    out = tmp_path / "out"
    out.mkdir()
    previous = {name: f"the previous good {name}" for name in ("report.json", "report.md", "report.html")}
    for name, text in previous.items():
        (out / name).write_text(text)
    history = tmp_path / "history.sqlite"
    history.write_bytes(b"the previous history")
    stamps = {p: p.stat().st_mtime_ns for p in (*out.iterdir(), history)}

    result = run_blocked(tmp_path, blocked, targets)
    assert (result.returncode, result.stderr.splitlines()) == (2, [f"{tmp_path / 'pipeline.yaml'}: {line}"])
    assert sorted(p.name for p in out.iterdir()) == sorted(previous)  # no journal, no lock left
    assert {p: p.stat().st_mtime_ns for p in (*out.iterdir(), history)} == stamps
    assert history.read_bytes() == b"the previous history"


@pytest.mark.torch
def test_a_run_some_of_which_can_run_goes_ahead(tmp_path):
    """coremltools missing, torch there: the torch variants run, the Core ML one is skipped naming its extra."""
    result = run_blocked(tmp_path, {"coremltools"}, f"{TORCH}\n{COREML}")
    assert result.returncode == 0, result.stderr
    assert "2 ok, 1 skipped; 2 timed; reports in" in result.stderr
