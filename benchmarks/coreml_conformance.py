"""Conformance: coremltools' own MIL op tests, run through mlbench's Core ML interpreter (issue 38).

    python benchmarks/coreml_conformance.py                      # the whole shipped suite (long)
    python benchmarks/coreml_conformance.py iOS14/test_recurrent.py -k "TestGRU"   # any pytest selection
    python benchmarks/coreml_conformance.py --json=cases.json ...   # also each case's outcome and detail
    python benchmarks/coreml_conformance.py --sample=2   # every test function, 2 parametrisations each (CI)
    python benchmarks/coreml_conformance.py --table=cases.json   # the per-op and per-family tables of a saved run
    python benchmarks/coreml_conformance.py --table=a.json --table=b.json   # of several saved runs, merged

Each op test builds a program with the MIL builder and hands it, with numpy expected outputs and
tolerances, to ``compare_backend`` (which on macOS runs Core ML). Here that helper is replaced: the
program, already converted by the test to an ML program at its deployment target and precision, is
run by ``mlbench.backends.coreml.emulate`` and compared with the expected outputs. float32 programs
use the test's own atol/rtol. float16 programs (a program taking float16 inputs or computing in float16
anywhere is one, whatever the test's backend label says) are judged by float16 ulps of the expected value
(``FP16_ULPS`` of ``max(|expected|, max|expected| / 16)``, plus the test's float32 atol), not by
coremltools' flat ``max(100 * atol, 0.5)``/``max(100 * rtol, 0.05)``: that tolerance let a wrong GRU
reset gate (0.045 off) and a wrong LSTM clip (0.31 off) pass. A float16 case that fails by ulps
but is within the flat tolerance is counted wrong and listed under the table, so a reader can tell
those from gross errors. Each case counts as
pass / doubtful (the test's own expected values are off: see ``DOUBTFUL_CAUSES``) / wrong / unsupported /
crash, or n/a (never reached the comparison: the neuralnetwork backend,
type-inference-only tests, tests expecting the converter to reject the program, stateful programs).
A mismatch raises AssertionError and a crash RuntimeError, as ``compare_backend`` and Core ML do: a test
that expects that failure (out-of-range indices, undefined results) passes, and then the case counts as a
pass. Counts are per test class (``TestGRU`` -> ``gru``) and per family (the test file). The whole suite
is ~20,000 cases, well over an hour on a 2-core machine (``gc.freeze`` spares ct.convert's full
collection per case, which was 90% of the time); ``--sample=2`` is ~900. The suite is the installed coremltools' own:
``PINNED_COREMLTOOLS`` says which one these counts were taken against.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

PINNED_COREMLTOOLS = "9.0"
FP16_ULPS = 16  # float16 rounding of inputs and of each op's intermediates, a few ops deep
OUTCOMES = ("pass", "doubtful", "wrong", "unsupported", "crash", "n/a")
_results: dict[str, str] = {}
_details: dict[str, str] = {}  # node -> why it was not a pass (error, largest difference, missing ops)
_flat_fp16_pass: set[str] = set()  # wrong by ulps, within coremltools' flat fp16 tolerance
_RANK = {o: i for i, o in enumerate(("n/a", "pass", "doubtful", "wrong", "unsupported", "crash"))}
DOUBTFUL_CAUSES: list[tuple[str, str]] = [
    # (a pytest node id pattern, why that test's expected values are not what the program computes)
    (r"TestCropResize::test_builder_to_backend_ios1[67]", "expected value written to 3 decimals: 7.899 for "
     "x[1.5, 0.9] = 4 * 1.5 + 0.9 + 1 = 7.9 on x[r, c] = 4r + c + 1, at the test's atol 1e-4"),
    (r"test_conv\.py::TestConv(Transpose)?::test_builder_to_backend_stress", "expected computed by torch from the "
     "float32 weights before their float16 cast (the program holds float16 weights and computes in float32)"),
    (r"iOS15/test_image_resizing\.py::TestCropResize::test_builder_to_backend_smoke", "the box is outside the op's "
     "domain: normalized coordinates [2, 2, 1, 1], where coremltools' iOS15 crop_resize says 'the bounding box "
     "coordinates must be in the interval [0, 1]' and has no pad_value (iOS17's pad_value defines that case), "
     "so the expected values record one device's undefined result"),
    (r"test_normalization\.py::TestNormalization\w+::", "expected computed from the float32 parameters (gamma, "
     "beta) before their float16 cast (the program holds float16 parameters and computes in float32)"),
    (r"test_recurrent\.py::Test(RNN|GRU)::test_builder_to_backend_smoke", "expected computed from the weights "
     "before their float16 cast (torch's float32 RNN, with float32 inputs; the GRU's float64 numpy reference), where "
     "the float16 program holds the weights, bias and inputs rounded to float16"),
]
"""Cases counted apart as the test's own fault: only where a float64 run of the program as stored agrees
with the interpreter and not with the expected values (``_doubtful_reason``), for a cause named here."""


def _node() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" (")[0]


def _record(outcome: str, detail: str = "") -> None:
    node = _node()
    if _RANK[outcome] >= _RANK.get(_results.get(node, "n/a"), 0):
        _results[node] = outcome
        if detail:
            _details[node] = detail


def emulated_compare_backend(mlmodel, input_key_values, expected_outputs, dtype="fp32", atol=1e-04,
                             rtol=1e-05, also_compare_shapes=True, state=None, allow_mismatch_ratio=0.0):
    """coremltools' ``compare_backend`` with the interpreter in Core ML's place; records, never raises."""
    import numpy as np

    from mlbench.backends.coreml.emulate import Emulator, UnsupportedOps, load_program

    if not getattr(mlmodel, "is_package", False) or state is not None or expected_outputs is None:
        _record("n/a")
        return None
    try:
        program = load_program(mlmodel.package_path)
        emulator = Emulator(program)
        outputs = emulator.run(dict(input_key_values))
    except UnsupportedOps as error:
        _record("unsupported", str(error))
        return None
    except Exception as error:
        _record("crash", f"{type(error).__name__}: {error}"[:300])
        # as Core ML refuses a prediction: a test that expects the refusal passes (then it counts as a pass)
        raise RuntimeError(f"Unable to compute the prediction using ML Program: {error}") from error
    if _computes_in_float16(program):
        dtype = "fp16"  # a float16 program (fp16 inputs and weights) under a "fp32" backend label is float16
    for name, expected in expected_outputs.items():
        got = outputs.get(name)
        expected = np.asarray(expected)
        if got is None or (also_compare_shapes and got.shape != expected.shape):
            _record("wrong", f"{name}: shape {None if got is None else got.shape}, expected {expected.shape}")
            raise AssertionError(f"Not equal: {name} shape")
        if np.mean(~within(got, expected, dtype, atol, rtol)) > allow_mismatch_ratio:
            detail = f"{name}: {_difference(got, expected)} ({dtype})"
            exact = _float64_run(program, input_key_values, name)
            reason = _doubtful_reason(got, expected, exact, dtype, atol, rtol, allow_mismatch_ratio)
            if reason:
                _record("doubtful", f"{detail}; {reason}")
                return outputs
            if dtype == "fp16" and np.mean(~within(got, expected, "flat16", atol, rtol)) <= allow_mismatch_ratio:
                _flat_fp16_pass.add(_node())
            _record("wrong", detail + ("" if exact is None else f"; float64 run of the program: "
                                       f"{_difference(got, exact)}"))
            # as coremltools' compare_backend does: a test that expects the mismatch (undefined behaviour
            # it checks is not its example's) passes, and then counts as a pass
            raise AssertionError(f"Not equal: {detail}")
    _record("pass")
    return outputs


def _computes_in_float16(program) -> bool:
    """Whether the program takes float16 inputs or any op (a constant aside) yields float16: its precision
    is float16's whatever the test's backend label (coremltools' fp32 "backend" runs programs built with
    fp16 placeholders, or casting to fp16, as they are). float16 weights alone computed in float32 do not
    make a float16 program: there a test's expected values from the weights before their cast are doubtful."""
    if any(info.dtype == "fp16" for _name, info in program.inputs):
        return True
    return any(info.dtype == "fp16" for op in program.main.ops if op.type != "const" for _n, info in op.outputs)


