"""The hostile cases of issue 24 around the child processes, each with a real misbehaving model:
a child spinning in C code holding the GIL dies with its killed coordinator; a timeout kills what the
model started; junk a model writes on mlbench's channel fails only its variant; a model that cannot
be loaded is not loaded again for its other artifacts, and a death while loading says so under any
--jobs; a lost Dask scheduler is an unfinished run (exit 3) that `--resume` completes.

Every test carries its own time limit (pytest-timeout): a lost limit fails the test, never hangs CI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlbench.run.runner import run
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HEAD = """\
version: 1
name: hostile
latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}
cache: {dir: cache}
report: {dir: out}
history: {enabled: false}
"""
GOOD = f"""\
  - name: good
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: hang, after: 1000000}}
    inputs: [{{name: x, shape: [1, 8]}}]
"""


def faulty(name: str, fault: str, path: Path | None = None, after: int = 1) -> str:
    kwargs = f"{{fault: {fault}, after: {after}" + (f", path: '{path}'" if path is not None else "") + "}"
    return (f"  - name: {name}\n    source: {ROOT}/tests/faulty_models.py:Faulty\n    kwargs: {kwargs}\n"
            "    inputs: [{name: x, shape: [1, 8]}]\n")


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.1)
    return gone(pid)


def wait_for(path: Path, seconds: float, process: subprocess.Popen | None = None) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        if process is not None and process.poll() is not None:
            pytest.fail(f"the run ended ({process.returncode}) before {path.name} appeared")
        time.sleep(0.1)
    pytest.fail(f"{path.name} did not appear in {seconds} s")


def outcomes(tmp_path: Path) -> dict[str, tuple[str, str | None]]:
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    return {r["variant_id"]: (r["status"], r["error"]) for r in report["records"]}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.timeout(120)
def test_a_child_spinning_in_c_code_dies_with_its_killed_coordinator(write_pipeline, tmp_path):
    """Finding 8: the lifeline thread needs the GIL to exit the process; the kernel's signal does not."""
    pid_file = tmp_path / "child.pid"
    path = write_pipeline(HEAD + "limits: {measure_s: 100}\nmodels:\n" + faulty("spin", "spin", pid_file)
                          + "targets:\n  - backend: torch\n")
    coordinator = subprocess.Popen([sys.executable, "-m", "mlbench.cli", "run", "-q", str(path)], env=ENV,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        child = int(wait_for(pid_file, 90, coordinator))
        time.sleep(0.5)  # well inside the regular expression
        assert not gone(child)
        coordinator.kill()
        coordinator.wait()
        assert wait_gone(child, 10), "the child outlived its coordinator"
    finally:
        coordinator.kill()
        if child is not None and not gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_timeout_kills_what_the_model_started(write_pipeline, tmp_path):
    """Finding 9: the child leads its own process group, and the kill for a time limit takes the group."""
    pids = tmp_path / "pids"
    path = write_pipeline(HEAD + "limits: {measure_s: 2}\nmodels:\n" + faulty("spawns", "spawn", pids)
                          + "targets:\n  - backend: torch\n")
    report = run(load_pipeline(path), jobs=1)
    child, grandchild = (int(p) for p in pids.read_text().split())
    try:
        assert [(r.status, r.error) for r in report.records] == [
            ("failed", "timed out after 2 s while measuring (limits.measure_s)")]
        assert wait_gone(child, 5)
        assert wait_gone(grandchild, 5), "the model's `sleep 3000` outlived the timeout"
    finally:
        for pid in (child, grandchild):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


JUNK = ("the process wrote bytes that are not mlbench's messages to its channel (a frame starting b'junkjunk') "
        "{doing}: did the model write to a file descriptor it does not own?")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.slow
def test_junk_on_the_channel_fails_only_its_own_variants(write_pipeline, tmp_path, jobs):
    """Finding 10: bytes a model writes to mlbench's socket are not a message; the sweep goes on. With
    --jobs 2 the onnxruntime export runs in a parallel export child, with --jobs 1 in the measuring one."""
    path = write_pipeline(HEAD + "limits: {measure_s: 30}\nmodels:\n" + faulty("junk", "junk") + GOOD
                          + "targets:\n  - backend: torch\n  - backend: onnxruntime\n")
    report = run(load_pipeline(path), jobs=jobs)
    assert {r.variant_id: (r.status, r.error) for r in report.records} == {
        "junk/torch/cpu/float32": ("failed", JUNK.format(doing="while measuring")),
        "junk/onnxruntime/float32/cpu": ("failed", JUNK.format(doing="while exporting junk/onnxruntime/float32")),
        "good/torch/cpu/float32": ("ok", None),
        "good/onnxruntime/float32/cpu": ("ok", None),
    }
    assert report.finished is not None


LOAD_FAULTS = HEAD + f"""\
limits: {{export_s: 3, measure_s: 30}}
models:
  - name: crash
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: segfault, after: 0}}      # its first call, the reference made while loading, segfaults
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: stuck
    source: {ROOT}/tests/faulty_models.py:HangOnBuild
    inputs: [{{name: x, shape: [1, 8]}}]
targets:
  - backend: torch
  - backend: onnxruntime
"""


SIZED = ("not tried, the same model failed to load for the export order: timed out after 3 s while building it on the "
         "meta device to size it (limits.export_s)")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.slow
def test_a_model_that_fails_while_loading_costs_one_load_and_says_so_under_any_jobs(write_pipeline, tmp_path, jobs):
    """A hang in `__init__` costs export_s once, not once per artifact (with --jobs 2, the export order's
    sizing builds the model first: there); a segfault while loading is reported as one, whether the
    measuring child (--jobs 1) or an export child (--jobs 2) loaded the model."""
    report = run(load_pipeline(write_pipeline(LOAD_FAULTS)), jobs=jobs)
    errors = {r.variant_id: r.error for r in report.records}
    assert len(errors) == 4 and all(r.status == "failed" for r in report.records)
    causes = {"crash": "the process was killed by SIGSEGV (segmentation fault) while loading the model",
              "stuck": "timed out after 3 s while loading the model (limits.export_s)"}
    for model, cause in causes.items():
        mine = {v: e for v, e in errors.items() if v.startswith(f"{model}/")}
        if model == "stuck" and jobs == 2:
            assert set(mine.values()) == {SIZED}, mine
            continue
        first = [v for v, e in mine.items() if e == cause]
        assert len(first) == 1, mine
        artifact = next(r.artifact_id for r in report.records if r.variant_id == first[0])
        assert {e for v, e in mine.items() if v != first[0]} == {
            f"not tried, the same model failed to load for {artifact}: {cause}"}, mine


def _dask(tmp_path: Path, name: str, *args: str) -> subprocess.Popen:
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", f"distributed.cli.dask_{name.rstrip('0123456789')}", *args],
                            env=ENV, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)


