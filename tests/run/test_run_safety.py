"""Around the models: inspect and the cache stay inside their files, one run per report folder, a
dead run's build folders and children do not outlive it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlbench.cli.main import main
from mlbench.errors import UserError
from mlbench.run.lock import ReportLock
from mlbench.store.cache import ArtifactCache
from mlbench.store.stale import host_tag as _host_tag
from tests.conftest import ROOT


def inspect_error(path: Path, capsys) -> str:
    assert main(["inspect", str(path)]) == 2
    return capsys.readouterr().err


def package(tmp_path: Path, spec_path: str) -> Path:
    root = tmp_path / "evil.mlpackage"
    (root / "Data").mkdir(parents=True)
    manifest = {"rootModelIdentifier": "id", "itemInfoEntries": {"id": {"path": spec_path}}}
    (root / "Manifest.json").write_text(json.dumps(manifest))
    return root


def test_inspect_refuses_a_manifest_pointing_outside_the_package(tmp_path, capsys):
    (tmp_path / "secret.mlmodel").write_bytes(b"\x08\x07")
    root = package(tmp_path, "../../secret.mlmodel")
    assert inspect_error(root, capsys) == (f"{root}: corrupt Core ML package: Manifest.json points outside the package "
                                           "('../../secret.mlmodel'); refused\n")
    root = package(tmp_path / "abs", str(tmp_path / "secret.mlmodel"))
    assert "points outside the package" in inspect_error(root, capsys)


def test_inspect_refuses_fifos_and_symlinks_without_waiting(tmp_path, capsys):
    fifo = tmp_path / "model.mlmodel"
    os.mkfifo(fifo)
    assert inspect_error(fifo, capsys) == f"{fifo}: not a Core ML model: the model file is a FIFO\n"
    root = package(tmp_path, "com.apple.CoreML/model.mlmodel")
    (root / "Data" / "com.apple.CoreML").mkdir()
    os.mkfifo(root / "Data" / "com.apple.CoreML" / "model.mlmodel")
    assert inspect_error(root, capsys) == f"{root}: not a Core ML model: the model spec is a FIFO\n"


def test_inspect_checks_the_size_before_reading(tmp_path, capsys):
    huge = tmp_path / "huge.mlmodel"
    with open(huge, "wb") as handle:  # sparse: 3 GB on paper, nothing on disk
        handle.truncate(3 * 2**30)
    assert inspect_error(huge, capsys) == (f"{huge}: the model file is 3,221,225,472 bytes; at most 2,147,483,647 "
                                           "can be read\n")


def test_inspect_refuses_a_deep_manifest_a_nul_and_an_overlong_name_in_one_line(tmp_path, capsys):
    """Each was a traceback: RecursionError, ValueError: embedded null byte, OSError: File name too long."""
    deep = tmp_path / "deep.mlpackage"
    (deep / "Data").mkdir(parents=True)
    (deep / "Manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    assert inspect_error(deep, capsys) == f"{deep}: corrupt Core ML package: Manifest.json is nested too deeply to read\n"
    nul = package(tmp_path / "nul", "com.apple.CoreML/model\0.mlmodel")
    assert inspect_error(nul, capsys) == (f"{nul}: corrupt Core ML package: Manifest.json's model spec path holds a NUL "
                                          "character; refused\n")
    long_spec = package(tmp_path / "long", "com.apple.CoreML/" + "m" * 300 + ".mlmodel")
    (long_spec / "Data" / "com.apple.CoreML").mkdir()
    assert inspect_error(long_spec, capsys) == (f"{long_spec}: corrupt Core ML package: cannot look up the model spec: "
                                                "file name too long\n")
    for suffix in (".mlmodel", ".mlpackage"):
        long_name = tmp_path / ("x" * 300 + suffix)
        assert inspect_error(long_name, capsys) == f"{long_name}: cannot read: file name too long\n"


def test_one_run_per_report_folder(tmp_path):
    with ReportLock(tmp_path / "out"), pytest.raises(UserError) as info, ReportLock(tmp_path / "out"):
        pass
    assert str(info.value) == (f"another run (pid {os.getpid()}) is writing to {tmp_path / 'out'}; wait for it to "
                               "finish, or give this run another report.dir")
    with ReportLock(tmp_path / "out"):  # released: the next run may go
        pass


def test_build_folders_of_dead_processes_are_cleaned_by_the_next_run(tmp_path):
    cache = ArtifactCache(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    orphan = cache.tmp_root / f"build-{'a' * 12}-{_host_tag()}.{dead_pid}-x1"
    alive = cache.tmp_root / f"build-{'b' * 12}-{_host_tag()}.{os.getpid()}-x2"
    elsewhere = cache.tmp_root / f"build-{'c' * 12}-00000000.{dead_pid}-x3"  # another machine's: left to the age rule
    for folder in (orphan, alive, elsewhere):
        (folder / "model.mlpackage").mkdir(parents=True)
    cache.clean_stale_builds()
    assert sorted(p.name for p in cache.tmp_root.iterdir()) == sorted([alive.name, elsewhere.name])


@pytest.mark.torch
def test_children_exit_when_their_coordinator_dies(tmp_path):
    script = ("import os, sys; from mlbench.run.supervisor import Child\n"
              "child = Child(); child.wait_ready(); print(child.process.pid, flush=True); os._exit(0)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    pid = int(out.stdout)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the child outlived its coordinator")