def _float64_run(program, inputs, name):
    """The program's output ``name`` computed in float64 from its weights and inputs as stored, rounded to the
    output's declared type (what an exact device returns); None when the interpreter cannot run it so."""
    from mlbench.backends.coreml.emulate import Emulator

    try:
        return Emulator(program, "float64").run(dict(inputs)).get(name)
    except Exception:  # noqa: BLE001 - a kernel that mixes dtypes: no float64 evidence
        return None


def _doubtful_reason(got, expected, exact, dtype, atol, rtol, allowed) -> str | None:
    """Why the test's expected values, not the kernel, are at fault; None when the evidence does not show it.

    The float64 run shares the interpreter's kernels, so it cannot clear a kernel of a logic error; what it
    shows is that the interpreter computes the program as stored (within the tolerance) while the expected
    values are off from it: they were computed from something else (weights and inputs before their float16
    cast, or a float16 rounding of the reference). Only the causes in ``DOUBTFUL_CAUSES`` are counted so."""
    import numpy as np

    if exact is None:
        return None
    kernel_ok = np.mean(~within(got, exact, dtype, atol, rtol)) <= allowed
    expected_off = np.mean(~within(expected, exact, dtype, atol, rtol)) > allowed
    if not (kernel_ok and expected_off):
        return None
    node = _node()
    for pattern, cause in DOUBTFUL_CAUSES:
        if re.search(pattern, node):
            return f"{cause} (the expected values are {_difference(expected, exact)} from the float64 run)"
    return None