def _cluster(tmp_path: Path, tag: str) -> tuple[subprocess.Popen, subprocess.Popen, str]:
    """A scheduler process and a worker process (two measure slots) this test can kill."""
    info = tmp_path / f"scheduler-{tag}.json"
    scheduler = _dask(tmp_path, f"scheduler{tag}", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                      "--scheduler-file", str(info))
    wait_for(info, 60, scheduler)
    worker = _dask(tmp_path, f"worker{tag}", "--scheduler-file", str(info), "--nthreads", "2", "--no-nanny",
                   "--no-dashboard", "--resources", "measure=2")
    address = json.loads(info.read_text())["address"]
    return scheduler, worker, address


def _stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_lost_dask_scheduler_leaves_an_unfinished_run_that_resume_completes(write_pipeline, tmp_path):
    """Finding 11: the scheduler killed mid-run is exit 3 (docs/running.md), and the variants it lost
    have no record, so `--resume` runs them (no failed `scheduler-connection-lost` records)."""
    started = tmp_path / "started"
    path = write_pipeline(HEAD + "limits: {measure_s: 120}\nmodels:\n" + faulty("blocked", "hang_once", started)
                          + GOOD + "targets:\n  - backend: torch\n")
    command = [sys.executable, "-m", "mlbench.cli", "run", "-q", str(path), "--executor"]
    scheduler, worker, address = _cluster(tmp_path, "1")
    coordinator = subprocess.Popen([*command, address], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
    try:
        wait_for(started, 120, coordinator)  # `blocked` hangs in its measurement
        journal = tmp_path / "out" / "journal.jsonl"
        deadline = time.monotonic() + 120
        while '"good/torch/cpu/float32"' not in (journal.read_text() if journal.exists() else ""):
            assert time.monotonic() < deadline and coordinator.poll() is None, "good was never recorded"
            time.sleep(0.2)
        scheduler.kill()
        _out, err = coordinator.communicate(timeout=120)
    finally:
        coordinator.kill()
        _stop(worker, scheduler)
    assert coordinator.returncode == 3, err
    assert any(line.startswith(f"the run could not finish: lost the Dask scheduler at {address} (")
               for line in err.splitlines()), err
    assert outcomes(tmp_path) == {"good/torch/cpu/float32": ("ok", None)}  # `blocked` lost, not failed

    scheduler, worker, address = _cluster(tmp_path, "2")
    try:
        resumed = subprocess.run([*command, address, "--resume"], env=ENV, capture_output=True, text=True,
                                 timeout=200)
    finally:
        _stop(worker, scheduler)
    assert resumed.returncode == 0, resumed.stderr
    assert outcomes(tmp_path) == {"blocked/torch/cpu/float32": ("ok", None), "good/torch/cpu/float32": ("ok", None)}
