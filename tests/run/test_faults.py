"""Faults a CI runner meets, for real where a test can make them: a full disk under the report folder (ENOSPC at
the operating system's boundary), SIGTERM and a double Ctrl-C sent to a real `mlbench run`. Each ends in one line,
the documented exit code, and no finished record lost."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlbench.cli.main import main
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: faults
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
    precision: [float32, bfloat16]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
report: {{dir: out, formats: [json, markdown, html]}}
history: {{enabled: false}}
"""


def _full_disk_under(monkeypatch, folder: Path, after: int = 0, calls=("fsync", "write")) -> None:
    """os.fsync and os.write on files under `folder` raise ENOSPC, after `after` successful fsyncs there."""
    seen = {"n": 0}
    real = {name: getattr(os, name) for name in calls}

    def full(name):
        def call(fd, *args):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            if path.startswith(str(folder)):
                seen["n"] += 1
                if seen["n"] > after:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real[name](fd, *args)
        return call

    for name in calls:
        monkeypatch.setattr(os, name, full(name))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name a descriptor's file")
def test_a_full_disk_at_the_lock_is_one_line_and_exit_3(write_pipeline, tmp_path, monkeypatch, capsys):
    path = write_pipeline(PIPELINE)
    (tmp_path / "out").mkdir()
    _full_disk_under(monkeypatch, tmp_path / "out", calls=("write",))
    assert main(["run", "-q", str(path)]) == 3
    err = capsys.readouterr().err
    assert err == f"{tmp_path / 'out' / '.lock'}: cannot write the run's lock: No space left on device (ENOSPC)\n"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name a descriptor's file")
def test_a_full_disk_mid_run_is_one_line_exit_3_and_resume_recovers_every_record(write_pipeline, tmp_path,
                                                                                   monkeypatch, capsys):
    path = write_pipeline(PIPELINE)
    with monkeypatch.context() as patch:  # the journal's header and two records go down, then the disk is full
        _full_disk_under(patch, tmp_path / "out", after=3, calls=("fsync",))
        assert main(["run", "-q", "--jobs", "1", str(path)]) == 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err  # the partial report's failure (a warning), then the run's one line
    out, journal_path = tmp_path / "out", tmp_path / "out" / "journal.jsonl"
    assert err[0] == f"warning: no partial report could be written ({out / 'report.json'}: No space left on device (ENOSPC))"
    assert err[1] == (f"the run could not finish: {journal_path}: No space left on device (ENOSPC); no partial report "
                      f"could be written ({out / 'report.json'}: No space left on device (ENOSPC)); the finished "
                      f"records are in the journal in {out} (`--resume` goes on from there)")
    assert not (tmp_path / "out" / "report.json").exists()  # nothing half-written
    journal = (tmp_path / "out" / "journal.jsonl").read_text().splitlines()
    kept = [json.loads(line)["record"]["variant_id"] for line in journal if '"record"' in line]
    assert len(kept) >= 1

    assert main(["run", "-q", "--jobs", "1", "--resume", str(path)]) == 0  # space freed: nothing lost
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["summary"]["ok"] == 4
    started = {r["variant_id"]: r["started"] for r in report["records"]}
    assert all(v in started for v in kept)


def _run_until_records(path: Path, tmp_path: Path, records: int) -> subprocess.Popen:
    journal = tmp_path / "out" / "journal.jsonl"
    # Started as from a terminal, where Ctrl-C is heard: a suite started in the background (`pytest &` without job
    # control, nohup) ignores SIGINT, every child inherits that through exec, and this run would finish regardless.
    # A caught handler here becomes the default in the child.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen([sys.executable, "-m", "mlbench.cli", "run", "-q", "--jobs", "1", str(path)],
                                   env={**os.environ, "CI": "1", "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.time() + 180
    while time.time() < deadline and process.poll() is None:
        lines = journal.read_text().splitlines() if journal.exists() else []
        if sum('"record"' in line for line in lines) >= records:
            return process
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"the run did not reach {records} records: {process.communicate()[1]}")


SLOW = PIPELINE.replace("min_time_s: 0.0", "min_time_s: 1.5")  # each variant takes a moment