def _difference(got, expected) -> str:
    import numpy as np

    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.size == 0:
        return "empty"
    with np.errstate(invalid="ignore"):
        off = np.abs(got - expected)
    off[(got == expected) | (np.isnan(got) & np.isnan(expected))] = 0.0
    worst = int(np.nanargmax(off)) if np.isfinite(off).any() else 0
    return (f"max |diff| {np.nanmax(off):.3g} at {worst} (got {got.flat[worst]:.6g}, expected "
            f"{expected.flat[worst]:.6g}), {int(np.sum(off > 0))}/{off.size} differ")


def within(got, expected, dtype: str, atol: float, rtol: float):
    """Elementwise: is ``got`` close enough to ``expected`` for a program of this precision?

    ``fp16``: ``FP16_ULPS`` float16 ulps of the expected value (of ``max|expected| / 16`` for
    elements much smaller than the tensor's largest, where cancellation of float16 operands
    leaves an absolute error), plus the test's float32 ``atol``. ``flat16``: coremltools'
    own fp16 tolerance. Otherwise the test's atol/rtol.
    """
    import numpy as np

    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if dtype == "flat16":
        return np.isclose(got, expected, atol=max(atol * 100.0, 5e-1), rtol=max(rtol * 100.0, 5e-2))
    if dtype != "fp16" or not np.issubdtype(np.asarray(expected).dtype, np.floating) or expected.size == 0:
        return np.isclose(got, expected, atol=atol, rtol=rtol)
    finite = np.abs(expected[np.isfinite(expected)])
    floor = (finite.max() if finite.size else 0.0) / 16.0
    scale = np.minimum(np.maximum(np.abs(expected), floor), float(np.finfo(np.float16).max))
    ulp = np.spacing(scale.astype(np.float16)).astype(np.float64)
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    return same | (np.abs(got - expected) <= FP16_ULPS * ulp + atol)


def install() -> Path:
    """Patch coremltools' test helpers (before the tests import them); the op tests' folder."""
    os.environ.setdefault("PYMIL_TEST_TARGETS", "mlprogram")
    os.environ.setdefault("INCLUDE_MIL_FP32_UNIT_TESTS", "1")
    import coremltools.converters.mil.mil.ops.tests.testing_utils as op_utils
    import coremltools.converters.mil.testing_utils as utils

    op_utils.compare_backend = emulated_compare_backend
    utils.compare_backend = emulated_compare_backend
    # ct.convert ends with gc.collect(): over torch's and executorch's imported objects that is ~1.7 s a
    # case, 90% of the suite's time. Frozen, the objects already loaded are never scanned again.
    gc.freeze()
    return Path(op_utils.__file__).parent


