"""Conformance: coremltools' own MIL op tests, run through mlbench's Core ML interpreter (issue 38).

    python benchmarks/coreml_conformance.py                      # the whole shipped suite (long)
    python benchmarks/coreml_conformance.py iOS14/test_recurrent.py -k "TestGRU"   # any pytest selection
    python benchmarks/coreml_conformance.py --json=cases.json ...   # also each case's outcome and detail

Each op test builds a program with the MIL builder and hands it, with numpy expected outputs and
tolerances, to ``compare_backend`` (which on macOS runs Core ML). Here that helper is replaced: the
program, already converted by the test to an ML program at its deployment target and precision, is
run by ``mlbench.backends.coreml.emulate`` and compared with the expected outputs. float32 programs
use the test's own atol/rtol. float16 programs are judged by float16 ulps of the expected value
(``FP16_ULPS`` of ``max(|expected|, max|expected| / 16)``, plus the test's float32 atol), not by
coremltools' flat ``max(100 * atol, 0.5)``/``max(100 * rtol, 0.05)``: that tolerance let a wrong GRU
reset gate (0.045 off) and a wrong LSTM clip (0.31 off) pass. A float16 case that fails by ulps
but is within the flat tolerance is counted wrong and listed under the table, so a reader can tell
those from gross errors. Each case counts as
pass / wrong / unsupported / crash, or n/a (never reached the comparison: the neuralnetwork backend,
type-inference-only tests, tests expecting the converter to reject the program, stateful programs).
Counts are per test class (``TestGRU`` -> ``gru``). The suite is the installed coremltools' own:
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
OUTCOMES = ("pass", "wrong", "unsupported", "crash", "n/a")
_results: dict[str, str] = {}
_details: dict[str, str] = {}  # node -> why it was not a pass (error, largest difference, missing ops)
_flat_fp16_pass: set[str] = set()  # wrong by ulps, within coremltools' flat fp16 tolerance
_RANK = {o: i for i, o in enumerate(("n/a", "pass", "wrong", "unsupported", "crash"))}


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
        outputs = Emulator(load_program(mlmodel.package_path)).run(dict(input_key_values))
    except UnsupportedOps as error:
        _record("unsupported", str(error))
        return None
    except Exception as error:  # noqa: BLE001 - a crash of the interpreter is what is counted
        _record("crash", f"{type(error).__name__}: {error}"[:300])
        return None
    for name, expected in expected_outputs.items():
        got = outputs.get(name)
        expected = np.asarray(expected)
        if got is None or (also_compare_shapes and got.shape != expected.shape):
            _record("wrong", f"{name}: shape {None if got is None else got.shape}, expected {expected.shape}")
            return outputs
        if np.mean(~within(got, expected, dtype, atol, rtol)) > allow_mismatch_ratio:
            if dtype == "fp16" and np.mean(~within(got, expected, "flat16", atol, rtol)) <= allow_mismatch_ratio:
                _flat_fp16_pass.add(_node())
            _record("wrong", f"{name}: {_difference(got, expected)} ({dtype})")
            return outputs
    _record("pass")
    return outputs


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


def table(results: dict[str, str]) -> str:
    per_op: dict[str, Counter] = defaultdict(Counter)
    for node, outcome in results.items():
        per_op[op_of(node)][outcome] += 1
    total: Counter = Counter(results.values())
    lines = [f"{'op':<32}" + "".join(f"{o:>12}" for o in OUTCOMES)]
    for op in sorted(per_op):
        lines.append(f"{op:<32}" + "".join(f"{per_op[op][o]:>12}" for o in OUTCOMES))
    lines.append(f"{'TOTAL':<32}" + "".join(f"{total[o]:>12}" for o in OUTCOMES))
    return "\n".join(lines)


class _Collector:
    def pytest_runtest_logreport(self, report):  # a test that never compared is n/a
        if report.when == "call" or (report.when == "setup" and report.skipped):
            _results.setdefault(report.nodeid, "n/a")


def main(argv: list[str]) -> int:
    import coremltools
    import pytest

    json_path = next((Path(a.split("=", 1)[1]).resolve() for a in argv if a.startswith("--json=")), None)
    argv = [a for a in argv if not a.startswith("--json=")]
    folder = install()
    if coremltools.__version__ != PINNED_COREMLTOOLS:
        print(f"note: counts are pinned to coremltools {PINNED_COREMLTOOLS}; installed {coremltools.__version__}")
    selection = [str(folder / a) if (folder / a.split("::")[0]).exists() else a for a in argv]
    if not any((folder / a.split("::")[0]).exists() for a in argv):
        selection.insert(0, str(folder))
    os.chdir(folder.parent)
    pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header", "-rN", "--tb=no",
                 *selection], plugins=[_Collector()])
    print(table(_results))
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
