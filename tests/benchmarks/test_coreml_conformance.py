"""The conformance lane (benchmarks/coreml_conformance.py) on a fast sample of coremltools' op tests.

The sample is gru (fixed in issue 38): it must not crash, and pass at least as many cases as after the fix.
An empty selection fails too (a test id that changed spelling once selected nothing).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "coreml_conformance.py"
# iOS15 ML programs at fp32 (256 cases). Selected by words in the ids, which pytest 9 spells out in full
# (``backend=BackendConfig(backend='mlprogram', precision='fp32', ...)``); older pytest numbered them.
SAMPLE = ["iOS14/test_recurrent.py", "-k", "TestGRU and smoke and mlprogram and fp32"]


def _table(out: str) -> dict[str, list[int]]:
    rows = {}
    for line in out.splitlines()[out.splitlines().index(next(x for x in out.splitlines() if x.startswith("op "))) + 1:]:
        name, *counts = line.split()
        rows[name] = [int(c) for c in counts]
    return rows


def _lane():
    spec = importlib.util.spec_from_file_location("bench_coreml_conformance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_float16_cases_are_judged_by_ulps_of_the_expected_value():
    within = _lane().within
    expected = np.array([0.5, 0.25, -2.0], dtype=np.float32)
    ulp = np.spacing(np.abs(expected).astype(np.float16)).astype(np.float64)  # 2**-11, 2**-12, 2**-9
    assert within(expected + 4 * ulp, expected, "fp16", 1e-6, 1e-5).all()  # float16 rounding, a few ops deep
    gru_like = expected + np.array([0.045, 0.0, 0.0])  # the old GRU reset gate's error at 0.5
    assert within(gru_like, expected, "fp16", 1e-6, 1e-5).tolist() == [False, True, True]
    assert within(gru_like, expected, "flat16", 1e-6, 1e-5).all()  # coremltools' flat 0.5/0.05 hid it
    # an element far below the tensor's largest is judged by ulps of max|expected| / 16 (cancellation)
    small = np.array([1e-4, 64.0], dtype=np.float32)
    assert within(small + np.array([0.03, 0.0]), small, "fp16", 0.0, 0.0).all()  # ulp16(4) = 2**-8
    assert not within(small + np.array([0.1, 0.0]), small, "fp16", 0.0, 0.0).all()


@pytest.mark.slow  # a coremltools op-test sample in a subprocess: ~130 s
@pytest.mark.torch
def test_the_sample_routes_coremltools_op_tests_through_the_interpreter(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(SCRIPT), *SAMPLE], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _table(done.stdout)
    assert {"gru", "TOTAL"} <= set(rows), done.stdout[-2000:]
    passed, wrong, unsupported, crash, _na = rows["gru"]
    assert passed + wrong == 256, rows["gru"]  # the whole sample reached the comparison
    assert passed >= 224 and crash == 0 and unsupported == 0, rows["gru"]  # 224 with coremltools 9.0
