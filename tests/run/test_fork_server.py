"""Issue 40: children forked from a fork server ("zygote") that has imported torch start in milliseconds, and keep
every guarantee of a spawned child: a crash says its signal, a time limit kills what the model started, a killed
coordinator leaves nothing behind, the memory limit holds; a lost zygote only sends the pool back to spawning,
and MLBENCH_NO_FORK_SERVER=1 spawns every child."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlbench.run import children as children_module
from mlbench.run import zygote as zygote_module
from mlbench.run.children import Child, ChildPool
from mlbench.run.runner import Runner, run
from mlbench.run.zygote import ForkedProcess, Zygote
from mlbench.validate import load_pipeline
from tests.conftest import ROOT
from tests.run.test_isolation import MEMORY, MEMORY_TAIL
from tests.run.test_isolation_faults import ENV, HEAD, faulty, gone, wait_gone
from tests.run.test_worker_reuse import MODELS, PIPELINE

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")]


@pytest.fixture
def forked(monkeypatch) -> list[ForkedProcess]:
    """The children the fork servers of this test forked (a spy on `Zygote.fork`), fork server on."""
    monkeypatch.delenv(zygote_module.DISABLE_ENV, raising=False)
    monkeypatch.setattr(children_module, "TIME_IN_FORKED_CHILDREN", True)  # measurements too: isolation tested
    seen: list[ForkedProcess] = []
    fork = Zygote.fork

    def spy(self, conn_fd, lifeline_fd, memory_bytes):
        process = fork(self, conn_fd, lifeline_fd, memory_bytes)
        seen.append(process)
        return process

    monkeypatch.setattr(Zygote, "fork", spy)
    return seen


def _pids(processes: list[ForkedProcess]) -> set[int]:
    return {p.pid for p in processes if p.pid is not None}


def _answer(child: Child, request: tuple) -> object:
    child.send(request)
    while True:
        message = child.receive(time.monotonic() + 120)
        if message[0] not in ("log", "stage"):
            return message


@pytest.mark.timeout(300)
def test_a_forked_child_answers_a_real_request_and_starts_far_faster_than_a_spawned_one(
        write_pipeline, tiny_pipeline_text, forked):
    spec = Runner(load_pipeline(write_pipeline(tiny_pipeline_text))).spec
    spawned = Child()  # no fork server: today's path
    try:
        spawned.wait_ready()
        assert isinstance(spawned.process, subprocess.Popen)
    finally:
        spawned.close()
    pool = ChildPool()
    try:
        first = pool.acquire(0)
        first.wait_ready()  # waits for the zygote's own imports too
        child = pool.fresh(0)
        message = _answer(child, ("counts", spec, {"tiny_cnn"}))
        assert message[0] == "done" and set(message[1]) == {"tiny_cnn"}
        assert isinstance(child.process, ForkedProcess) and child.process in forked
        assert child.startup_s < 0.5 * spawned.startup_s, (child.startup_s, spawned.startup_s)
        zygote = pool._zygotes[()]
        assert int(Path(f"/proc/{child.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == (
            zygote.process.pid)  # its parent is the zygote, not this process
        assert os.getpgid(child.process.pid) == child.process.pid  # it leads a process group of its own
        begin, ready = zygote.start_span()
        assert pool.startup_wall_seconds() >= ready - begin  # the zygote's start counts as child start
        assert first.server_wait_s > 0  # asked for at once, it waited for the zygote's imports: counted once
        assert ready - begin <= pool.startup_seconds() < (ready - begin) + first.startup_s
        pool.discard(child)
        assert child.process.returncode == -signal.SIGKILL  # the zygote reported the status it reaped
    finally:
        pool.close()
    assert wait_gone(zygote.process.pid, 10)


@pytest.mark.timeout(300)
def test_a_segfault_in_a_forked_child_says_its_signal_and_the_next_model_gets_a_fresh_child(tmp_path, forked):
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    log = tmp_path / "calls.log"
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(log=log), encoding="utf-8")
    report = run(load_pipeline(path), jobs=1)
    outcomes = {r.variant_id: (r.status, r.error) for r in report.records}
    assert outcomes.pop("crashes/torch/cpu/bfloat16") == (
        "failed", "the process was killed by SIGSEGV (segmentation fault) while measuring")
    assert set(outcomes.values()) == {("ok", None)} and len(outcomes) == 8
    pids: dict[str, set[int]] = {}
    for line in log.read_text().splitlines():
        name, _dtype, pid = line.split()
        pids.setdefault(name, set()).add(int(pid))
    assert pids["crashes"] == pids["before"] and pids["after"].isdisjoint(pids["crashes"])
    assert set().union(*pids.values()) <= _pids(forked)  # every model ran in a forked child


@pytest.mark.timeout(120)
def test_a_time_limit_kills_a_forked_child_with_what_its_model_started(write_pipeline, tmp_path, forked):
    pids = tmp_path / "pids"
    path = write_pipeline(HEAD + "limits: {measure_s: 2}\nmodels:\n" + faulty("spawns", "spawn", pids)
                          + "targets:\n  - backend: torch\n")
    report = run(load_pipeline(path), jobs=1)
    child, grandchild = (int(p) for p in pids.read_text().split())
    try:
        assert [(r.status, r.error) for r in report.records] == [
            ("failed", "timed out after 2 s while measuring (limits.measure_s)")]
        assert child in _pids(forked)
        assert wait_gone(child, 5)
        assert wait_gone(grandchild, 5), "the model's `sleep 3000` outlived the timeout"
    finally:
        for pid in (child, grandchild):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


COORDINATOR = """\
import time
from mlbench.run.children import ChildPool

