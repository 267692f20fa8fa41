"""The conformance lane (benchmarks/coreml_conformance.py) on a fast sample of coremltools' op tests.

The sample is gru (fixed in issue 38): it must not crash, and pass at least as many cases as after the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # a coremltools op-test sample in a subprocess: ~100 s

SCRIPT = ROOT / "benchmarks" / "coreml_conformance.py"
SAMPLE = ["iOS14/test_recurrent.py", "-k", "TestGRU and smoke and backend1"]  # iOS15 fp32


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
    passed, _wrong, unsupported, crash, _na = rows["gru"]
    assert passed >= 107 and crash == 0 and unsupported == 0, rows["gru"]  # 106 before the gru fix