@pytest.mark.slow
def test_sigterm_writes_the_partial_report_in_every_format_and_exits_143(write_pipeline, tmp_path):
    path = write_pipeline(SLOW)
    process = _run_until_records(path, tmp_path, 1)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert err.splitlines()[-1] == (f"stopped by SIGTERM: finished records are kept in {tmp_path / 'out' / 'journal.jsonl'}"
                                    f" and a partial report beside it; run `mlbench run {path} --resume` to finish "
                                    "the rest")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["finished"] is None and 1 <= len(report["records"]) < 4
    for name in ("report.md", "report.html"):
        assert report["run_id"] in (tmp_path / "out" / name).read_text()


@pytest.mark.slow
def test_a_double_ctrl_c_leaves_every_format_of_one_run_and_says_what_was_written(write_pipeline, tmp_path):
    path = write_pipeline(SLOW)
    process = _run_until_records(path, tmp_path, 1)
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # while the partial report is being written
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert err.splitlines()[-1].startswith("interrupted: finished records are kept in ")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["finished"] is None
    for name in ("report.md", "report.html"):
        assert report["run_id"] in (tmp_path / "out" / name).read_text()


def _read_only_under(monkeypatch, folder: Path) -> None:
    """Creating anything under `folder` fails as on a read-only filesystem (EROFS), at os.mkdir and os.open."""
    real_mkdir, real_open = os.mkdir, os.open

    def refuse(path) -> None:
        if str(path).startswith(str(folder)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    def mkdir(path, *args, **kwargs):
        refuse(path)
        return real_mkdir(path, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)


def test_a_read_only_cache_lets_the_variants_that_need_none_run(write_pipeline, tmp_path, monkeypatch, capsys):
    path = write_pipeline(PIPELINE.replace("report: {", "cache: {dir: cache}\nreport: {"))
    _read_only_under(monkeypatch, tmp_path / "cache")
    assert main(["run", "-q", "--jobs", "1", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"warning: the cache cannot be written ({tmp_path / 'cache'}: Read-only file system (EROFS)): "
                      "variants that export through it fail, the others run")
    assert err[-1].startswith("4 ok; 4 timed; reports in")


def test_an_export_into_a_read_only_cache_is_one_line(tmp_path, monkeypatch):
    from mlbench.errors import CannotWrite
    from mlbench.store.cache import ArtifactCache

    cache = ArtifactCache(tmp_path / "cache")
    _read_only_under(monkeypatch, tmp_path / "cache")
    with pytest.raises(CannotWrite) as info:
        cache.get_or_build("a" * 64, {"k": 1}, lambda folder: None)
    assert str(info.value) == f"{tmp_path / 'cache'}: cannot write the cache: Read-only file system (EROFS)"
    assert info.value.exit_code == 3


@pytest.mark.slow
def test_a_cache_clear_loop_during_a_run_fails_no_variant(write_pipeline, tmp_path):
    """`mlbench cache clear` in a loop while the run exports and measures: the entry being measured is pinned."""
    import threading

    pytest.importorskip("onnxruntime")
    text = PIPELINE.replace("  - backend: torch\n    precision: [float32, bfloat16]\n",
                            "  - backend: onnxruntime\n").replace("min_time_s: 0.0", "min_time_s: 0.5")
    path = write_pipeline(text.replace("report: {", "cache: {dir: cache}\nreport: {"))
    stop, cleared = threading.Event(), []

    def clear_loop() -> None:
        while not stop.is_set():
            done = subprocess.run([sys.executable, "-m", "mlbench.cli", "cache", "clear", "--dir", str(tmp_path / "cache")],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            cleared.append(done.stdout.strip() or done.stderr.strip())

    thread = threading.Thread(target=clear_loop)
    thread.start()
    try:
        done = subprocess.run([sys.executable, "-m", "mlbench.cli", "run", "-q", "--jobs", "1", str(path)],
                              capture_output=True, text=True, env={**os.environ, "CI": "1", "PYTHONPATH": str(ROOT)},
                              timeout=400)
    finally:
        stop.set()
        thread.join()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert done.returncode == 0, [r.get("error") for r in report["records"]]
    assert report["summary"]["ok"] == 2 and cleared
    assert any("a run is using" in line for line in cleared), cleared[-5:]
