"""The conformance lane (benchmarks/coreml_conformance.py) on a sample of coremltools' op tests.

The CI sample is every test function of the shipped suite with ``SAMPLE`` parametrisations each (spread
evenly over its parameters): no case may crash or be wrong (but those listed in ``KNOWN_WRONG``, with
why), a test's own doubtful expected values are counted apart by the lane, and an unsupported case may
only be an op no torch model reaches (``UNREACHED``). The suite is the installed coremltools' own: the lane's
``PINNED_COREMLTOOLS`` names the version these expectations were taken against, and the test says so when
another is installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "coreml_conformance.py"
SAMPLE = 2
UNREACHED = {"classify", "conv_quantized"}  # no kernel; coremltools' torch frontend emits neither
KNOWN_WRONG: set[str] = set()  # test functions whose wrong cases are explained nowhere else; none today


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


def test_the_table_counts_each_case_by_its_op_and_the_sample_keeps_every_test_function():
    lane = _lane()
    results = {"tests/iOS14/test_recurrent.py::TestGRU::test_builder_to_backend_smoke[a]": "pass",
               "tests/iOS14/test_recurrent.py::TestGRU::test_builder_to_backend_smoke[b]": "wrong",
               "tests/iOS17/test_image_resizing.py::TestCropResize::test_builder_to_backend_ios17[c]": "doubtful"}
    rows = {line.split()[0]: line.split()[1:] for line in lane.table(results).splitlines()[1:]}
    assert rows["gru"] == ["1", "0", "1", "0", "0", "0"] and rows["crop_resize"][1] == "1"
    assert rows["TOTAL"] == ["1", "1", "1", "0", "0", "0"]

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    class Hook:
        def pytest_deselected(self, items):
            self.deselected = items

    class Config:
        hook = Hook()

    items = [Item(f"t.py::TestA::test_x[{i}]") for i in range(7)] + [Item("t.py::TestA::test_y[0]")]
    lane._Collector(sample=3).pytest_collection_modifyitems(None, Config, items)
    assert [i.nodeid for i in items] == ["t.py::TestA::test_x[0]", "t.py::TestA::test_x[3]",
                                         "t.py::TestA::test_x[6]", "t.py::TestA::test_y[0]"]
    assert len(Config.hook.deselected) == 4


@pytest.mark.slow  # the whole suite's test functions, SAMPLE cases each, in a subprocess: minutes
@pytest.mark.torch
def test_the_sample_of_every_op_test_function_has_no_wrong_or_crashing_case(tmp_path):
    import coremltools

    lane = _lane()
    if coremltools.__version__ != lane.PINNED_COREMLTOOLS:
        pytest.skip(f"the expectations are coremltools {lane.PINNED_COREMLTOOLS}'s suite; "
                    f"{coremltools.__version__} is installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    cases_file = tmp_path / "cases.json"
    done = subprocess.run([sys.executable, str(SCRIPT), f"--sample={SAMPLE}", f"--json={cases_file}"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(cases_file.read_text())["cases"]
    by_outcome: dict[str, list[str]] = {}
    for node, case in cases.items():
        by_outcome.setdefault(case["outcome"], []).append(f"{node}: {case['detail']}")
    assert len(by_outcome.get("pass", [])) >= 450, done.stdout[-3000:]  # 502 with coremltools 9.0
    wrong = [c for c in by_outcome.get("wrong", []) if c.split("tests/", 1)[-1].split("[")[0] not in KNOWN_WRONG]
    assert not by_outcome.get("crash") and not wrong, (by_outcome.get("crash"), wrong)
    unsupported = {op for c in cases.values() if c["outcome"] == "unsupported"
                   for op in c["detail"].split(": ")[-1].split(", ")}
    assert unsupported <= UNREACHED, unsupported


def test_saved_runs_merge_into_one_table_the_later_run_of_a_case_counting(tmp_path, capsys):
    """One lane run per file keeps the files done when a long run is cut off; `--table` twice merges them."""
    lane = _lane()
    node = "tests/iOS17/test_linear.py::TestLinear::test_linear_ios17_mixed_precision[a]"
    first, rerun = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"cases": {node: {"outcome": "crash"}, node.replace("[a]", "[b]"): {"outcome": "pass"}}}))
    rerun.write_text(json.dumps({"cases": {node: {"outcome": "pass"}}}))
    assert lane.main([f"--table={first}", f"--table={rerun}"]) == 0
    totals = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("TOTAL")).split()[1:]
    assert totals == ["2", "0", "0", "0", "0", "0"]
