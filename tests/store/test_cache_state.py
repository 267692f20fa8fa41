"""The cache's stat state: unchanged entries are not hashed again; any change to their files is
hashed; `verify` hashes everything; concurrent runs share the state database."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import mlbench.store.cache as cache_module
from mlbench.cli.main import main
from mlbench.store.cache import ArtifactCache, BuildResult
from mlbench.store.hashing import artifact_key
from mlbench.store.state import BACKDATE_NS, RACY_NS, STATE_NAME, signature

INPUTS = {"backend": "onnx", "model_digest": "e" * 64, "options": {}}


def key_for(n: int | str) -> str:
    return artifact_key({**INPUTS, "n": n})


def build_package(tmp: Path) -> BuildResult:
    pkg = tmp / "model.mlpackage"
    (pkg / "Data" / "weights").mkdir(parents=True)
    (pkg / "Manifest.json").write_text('{"fileFormatVersion": "1.0.0"}')
    (pkg / "Data" / "weights" / "weight.bin").write_bytes(b"\x01" * 4096)
    return BuildResult("model.mlpackage")


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every artifact the cache hashes on lookup, in order."""
    seen: list[Path] = []
    real = cache_module.sha256_path

    def counting(path: Any) -> str:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(cache_module, "sha256_path", counting)
    return seen


def weight(entry: Any) -> Path:
    return entry.artifact_path / "Data" / "weights" / "weight.bin"


def test_unchanged_entry_is_trusted_without_hashing(tmp_path: Path, hashes: list[Path]) -> None:
    key = key_for("warm")
    ArtifactCache(tmp_path).get_or_build(key, INPUTS, build_package)
    hashes.clear()  # the build hashed it once to record its checksum
    for _ in range(3):  # a new cache object each time: the next run, in another process
        assert ArtifactCache(tmp_path).lookup(key) is not None
    assert hashes == []
    assert (tmp_path / STATE_NAME).exists()


