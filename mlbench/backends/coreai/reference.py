"""Core AI's bundled CPU reference runtime, run in a process of its own for each variant (``reference_child``).

On Linux, ``AIModelAsset.executable()`` lowers the asset to a portable flatbuffer (ODIX) and runs it
single-threaded on the CPU: real numerics of the program Core AI would ship, not the device's kernels and not
device timing. Its own process because the runtime may abort at interpreter exit after its results are out:
the results are read from files the child wrote (renamed into place when complete), and an exit code after
them is recorded, never a failure. What it took per call is kept as reference-runtime time, never latency.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlbench.errors import ReportableError, one_line

REFERENCE_NOTE = ("Core AI's bundled CPU reference runtime ran the saved asset on this machine (Apple's code, "
                  "single-threaded; not the device's kernels)")
CHILD = "mlbench.backends.coreai.reference_child"
LIFELINE_ENV = "MLBENCH_COREAI_LIFELINE"
"""The environment variable naming the child's lifeline descriptor (reference_child.watch_lifeline)."""
DEFAULT_TIMEOUT_S = 600.0


class ReferenceRunError(ReportableError):
    """The reference runtime gave no results: one line with how its process ended."""


@dataclass
class ReferenceRun:
    outputs: list[list[np.ndarray]]  # per input set, in the function's output order
    output_names: list[str]
    seconds: list[float]  # each call in the reference runtime (not latency)
    exit_note: str | None = None  # how the process ended after handing its results over, when not cleanly
    op_time: dict[str, Any] | None = None  # the runtime's Profiler intervals per op (reference-runtime time)
    states: dict[str, np.ndarray] = field(default_factory=dict)  # each state's value after the last call
    log: list[str] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)  # memory.load/.peak in the reference runtime's process


def _env() -> dict[str, str]:
    import mlbench

    root = str(Path(mlbench.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


def _exit_cause(code: int) -> str:
    from mlbench.errors import exit_cause

    return exit_cause(code)


def _run_child(argv: list[str], timeout_s: float | None) -> subprocess.CompletedProcess[str]:
    """Run the child with a lifeline: it holds the read end of a pipe whose only write end is ours, and exits
    at end-of-file, so a measurement killed for its time limit does not leave the runtime running."""
    lifeline_read, lifeline_write = os.pipe()
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env={**_env(), LIFELINE_ENV: str(lifeline_read)},
                                   pass_fds=(lifeline_read,))
    finally:
        os.close(lifeline_read)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise ReferenceRunError(f"the Core AI reference runtime ran past {timeout_s:g} s") from None
    finally:
        os.close(lifeline_write)
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def run_reference(asset: Path, feeds: list[dict[str, np.ndarray]], *, function: str = "main",
                  timeout_s: float | None = DEFAULT_TIMEOUT_S, command: list[str] | None = None,
                  states: dict[str, np.ndarray] | None = None) -> ReferenceRun:
    """Run `function` of `asset` once per input dict in `feeds` in a fresh reference-runtime process.

    A function with states starts from `states` (by name; zeros for any not given) and carries them from one
    call to the next, in order; their final values come back in ``ReferenceRun.states``.

    `command` replaces ``[python, -m, reference_child]`` (the program is given ASSET FOLDER FUNCTION after it).
    """
    folder = Path(tempfile.mkdtemp(prefix="mlbench-coreai-"))
    try:
        for index, feed in enumerate(feeds):
            save: Any = np.savez  # typed as if a feed could be named allow_pickle
            save(folder / f"inputs-{index}.npz", **feed)
        if states:
            save(folder / "states-in.npz", **states)
        done = _run_child([*(command or [sys.executable, "-m", CHILD]), str(asset), str(folder), function], timeout_s)
        log = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        result_file = folder / "done.json"
        if not result_file.exists():
            last = next((line for line in reversed(log) if not line.startswith(("ODIE", "W1", "  "))),
                        log[-1] if log else "")
            raise ReferenceRunError(f"the Core AI reference runtime {_exit_cause(done.returncode)} before handing "
                                    f"over its results" + (f": {one_line(last, 160)}" if last else ""))
        result: dict[str, Any] = json.loads(result_file.read_text())
        outputs = []
        for index in range(len(feeds)):
            with np.load(folder / f"outputs-{index}.npz") as data:
                outputs.append([np.array(data[f"o{i}"]) for i in range(len(result["output_names"]))])
        finals: dict[str, np.ndarray] = {}
        if (folder / "states.npz").exists():
            with np.load(folder / "states.npz") as data:
                finals = {name: np.array(data[name]) for name in result.get("state_names", [])}
        note = None
        if done.returncode != 0:
            note = (f"the reference runtime's process {_exit_cause(done.returncode)} after handing over its results "
                    "(Core AI may abort at interpreter exit); the results stand")
        return ReferenceRun(outputs=outputs, output_names=result["output_names"], seconds=result["seconds"],
                            exit_note=note, log=log[-20:], op_time=op_time_table(result), states=finals,
                            memory=result.get("memory") or {})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def op_time_table(result: dict[str, Any]) -> dict[str, Any] | None:
    """The Profiler's per-op intervals as a table: per op, calls and milliseconds per run (the runtime's
    timestamps are nanoseconds), and its share of the executions' time. Reference-runtime time, not latency."""
    runs = len(result.get("execute_ticks") or [])
    if not runs or not result.get("ops"):
        return None
    total = sum(result["execute_ticks"]) / runs / 1e6
    rows = [{"op": row["op"], "calls_per_run": row["calls"] / runs, "ms_per_run": row["ticks"] / runs / 1e6,
             "share": (row["ticks"] / runs / 1e6) / total if total > 0 else 0.0} for row in result["ops"]]
    return {"source": "reference", "runs": runs, "unit": "ms", "execute_ms_per_run": total, "by_op": rows,
            "note": "Core AI's Profiler in its single-threaded CPU reference runtime: where the reference runtime "
                    "spends its time, not the device's latency"}
