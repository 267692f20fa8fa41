"""Children's temporary files: coremltools leaves a ``tmpXXXXXXXX.mlpackage`` per converted or compressed program
for an ``atexit`` hook that a forked child (``os._exit``) or a killed one never runs. A run leaves nothing in the
temporary folder, whichever way its children end (`mlbench/run/scratch.py`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import pytest

from mlbench.run import children as children_module
from mlbench.run import scratch
from mlbench.run.children import ChildPool
from tests.conftest import TINY_AND_SEGFAULTING_MODELS

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: scratch
models:
{TINY_AND_SEGFAULTING_MODELS}targets:
  - backend: coreml
    precision: [float16]
    compute_units: [all]
    optimize: [none, palettize4]
optimizations:
  palettize4: {{kind: palettize, nbits: 4, mode: kmeans}}
verify: {{tolerance: {{palettize4: 0.5}}}}
limits: {{export_s: 120, measure_s: 60}}
cache: {{dir: cache}}
report: {{dir: out}}
history: {{enabled: false}}
"""


@pytest.mark.timeout(600)
def test_a_core_ml_run_with_a_crashing_model_leaves_nothing_in_the_temporary_folder(tmp_path):
    pytest.importorskip("coremltools")
    temp = tmp_path / "temp"
    temp.mkdir()
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(temp)}
    done = subprocess.run([sys.executable, "-m", "mlbench", "run", "pipeline.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 1, done.stderr[-3000:]  # the segfaulting model's variants failed
    assert "2 ok" in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    assert "killed by SIGSEGV" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    left = sorted(p.name for p in temp.iterdir())
    assert not [n for n in left if n.endswith(".mlpackage") or n.startswith(scratch.PREFIX)], left


def test_a_killed_childs_folder_goes_when_the_pool_discards_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again, as a coordinator started with it would
    pool = ChildPool()
    try:
        for fresh in (pool.acquire(0), pool.acquire(0, timing=True)):  # forked on Linux, then spawned
            fresh.wait_ready()
            folder = scratch.folder_for(fresh.process.pid)
            assert folder.is_dir() and folder.parent == tmp_path
            (folder / "tmpabcdefgh.mlpackage").mkdir()  # what coremltools leaves there
            os.kill(fresh.process.pid, signal.SIGKILL)  # no hook of the child's runs
            fresh.process.wait(timeout=30)
            assert folder.is_dir()
            pool.discard(fresh)
            assert not folder.exists()
    finally:
        pool.close()
    assert not list(tmp_path.glob(scratch.PREFIX + "*"))


def test_a_child_asked_to_exit_removes_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr(children_module, "remove_child_folder", lambda pid, base=None: None)  # not the pool's
    pool = ChildPool()
    child = pool.acquire(0, timing=True)
    child.wait_ready()
    folder = scratch.folder_for(child.process.pid)
    assert folder.is_dir()
    pool.close()
    assert not folder.exists()


def test_a_new_pool_removes_the_folders_of_children_no_longer_running_and_no_other(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    ended = subprocess.Popen(["true"])
    ended.wait()
    orphan = tmp_path / f"{scratch.PREFIX}{ended.pid}"
    (orphan / "tmpabcdefgh.mlpackage").mkdir(parents=True)
    running = tmp_path / f"{scratch.PREFIX}{os.getpid()}"
    running.mkdir()
    other = tmp_path / f"{scratch.PREFIX}notapid"
    other.mkdir()
    assert scratch.remove_orphans() == 1
    assert not orphan.exists() and running.is_dir() and other.is_dir()
    orphan.mkdir()
    ChildPool().close()  # a pool starting sweeps them too
    assert not orphan.exists()


BACKGROUND_CLOSE = """\
from mlbench.run.children import ChildPool
pool = ChildPool()
child = pool.acquire(0)
child.wait_ready()
print(child.process.pid, flush=True)
pool.release(child)
pool.close_in_background()  # as a run does before writing its reports: the child exits while this one goes on
"""


@pytest.mark.parametrize("fork_server", ["1", "0"], ids=["spawned", "forked"])
def test_a_coordinator_exiting_while_its_idle_children_close_in_the_background_leaves_no_folder(
        tmp_path, fork_server):
    env = {**os.environ, "TMPDIR": str(tmp_path), "MLBENCH_NO_FORK_SERVER": fork_server}
    done = subprocess.run([sys.executable, "-c", BACKGROUND_CLOSE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[0]) > 0
    assert not list(tmp_path.glob(scratch.PREFIX + "*"))


def test_a_child_whose_folder_cannot_be_made_keeps_the_temporary_folder_it_was_given(tmp_path, monkeypatch):
    given = tmp_path / "not-a-folder"
    given.write_text("", encoding="utf-8")
    monkeypatch.setattr("tempfile.tempdir", str(given))
    monkeypatch.setenv("TMPDIR", str(given))
    assert scratch.use_own_folder() is None
    assert tempfile.tempdir == str(given) and os.environ["TMPDIR"] == str(given)