def test_a_stat_nobody_trusts_means_hashing_every_lookup(tmp_path: Path, hashes: list[Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    key = key_for("untrusted")
    ArtifactCache(tmp_path).get_or_build(key, INPUTS, build_package)
    hashes.clear()
    monkeypatch.setenv("MLBENCH_CACHE_TRUST_STAT", "0")
    for _ in range(2):
        assert ArtifactCache(tmp_path).lookup(key) is not None
    assert len(hashes) == 2
    monkeypatch.setenv("MLBENCH_CACHE_TRUST_STAT", "1")  # anything but "0" trusts, as by default
    assert ArtifactCache(tmp_path).lookup(key) is not None and len(hashes) == 2


def test_published_files_are_backdated(tmp_path: Path) -> None:
    before = time.time_ns()
    entry, _ = ArtifactCache(tmp_path).get_or_build(key_for("old"), INPUTS, build_package)
    stamps = [p.stat().st_mtime_ns for p in [entry.artifact_path, *entry.artifact_path.rglob("*")]]
    assert all(s <= before - BACKDATE_NS + 10**9 for s in stamps)


def _flip_keep_size(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[7] ^= 0xFF
    path.write_bytes(bytes(data))  # same inode, same size: only the timestamps change


def _flip_and_restore_mtime(path: Path) -> None:
    st = path.stat()
    _flip_keep_size(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime cannot be


def _replace_file(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    tmp = path.with_name("new.bin")
    tmp.write_bytes(bytes(data))
    st = path.stat()
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)  # a new inode with the old size and mtime


def _add_file(path: Path) -> None:
    (path.parent / "extra.bin").write_bytes(b"")


@pytest.mark.parametrize("corrupt", [_flip_keep_size, _flip_and_restore_mtime, _replace_file, _add_file])
def test_corruption_that_changes_the_stat_is_caught_on_the_next_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, hashes: list[Path], corrupt: Any
) -> None:
    key = key_for("corrupt")
    entry, _ = ArtifactCache(tmp_path).get_or_build(key, INPUTS, build_package)
    assert ArtifactCache(tmp_path).lookup(key) is not None  # trusted from the state
    hashes.clear()
    corrupt(weight(entry))
    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        assert ArtifactCache(tmp_path).lookup(key) is None
    assert hashes == [entry.artifact_path]
    assert [r.getMessage() for r in caplog.records] == [
        f"cache entry {key[:12]} is corrupt (checksum mismatch); rebuilding"
    ]
    assert not entry.path.exists()


def test_a_touched_entry_is_hashed_until_its_stat_is_old_enough(tmp_path: Path, hashes: list[Path]) -> None:
    key = key_for("touch")
    entry, _ = ArtifactCache(tmp_path).get_or_build(key, INPUTS, build_package)
    hashes.clear()
    os.utime(weight(entry))  # content unchanged, mtime now: too fresh to trust (a write may follow in its tick)
    cache = ArtifactCache(tmp_path)
    assert cache.lookup(key) is not None and cache.lookup(key) is not None
    assert len(hashes) == 2
    past = time.time_ns() - RACY_NS - 10**9
    os.utime(weight(entry), ns=(past, past))
    assert cache.lookup(key) is not None  # hashed once more, then recorded
    assert cache.lookup(key) is not None
    assert len(hashes) == 3


def test_verify_hashes_what_the_stat_cannot_see(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = ArtifactCache(tmp_path)
    good, bad = key_for("good"), key_for("bad")
    cache.get_or_build(good, INPUTS, build_package)
    entry, _ = cache.get_or_build(bad, INPUTS, build_package)
    _flip_keep_size(weight(entry))
    # A corruption no stat shows (say, a disk error): the state still vouches for the new stat.
    with sqlite3.connect(tmp_path / STATE_NAME) as conn:
        sig = signature(entry.artifact_path)
        assert sig is not None
        conn.execute("UPDATE state SET signature = ? WHERE key = ?", (sig.digest, bad))
    assert cache.lookup(bad) is not None  # a run trusts it ...

    assert main(["cache", "verify", "--dir", str(tmp_path)]) == 1  # ... verify does not
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{bad[:12]}  onnx: checksum mismatch; evicted, the next run rebuilds it",
                   f"verified 2 entries (8.3 kB) in {tmp_path}: 1 corrupt"]
    assert cache.lookup(bad) is None and cache.lookup(good) is not None
    assert main(["cache", "verify", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"verified 1 entries (4.1 kB) in {tmp_path}: all intact\n"


def test_an_unusable_state_database_means_hashing(tmp_path: Path, hashes: list[Path]) -> None:
    key = key_for("garbage")
    ArtifactCache(tmp_path).get_or_build(key, INPUTS, build_package)
    for name in (STATE_NAME, f"{STATE_NAME}-wal", f"{STATE_NAME}-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    (tmp_path / STATE_NAME).write_bytes(b"not a database at all" * 100)
    hashes.clear()
    cache = ArtifactCache(tmp_path)
    assert cache.lookup(key) is not None and cache.lookup(key) is not None
    assert len(hashes) == 2


def test_clear_removes_the_state_with_the_last_entry(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cache.get_or_build(key_for(1), INPUTS, build_package)
    assert (tmp_path / STATE_NAME).exists()
    assert cache.clear() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CACHEDIR.TAG", "tmp"]


def _lookup_worker(root: str, keys: list[str], rounds: int, barrier: Any, results: Any) -> None:
    cache = ArtifactCache(Path(root))
    barrier.wait()
    hits = 0
    for i in range(rounds):
        for key in keys:
            entry = cache.lookup(key)
            hits += entry is not None
            if entry is not None and i % 5 == 0:  # churn: hashed and recorded again by someone
                cache.state.forget(key)
    results.put(hits)


def test_concurrent_runs_share_the_state(tmp_path: Path) -> None:
    keys = [key_for(f"c{i}") for i in range(4)]
    cache = ArtifactCache(tmp_path)
    for key in keys:
        cache.get_or_build(key, INPUTS, build_package)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_lookup_worker, args=(str(tmp_path), keys, 20, barrier, results)) for _ in range(3)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert got == [80, 80, 80]
    with sqlite3.connect(tmp_path / STATE_NAME) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
