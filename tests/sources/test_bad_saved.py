"""A bad `.pt2` source fails in one line; torch's own ~20-line traceback log stays out of the run's output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.torch

SCRIPT = """
import sys
from pathlib import Path
from mlbench.sources.saved import load_saved
try:
    load_saved(Path(sys.argv[1]), {})
except Exception as exc:
    print(exc)
"""


def test_a_bad_pt2_is_one_line_and_torch_logs_nothing(tmp_path):
    bad = tmp_path / "model.pt2"
    bad.write_bytes(b"PK not a program")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(bad)], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, cwd=tmp_path)
    assert done.stdout.startswith("torch.export.load(model.pt2) failed: ") and done.stdout.count("\n") == 1, done.stdout
    assert "Traceback" not in done.stderr and "torch/export" not in done.stderr, done.stderr