pool = ChildPool()
child = pool.acquire(0)
child.wait_ready()
print(child.process.pid, pool._zygotes[()].process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(120)
def test_a_killed_coordinator_leaves_no_zygote_and_no_forked_child(monkeypatch):
    monkeypatch.delenv(zygote_module.DISABLE_ENV, raising=False)
    monkeypatch.setattr(children_module, "TIME_IN_FORKED_CHILDREN", True)  # measurements too: isolation tested
    coordinator = subprocess.Popen([sys.executable, "-c", COORDINATOR], env={**ENV, "PYTHONPATH": str(ROOT)},
                                   stdout=subprocess.PIPE, text=True)
    child = zygote = None
    try:
        assert coordinator.stdout is not None
        child, zygote = (int(p) for p in coordinator.stdout.readline().split())
        assert not gone(child) and not gone(zygote)
        coordinator.kill()
        coordinator.wait()
        assert wait_gone(zygote, 10), "the zygote outlived its coordinator"
        assert wait_gone(child, 10), "the forked child outlived its coordinator"
    finally:
        coordinator.kill()
        for pid in (child, zygote):
            if pid is not None and not gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_the_memory_limit_fails_a_runaway_model_in_a_forked_child(write_pipeline, forked):
    path = write_pipeline(HEAD + "limits: {measure_s: 60, memory_gb: 3}\nmodels:\n" + faulty("hog", "allocate")
                          + "targets:\n  - backend: torch\n")
    report = run(load_pipeline(path), jobs=1)
    [record] = report.records
    assert record.status == "failed"
    assert re.match(re.escape(MEMORY) + MEMORY_TAIL.format(stage="measure"), record.error), record.error
    assert forked


@pytest.mark.timeout(300)
def test_a_lost_zygote_sends_the_pool_back_to_spawning(forked):
    pool = ChildPool()
    try:
        child = pool.acquire(0)  # its fork request waits in the zygote's socket while the zygote imports torch
        zygote = pool._zygotes[()]
        os.kill(zygote.process.pid, signal.SIGKILL)
        zygote.process.wait()
        child.wait_ready()  # never forked: spawned instead
        assert isinstance(child.process, subprocess.Popen) and child.process.poll() is None
        pool.release(child)
        later = pool.fresh(0)
        later.wait_ready()
        assert isinstance(later.process, subprocess.Popen) and not zygote.usable
    finally:
        pool.close()


def test_no_fork_server_spawns_every_child(monkeypatch):
    monkeypatch.setenv(zygote_module.DISABLE_ENV, "1")
    pool = ChildPool()
    try:
        pool.prestart(1, 0)
        child = pool.acquire(0)
        assert isinstance(child.process, subprocess.Popen) and not pool._zygotes
    finally:
        pool.close()


THREAD_STARTER = """
import threading, time

def start():
    threading.Thread(target=time.sleep, args=(3600,), daemon=True, name="warmup-pool").start()
"""


@pytest.mark.timeout(300)
def test_a_zygote_whose_warmups_start_threads_spawns_its_children(forked, tmp_path, monkeypatch):
    """A warmup that leaves a thread running (as onnxruntime's import does on some machines, not all) makes
    forking unsafe: that zygote spawns (fork-then-exec) each child, which does its warmups itself."""
    (tmp_path / "thread_starter.py").write_text(THREAD_STARTER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = ChildPool()
    try:
        pool.prestart(1, 0, ("thread_starter:start",))
        [child] = pool.children
        child.wait_ready()
        assert isinstance(child.process, ForkedProcess) and child.process in forked
        cmdline = Path(f"/proc/{child.process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"mlbench.run.child" in cmdline and cmdline[-2] == b"thread_starter:start"  # its own warmups
        assert os.getpgid(child.process.pid) == child.process.pid
        pool.discard(child)
        assert child.process.returncode == -signal.SIGKILL
    finally:
        pool.close()


@pytest.mark.timeout(300)
def test_a_child_killed_before_the_zygote_forked_it_is_killed_on_arrival(forked):
    pool = ChildPool()
    try:
        early = pool.acquire(0)  # the zygote is still importing torch
        began = time.monotonic()
        pool.discard(early)
        assert time.monotonic() - began < 2  # a kill never waits for the zygote's imports
        later = pool.acquire(0)
        later.wait_ready()  # the zygote answered both requests by now, in order
        assert early.process.pid is not None and wait_gone(early.process.pid, 10)
        assert later.process.poll() is None and isinstance(later.process, ForkedProcess)
    finally:
        pool.close()


GARBLER = """\
import socket, sys, time
control = socket.socket(fileno=int(sys.argv[2]))  # kept open: only its garbage gives it away
control.send(b"not json")
time.sleep(120)
"""


@pytest.mark.timeout(300)
def test_a_zygote_answering_garbage_is_killed_and_its_child_spawned(forked):
    from mlbench.run.children import _SPAWNER, _child_env

    def garbler(argv, **kwargs):
        return _SPAWNER.popen([sys.executable, "-c", GARBLER, *argv[3:]], **kwargs)

    zygote = Zygote((), garbler, _child_env())
    child = Child(0, (), zygote)
    try:
        child.wait_ready()  # the zygote was given up: this child was spawned
        assert isinstance(child.process, subprocess.Popen) and child.process.poll() is None
        assert not zygote.usable and zygote.process.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.close()
        zygote.close()


@pytest.mark.timeout(300)
def test_a_child_that_times_calls_is_spawned_while_a_memory_round_is_forked(forked, monkeypatch):
    monkeypatch.setattr(children_module, "TIME_IN_FORKED_CHILDREN", False)  # as mlbench runs (see its docstring)
    pool = ChildPool()
    try:
        timing = pool.acquire(0, "m", timing=True)
        memory_round = pool.fresh(0)
        assert isinstance(timing.process, subprocess.Popen) and not isinstance(timing.process, ForkedProcess)
        assert isinstance(memory_round.process, ForkedProcess) and memory_round.process in forked
        pool.release(memory_round)
        assert pool.acquire(0, "m", timing=True) is not memory_round  # an idle forked child is not taken to time
    finally:
        pool.close()
