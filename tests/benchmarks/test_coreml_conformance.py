"""The conformance lane (benchmarks/coreml_conformance.py) on a fast sample of coremltools' op tests.

The sample holds the op families fixed in issue 38; each must have no wrong result and no crash.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "coreml_conformance.py"
SAMPLE = ["iOS14/test_tensor_transformation.py", "iOS14/test_recurrent.py", "-k",
          "(TestFlatten2d or TestReshapeLike or (TestGRU and smoke)) and backend1"]


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
    assert {"flatten2d", "reshape_like", "gru", "TOTAL"} <= set(rows), done.stdout[-2000:]
    for op in ("flatten2d", "reshape_like"):
        passed, wrong, unsupported, crash, _na = rows[op]
        assert passed > 0 and wrong == 0 and crash == 0 and unsupported == 0, (op, rows[op])
    assert rows["gru"][3] == 0 and rows["gru"][0] > 0