def op_of(node: str) -> str:
    parts = node.split("::")
    cls = parts[1] if len(parts) > 2 else Path(parts[0]).stem
    name = re.sub(r"^Test", "", cls)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def family_of(node: str) -> str:
    """The op family: the test file's name (``tests/iOS17/test_conv.py::...`` -> ``conv``)."""
    return re.sub(r"^test_", "", Path(node.split("::")[0]).stem)


def table(results: dict[str, str], key=None, label: str = "op") -> str:
    key = key or op_of
    per_op: dict[str, Counter] = defaultdict(Counter)
    for node, outcome in results.items():
        per_op[key(node)][outcome] += 1
    total: Counter = Counter(results.values())
    lines = [f"{label:<32}" + "".join(f"{o:>12}" for o in OUTCOMES)]
    for op in sorted(per_op):
        lines.append(f"{op:<32}" + "".join(f"{per_op[op][o]:>12}" for o in OUTCOMES))
    lines.append(f"{'TOTAL':<32}" + "".join(f"{total[o]:>12}" for o in OUTCOMES))
    return "\n".join(lines)


class _Collector:
    def __init__(self, sample: int | None = None) -> None:
        self.sample = sample

    def pytest_collection_modifyitems(self, session, config, items):
        """``--sample=N``: of each test function's parametrisations, N spread evenly (first and last
        included), so that every op's every test function runs, in a few minutes."""
        if not self.sample:
            return
        groups: dict[str, list] = defaultdict(list)
        for item in items:
            groups[item.nodeid.split("[")[0]].append(item)
        keep = set()
        for group in groups.values():
            count = min(self.sample, len(group))
            picks = {round(i * (len(group) - 1) / max(count - 1, 1)) for i in range(count)}
            keep |= {id(group[i]) for i in picks}
        deselected = [item for item in items if id(item) not in keep]
        items[:] = [item for item in items if id(item) in keep]
        config.hook.pytest_deselected(items=deselected)

    def pytest_runtest_logreport(self, report):  # a test that never compared is n/a
        if report.when == "call" and report.passed and _results.get(report.nodeid) in ("wrong", "crash"):
            _results[report.nodeid] = "pass"  # the test expected that failure (pytest.raises) and got it
            _details[report.nodeid] = "expected failure: " + _details.get(report.nodeid, "")
        if report.when == "call" or (report.when == "setup" and report.skipped):
            _results.setdefault(report.nodeid, "n/a")


def main(argv: list[str]) -> int:
    import coremltools
    import pytest

    saved = [Path(a.split("=", 1)[1]) for a in argv if a.startswith("--table=")]
    if saved:  # the tables of saved --json runs (several: one per lane run, merged), without running anything
        results = {node: case["outcome"] for path in saved for node, case in json.loads(path.read_text())["cases"].items()}
        print(table(results), table(results, family_of, "family"), sep="\n\n")
        return 0
    json_path = next((Path(a.split("=", 1)[1]).resolve() for a in argv if a.startswith("--json=")), None)
    sample = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--sample=")), None)
    argv = [a for a in argv if not a.startswith(("--json=", "--sample="))]
    folder = install()
    if coremltools.__version__ != PINNED_COREMLTOOLS:
        print(f"note: counts are pinned to coremltools {PINNED_COREMLTOOLS}; installed {coremltools.__version__}")
    selection = [str(folder / a) if (folder / a.split("::")[0]).exists() else a for a in argv]
    if not any((folder / a.split("::")[0]).exists() for a in argv):
        selection.insert(0, str(folder))
    os.chdir(folder.parent)
    pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header", "-rN", "--tb=no",
                 *selection], plugins=[_Collector(sample)])
    print(table(_results), table(_results, family_of, "family"), sep="\n\n")
    if json_path:
        cases = {node: {"op": op_of(node), "outcome": outcome, "detail": _details.get(node, ""),
                        "flat_fp16_pass": node in _flat_fp16_pass} for node, outcome in sorted(_results.items())}
        json_path.write_text(json.dumps({"coremltools": coremltools.__version__, "cases": cases}, indent=1))
    if _flat_fp16_pass:
        ops = Counter(op_of(n) for n in _flat_fp16_pass)
        print(f"wrong by float16 ulps but within coremltools' flat fp16 tolerance: {len(_flat_fp16_pass)} "
              f"({', '.join(f'{op} {n}' for op, n in sorted(ops.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
