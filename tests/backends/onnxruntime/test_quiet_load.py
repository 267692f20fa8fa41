"""A model ONNX Runtime cannot load: its coloured `[E:onnxruntime ... EndProfiling]` line, written by C++ to file
descriptor 2, stays off the terminal; the Python error (what the record keeps) still says what went wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("onnxruntime")

SCRIPT = """
import sys, types
import onnxruntime as ort
from mlbench.backends.onnxruntime.backend import {cls}
options = ort.SessionOptions()
options.enable_profiling = True
fake = types.SimpleNamespace(_providers=lambda provider: ["CPUExecutionProvider"])
try:
    {cls}._session(fake, ort, sys.argv[1], "cpu", options)
except Exception as exc:
    print("error:", str(exc).splitlines()[0][:60])
"""


def test_a_model_that_fails_to_load_prints_nothing_of_ort_s_own(tmp_path):
    from mlbench.backends.onnxruntime import backend

    cls = next(name for name, value in vars(backend).items() if isinstance(value, type) and hasattr(value, "_session"))
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(cls=cls), str(bad)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120, cwd=tmp_path)
    assert done.stdout.startswith("error: [ONNXRuntimeError] : 7 : INVALID_PROTOBUF"), done.stdout + done.stderr
    assert "onnxruntime" not in done.stderr and "\x1b" not in done.stderr, done.stderr
