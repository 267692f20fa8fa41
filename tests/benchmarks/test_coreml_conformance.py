"""The conformance lane (benchmarks/coreml_conformance.py) on a fast sample of coremltools' op tests.

The sample is gru (fixed in issue 38): it must not crash, and pass at least as many cases as after the fix.
An empty selection fails too (a test id that changed spelling once selected nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # a coremltools op-test sample in a subprocess: ~130 s

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
