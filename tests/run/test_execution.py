"""The execution engine: the same records wherever the work runs, resume after kill -9, progress, Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from mlbench.cli.main import main
from mlbench.run import executors
from mlbench.run.progress import LiveProgress, PlainProgress, for_terminal
from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytest.importorskip("coremltools")
pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: engine
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
  - name: wide
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    kwargs: {{width: 24}}
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: torch
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, all]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out}}
"""


def summary(report):
    return sorted((r.variant_id, r.status, r.artifact.key if r.artifact else None) for r in report.records)


@pytest.mark.slow
def test_same_records_and_keys_on_one_job_two_jobs_and_a_dask_cluster(write_pipeline, tmp_path):
    from distributed import LocalCluster

    pipeline = load_pipeline(write_pipeline(PIPELINE))
    serial = run(pipeline, jobs=1)
    assert len(serial.records) == 10 and serial.summary["ok"] == 10

    for entry in ArtifactCache(tmp_path / "cache").entries():  # force real exports again
        ArtifactCache(tmp_path / "cache").remove(entry.key)
    parallel = run(pipeline, jobs=2)
    assert summary(parallel) == summary(serial)
    assert sum(not r.artifact.cache_hit for r in parallel.records if r.artifact) == 8  # built, not found

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"measure": 1},
                      dashboard_address=None) as cluster:
        distributed = run(pipeline, executor=cluster.scheduler_address)
    assert summary(distributed) == summary(serial)
    assert distributed.artifacts.keys() == serial.artifacts.keys()


@pytest.mark.slow
def test_dask_measurement_needing_missing_hardware_is_skipped(write_pipeline, monkeypatch):
    from distributed import LocalCluster

    monkeypatch.setattr(executors, "WORKER_JOIN_S", 1.0)
    text = PIPELINE.replace("compute_units: [cpu_only, all]", "compute_units: all\n    runs_on: apple-m2")
    pipeline = load_pipeline(write_pipeline(text))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, resources={"measure": 1},
                      dashboard_address=None) as cluster:
        report = run(pipeline, executor=cluster.scheduler_address)
    skipped = [r for r in report.records if r.status == "skipped"]
    assert {r.backend for r in skipped} == {"coreml"} and len(skipped) == 4
    assert skipped[0].error == (f"no worker of the Dask cluster at {cluster.scheduler_address} declares the resource "
                                "'apple-m2' (waited 1 s; start workers with --resources apple-m2=1)")
    assert all(r.status == "ok" for r in report.records if r.backend == "torch")


@pytest.mark.slow
def test_dask_workers_joining_after_the_run_started_are_waited_for(monkeypatch):
    """A CI job may start the scheduler, its workers and the run at once: a resource that a worker joining a few
    seconds later declares is waited for (once per run), and one no worker declares is reported after the wait."""
    from distributed import LocalCluster

    monkeypatch.setattr(executors, "WORKER_JOIN_S", 30.0)
    with LocalCluster(n_workers=0, threads_per_worker=1, processes=True, resources={"measure": 1},
                      dashboard_address=None) as cluster:
        dask = executors.DaskExecutor(cluster.scheduler_address, {})
        try:
            joining = threading.Timer(2.0, cluster.scale, args=(1,))
            joining.start()
            began = time.monotonic()
            assert dask._unplaceable({"measure": 1.0}) is None
            assert time.monotonic() - began >= 1.5  # it waited for the worker
            began = time.monotonic()
            assert dask._unplaceable({"measure": 1.0}) is None and time.monotonic() - began < 0.5  # once per run
            monkeypatch.setattr(executors, "WORKER_JOIN_S", 0.5)
            assert dask._unplaceable({"measure": 1.0, "apple-m2": 1.0}) == (
                f"no worker of the Dask cluster at {cluster.scheduler_address} declares the resource 'apple-m2' "
                "(waited 0.5 s; start workers with --resources apple-m2=1)")
            joining.join()
        finally:
            dask.close()


@pytest.mark.slow
def test_kill_9_midway_then_resume_redoes_nothing_finished(write_pipeline, tmp_path):
    text = PIPELINE.replace("min_time_s: 0.0", "min_time_s: 0.4")  # each variant takes a moment
    path = write_pipeline(text)
    journal = tmp_path / "out" / "journal.jsonl"
    env = {**os.environ, "CI": "1"}
    process = subprocess.Popen([sys.executable, "-m", "mlbench.cli", "run", "-q", "--jobs", "1", str(path)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        lines = journal.read_text().splitlines() if journal.exists() else []
        if sum('"record"' in line for line in lines) >= 3:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = {json.loads(line)["record"]["variant_id"]: json.loads(line)["record"]["started"]
              for line in journal.read_text().splitlines() if '"record"' in line}
    assert 3 <= len(before) < 10

    assert main(["run", "-q", "--jobs", "1", "--resume", str(path)]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert len(report["records"]) == 10 and report["summary"]["ok"] == 10
    started = {r["variant_id"]: r["started"] for r in report["records"]}
    assert all(started[v] == s for v, s in before.items())  # finished work was reused, not redone
    cache = ArtifactCache(tmp_path / "cache")
    assert all(cache.lookup(e.key) is not None for e in cache.entries())  # nothing half-written is served


def test_ctrl_c_writes_a_partial_report_and_says_how_to_resume(write_pipeline, tmp_path, capsys):
    (tmp_path / "interrupt.py").write_text("def Model():\n    raise KeyboardInterrupt\n")
    text = PIPELINE.replace("  - name: wide\n", "  - name: zz_interrupt\n    source: interrupt.py:Model\n"
                                                 "    inputs: [{name: x, shape: [1]}]\n  - name: wide\n")
    text = text.replace("  - backend: coreml\n    precision: [float32, float16]\n    compute_units: [cpu_only, all]\n",
                        "")
    path = write_pipeline(text)
    assert main(["run", "-q", "--jobs", "1", str(path)]) == 130
    err = capsys.readouterr().err
    assert err.endswith(f"run `mlbench run {path} --resume` to finish the rest\n")
    partial = json.loads((tmp_path / "out" / "report.json").read_text())
    assert partial["finished"] is None and [r["variant_id"] for r in partial["records"]] == ["tiny/torch/cpu/float32"]


def test_plain_progress_in_ci_and_live_on_a_terminal(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert isinstance(for_terminal(quiet=False, verbose=False), PlainProgress)
    from mlbench.records import RunRecord

    record = RunRecord(variant_id="m/torch/cpu/float32", model="m", backend="torch", axes={}, artifact_id="a",
                       status="failed", error="model: boom", started="t", seconds=0.1)
    stream = io.StringIO()
    plain = PlainProgress(stream)
    plain.record(record, 3, 12)
    assert stream.getvalue() == "[ 3/12] m/torch/cpu/float32  failed  model: boom\n"
    quiet = PlainProgress(stream := io.StringIO(), quiet=True)
    quiet.record(record, 1, 1)
    assert stream.getvalue() == ""

    from rich.console import Console

    live = LiveProgress(Console(file=(screen := io.StringIO()), force_terminal=True, width=100))
    live.start(12, done=2)
    live.stage("m/coreml/float16/none", "export")
    live.record(record, 3, 12)
    live.bar.refresh()
    live.stop()
    text = screen.getvalue()
    assert "export  m/coreml/float16/none" in text and "3/12" in text and "[ 3/12] m/torch/cpu/float32" in text
