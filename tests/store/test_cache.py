"""The artifact cache on a real filesystem: hits, corruption, races, eviction, sizes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import mlbench
from mlbench.errors import UserError
from mlbench.store.cache import (
    ArtifactCache,
    BuildResult,
    CacheEntry,
    default_cache_dir,
    format_size,
    parse_size,
)
from mlbench.store.hashing import artifact_key, sha256_path

INPUTS = {"backend": "onnx", "model_digest": "d" * 64, "options": {"opset": 17}}


def key_for(n: int | str) -> str:
    return artifact_key({**INPUTS, "n": n})


class FileBuilder:
    """Writes a single-file artifact and counts its calls."""

    def __init__(self, payload: bytes = b"onnx-bytes", name: str = "model.onnx") -> None:
        self.payload, self.name, self.calls = payload, name, 0

    def __call__(self, tmp: Path) -> BuildResult:
        self.calls += 1
        (tmp / self.name).write_bytes(self.payload)
        return BuildResult(self.name, {"opset": 17})


def build_package(tmp: Path) -> BuildResult:
    pkg = tmp / "model.mlpackage"
    (pkg / "Data" / "com.apple.CoreML" / "weights").mkdir(parents=True)
    (pkg / "Manifest.json").write_text('{"fileFormatVersion": "1.0.0"}')
    (pkg / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"spec" * 10)
    (pkg / "Data" / "com.apple.CoreML" / "weights" / "weight.bin").write_bytes(b"\x01" * 1000)
    return BuildResult("model.mlpackage", {"compute_units": "ALL"})


def tmp_leftovers(root: Path) -> list[str]:
    tmp = root / "tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []


def entry_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("??/*") if p.is_dir())


# -- hit / miss / meta ---------------------------------------------------------------------------


def test_miss_then_hit_single_file(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key, build = key_for(1), FileBuilder()

    assert cache.lookup(key) is None
    entry, hit = cache.get_or_build(key, {**INPUTS, "n": 1}, build)
    assert (hit, build.calls) == (False, 1)
    assert entry.path == tmp_path / key[:2] / key
    assert entry.artifact_path == entry.path / "model.onnx"
    assert entry.artifact_path.read_bytes() == b"onnx-bytes"
    assert entry.size_bytes == len(b"onnx-bytes")
    assert sorted(p.name for p in entry.path.iterdir()) == ["meta.json", "model.onnx"]

    again, hit = cache.get_or_build(key, {**INPUTS, "n": 1}, build)
    assert (hit, build.calls) == (True, 1)
    assert again.meta == entry.meta
    assert tmp_leftovers(tmp_path) == []


def test_meta_contents(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key = key_for("meta")
    entry, _ = cache.get_or_build(key, {**INPUTS, "n": "meta"}, FileBuilder())
    on_disk = json.loads((entry.path / "meta.json").read_text())
    assert on_disk == entry.meta
    assert set(on_disk) == {
        "key", "key_inputs", "artifact", "size_bytes", "checksum", "created", "build_seconds",
        "mlbench_version", "opset",
    }
    assert on_disk["key"] == key
    assert on_disk["key_inputs"] == {**INPUTS, "n": "meta"}
    assert on_disk["artifact"] == "model.onnx"
    assert on_disk["size_bytes"] == 10
    assert on_disk["checksum"] == sha256_path(entry.artifact_path)
    assert on_disk["mlbench_version"] == mlbench.__version__
    assert on_disk["opset"] == 17
    assert on_disk["build_seconds"] >= 0
    created = datetime.fromisoformat(on_disk["created"])
    assert created.utcoffset() is not None and created.utcoffset().total_seconds() == 0


def test_directory_artifact(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key = key_for("pkg")
    entry, hit = cache.get_or_build(key, INPUTS, build_package)
    assert not hit
    assert entry.artifact_path.is_dir()
    assert entry.artifact_path.name == "model.mlpackage"
    assert entry.size_bytes == len('{"fileFormatVersion": "1.0.0"}') + 40 + 1000
    assert entry.meta["checksum"] == sha256_path(entry.artifact_path)
    assert entry.meta["compute_units"] == "ALL"
    again, hit = cache.get_or_build(key, INPUTS, build_package)
    assert hit and again.path == entry.path


def test_nothing_created_until_first_build(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    assert cache.lookup(key_for(1)) is None
    assert cache.entries() == []
    assert cache.total_bytes() == 0
    assert cache.prune(0) == []
    assert cache.clear() == 0
    assert not (tmp_path / "cache").exists()


def test_bad_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="64 lowercase hex"):
        ArtifactCache(tmp_path).lookup("../../etc")


# -- corruption ----------------------------------------------------------------------------------


def _corrupt_flip_byte(entry: CacheEntry) -> None:
    data = bytearray(entry.artifact_path.read_bytes())
    data[0] ^= 0xFF
    entry.artifact_path.write_bytes(bytes(data))


def _corrupt_flip_byte_in_package(entry: CacheEntry) -> None:
    weight = entry.artifact_path / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    weight.write_bytes(b"\x02" + weight.read_bytes()[1:])


def _corrupt_delete_meta(entry: CacheEntry) -> None:
    (entry.path / "meta.json").unlink()


def _corrupt_garbage_meta(entry: CacheEntry) -> None:
    (entry.path / "meta.json").write_text('{"key": "trunc')


def _corrupt_delete_artifact(entry: CacheEntry) -> None:
    entry.artifact_path.unlink()


@pytest.mark.parametrize(
    ("builder", "corrupt", "why"),
    [
        (FileBuilder(), _corrupt_flip_byte, "checksum mismatch"),
        (build_package, _corrupt_flip_byte_in_package, "checksum mismatch"),
        (FileBuilder(), _corrupt_delete_meta, "meta.json missing"),
        (FileBuilder(), _corrupt_garbage_meta, "meta.json is not valid JSON"),
        (FileBuilder(), _corrupt_delete_artifact, "artifact model.onnx missing"),
    ],
)
def test_corrupt_entry_is_evicted_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, builder: Any, corrupt: Any, why: str
) -> None:
    cache = ArtifactCache(tmp_path)
    key = key_for("corrupt")
    entry, _ = cache.get_or_build(key, INPUTS, builder)
    corrupt(entry)

    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        assert cache.lookup(key) is None
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("mlbench.store.cache", "WARNING", f"cache entry {key[:12]} is corrupt ({why}); rebuilding")
    ]
    assert not entry.path.exists()
    assert tmp_leftovers(tmp_path) == []

    caplog.clear()
    rebuilt, hit = cache.get_or_build(key, INPUTS, builder)
    assert not hit
    assert rebuilt.meta["checksum"] == sha256_path(rebuilt.artifact_path)
    assert cache.lookup(key) is not None
    assert caplog.records == []


def test_corrupt_entry_found_by_get_or_build_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = ArtifactCache(tmp_path)
    key, build = key_for("gob"), FileBuilder()
    entry, _ = cache.get_or_build(key, INPUTS, build)
    _corrupt_flip_byte(entry)
    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        rebuilt, hit = cache.get_or_build(key, INPUTS, build)
    assert (hit, build.calls) == (False, 2)
    assert rebuilt.artifact_path.read_bytes() == b"onnx-bytes"
    assert [r.getMessage() for r in caplog.records] == [
        f"cache entry {key[:12]} is corrupt (checksum mismatch); rebuilding"
    ]


# -- failed and misbehaving builds ---------------------------------------------------------------


def test_build_that_raises_leaves_nothing(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key = key_for("boom")

    def build(tmp: Path) -> BuildResult:
        (tmp / "model.mlpackage").mkdir()
        (tmp / "model.mlpackage" / "half.bin").write_bytes(b"x" * 100)
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError, match="conversion failed"):
        cache.get_or_build(key, INPUTS, build)
    assert cache.lookup(key) is None
    assert entry_dirs(tmp_path) == []
    assert tmp_leftovers(tmp_path) == []


def _writes_nothing(tmp: Path) -> BuildResult:
    return BuildResult("model.onnx")


def _writes_two(tmp: Path) -> BuildResult:
    (tmp / "a.onnx").write_bytes(b"a")
    (tmp / "scratch").write_bytes(b"b")
    return BuildResult("a.onnx")


def _names_meta(tmp: Path) -> BuildResult:
    (tmp / "meta.json").write_text("{}")
    return BuildResult("meta.json")


def _overrides_key(tmp: Path) -> BuildResult:
    (tmp / "m.onnx").write_bytes(b"m")
    return BuildResult("m.onnx", {"key": "x"})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (_writes_nothing, r"exactly one artifact named 'model.onnx'.*found \[\]"),
        (_writes_two, r"found \['a.onnx', 'scratch'\]"),
        (_names_meta, "invalid artifact name 'meta.json'"),
        (_overrides_key, r"may not set \['key'\]"),
    ],
)
def test_misbehaving_builder_is_refused(tmp_path: Path, build: Any, message: str) -> None:
    cache = ArtifactCache(tmp_path)
    with pytest.raises(ValueError, match=message):
        cache.get_or_build(key_for("bad"), INPUTS, build)
    assert entry_dirs(tmp_path) == []
    assert tmp_leftovers(tmp_path) == []


def test_unserializable_key_inputs_fail_before_building(tmp_path: Path) -> None:
    build = FileBuilder()
    with pytest.raises(TypeError, match="unsupported type set"):
        ArtifactCache(tmp_path).get_or_build(key_for("x"), {"s": {1}}, build)
    assert build.calls == 0
    assert tmp_leftovers(tmp_path) == []


# -- races ---------------------------------------------------------------------------------------


def test_lost_rename_race_adopts_the_winner(tmp_path: Path) -> None:
    """A publish that finds the key already in place discards its own build."""
    cache = ArtifactCache(tmp_path)
    key = key_for("race")
    winner = FileBuilder(b"winner")

    def loser(tmp: Path) -> BuildResult:
        # While we build, "another process" publishes the same key.
        cache.get_or_build(key, INPUTS, winner)
        (tmp / "model.onnx").write_bytes(b"loser")
        return BuildResult("model.onnx")

    entry, hit = cache.get_or_build(key, INPUTS, loser)
    assert not hit
    assert entry.artifact_path.read_bytes() == b"winner"
    assert entry_dirs(tmp_path) == [tmp_path / key[:2] / key]
    assert tmp_leftovers(tmp_path) == []


def _race_worker(root: str, key: str, marks: str, barrier: Any, results: Any) -> None:
    def build(tmp: Path) -> BuildResult:
        Path(marks, str(os.getpid())).touch()
        time.sleep(0.5)
        # Different bytes per process, so adopting the winner's entry is visible.
        (tmp / "model.onnx").write_bytes(f"built by {os.getpid()}".encode())
        return BuildResult("model.onnx")

    barrier.wait()
    entry, hit = ArtifactCache(Path(root)).get_or_build(key, INPUTS, build)
    results.put((str(entry.path), entry.meta["checksum"], sha256_path(entry.artifact_path), hit))


def test_two_processes_build_same_key(tmp_path: Path) -> None:
    root, marks = tmp_path / "cache", tmp_path / "marks"
    marks.mkdir()
    key = key_for("two-procs")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(str(root), key, str(marks), barrier, results))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0

    assert len(list(marks.iterdir())) == 2  # both really built: the race was exercised
    (path_a, meta_a, disk_a, hit_a), (path_b, meta_b, disk_b, hit_b) = got
    assert path_a == path_b == str(root / key[:2] / key)
    assert meta_a == meta_b == disk_a == disk_b
    assert (hit_a, hit_b) == (False, False)
    assert entry_dirs(root) == [root / key[:2] / key]
    assert tmp_leftovers(root) == []
    assert ArtifactCache(root).lookup(key) is not None


# -- listing, find, prune, clear -----------------------------------------------------------------


def _fill(cache: ArtifactCache, sizes: dict[str, int]) -> dict[str, str]:
    keys = {}
    for name, size in sizes.items():
        keys[name] = key_for(name)
        cache.get_or_build(keys[name], INPUTS, FileBuilder(b"x" * size, f"{name}.onnx"))
    return keys


def test_entries_and_total_bytes(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    keys = _fill(cache, {"a": 100, "b": 200})
    (tmp_path / "tmp").mkdir(exist_ok=True)
    (tmp_path / "tmp" / "build-in-progress").mkdir()
    assert [e.key for e in cache.entries()] == sorted(keys.values())
    assert cache.total_bytes() == 300


def test_entries_skip_broken_without_checksumming(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    keys = _fill(cache, {"a": 10, "b": 20})
    (tmp_path / keys["a"][:2] / keys["a"] / "meta.json").unlink()
    assert [e.key for e in cache.entries()] == [keys["b"]]


def test_half_built_tmp_folder_is_never_served(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key = key_for("tmp")
    fake = tmp_path / "tmp" / key
    fake.mkdir(parents=True)
    (fake / "model.onnx").write_bytes(b"half")
    assert cache.lookup(key) is None
    assert cache.entries() == []


def test_prune_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    keys = _fill(cache, {"a": 100, "b": 100, "c": 100})
    for name in ("a", "b", "c"):  # distinct, well-separated last-used times: a < b < c
        time.sleep(0.02)
        assert cache.lookup(keys[name]) is not None
    time.sleep(0.02)
    assert cache.lookup(keys["a"]) is not None  # now b is the least recently used

    assert cache.prune(300) == []
    evicted = cache.prune(250)
    assert [e.key for e in evicted] == [keys["b"]]
    assert sorted(e.key for e in cache.entries()) == sorted([keys["a"], keys["c"]])

    evicted = cache.prune(100)
    assert [e.key for e in evicted] == [keys["c"]]
    assert cache.total_bytes() == 100

    assert [e.key for e in cache.prune(0)] == [keys["a"]]
    assert sorted(tmp_path.iterdir()) == [tmp_path / "CACHEDIR.TAG", tmp_path / "tmp"]
    assert tmp_leftovers(tmp_path) == []


def test_prune_and_clear_remove_stale_tmp_only(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cache.claim()
    tmp = tmp_path / "tmp"
    # builds of another machine (judged by age alone), as mlbench names them
    stale, fresh = tmp / "build-0123456789ab-00000000.1-dead", tmp / "build-0123456789ab-00000000.2-alive"
    for d in (stale, fresh):
        (d / "model.mlpackage").mkdir(parents=True)
        (d / "model.mlpackage" / "w.bin").write_bytes(b"w")
    two_hours_ago = time.time() - 7200
    for p in (stale / "model.mlpackage" / "w.bin", stale / "model.mlpackage", stale):
        os.utime(p, (two_hours_ago, two_hours_ago))
    (tmp / f"trash-{'0' * 32}").mkdir()  # an eviction cut short: removable at any age

    assert cache.prune(10**9) == []
    assert tmp_leftovers(tmp_path) == [fresh.name]

    os.utime(fresh, (two_hours_ago, two_hours_ago))  # inner file is still fresh: a live build
    assert cache.clear() == 0
    assert tmp_leftovers(tmp_path) == [fresh.name]


def test_clear(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    keys = _fill(cache, {"a": 10, "b": 10, "c": 10})
    (tmp_path / keys["c"][:2] / keys["c"] / "meta.json").write_text("garbage")
    assert cache.clear() == 3
    assert cache.entries() == []
    assert entry_dirs(tmp_path) == []
    assert cache.lookup(keys["a"]) is None


def test_find_by_prefix(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    keys = _fill(cache, {"a": 1, "b": 1})
    one = keys["a"]
    assert cache.find(one).key == one
    assert cache.find(one[:12].upper()).key == one

    unknown = next(
        p for p in ("0000", "1111", "2222") if not any(k.startswith(p) for k in keys.values())
    )
    with pytest.raises(UserError) as info:
        cache.find(unknown)
    assert str(info.value) == f"no cache entry matches '{unknown}'"

    with pytest.raises(UserError) as info:
        cache.find("abc")
    assert str(info.value) == "cache key prefix 'abc' is too short: give at least 4 characters"

    with pytest.raises(UserError) as info:
        cache.find("wxyz")
    assert str(info.value) == "cache key prefix 'wxyz' is not hexadecimal"


def test_find_ambiguous(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    # Publish two entries under keys sharing a prefix, as a user could meet them.
    a, b = "abcd" + "0" * 60, "abcd" + "1" * 60
    for k in (a, b):
        cache.get_or_build(k, INPUTS, FileBuilder())
    with pytest.raises(UserError) as info:
        cache.find("abcd")
    assert str(info.value) == (
        "cache key prefix 'abcd' is ambiguous: 2 entries match (abcd00000000, abcd11111111)"
    )
    assert "\n" not in str(info.value)
    assert cache.find("abcd1").key == b


# -- configuration and sizes ---------------------------------------------------------------------


def test_default_cache_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLBENCH_CACHE_DIR", str(tmp_path / "custom"))
    assert default_cache_dir() == tmp_path / "custom"
    assert ArtifactCache().root == tmp_path / "custom"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG layout is Linux's")
def test_default_cache_dir_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MLBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "mlbench"


def test_empty_env_var_means_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLBENCH_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir().name == "mlbench"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", 123),
        ("0", 0),
        ("500MB", 500_000_000),
        ("5GB", 5_000_000_000),
        ("5gb", 5_000_000_000),
        (" 5 GB ", 5_000_000_000),
        ("1.5GiB", 1_610_612_736),
        ("2KiB", 2048),
        ("10kB", 10_000),
        ("7B", 7),
        ("1TB", 10**12),
        (".5MB", 500_000),
        (42, 42),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["5XB", "", "GB", "-1GB", "1.2.3MB", "5 G B", "1e3"])
def test_parse_size_garbage(text: str) -> None:
    with pytest.raises(UserError) as info:
        parse_size(text)
    assert str(info.value) == f"invalid size '{text}': use e.g. 500MB, 5GB"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (44_700_000, "44.7 MB"),
        (44_749_999, "44.7 MB"),
        (999_960, "1.0 MB"),  # rounds up into the next unit, never "1000.0 kB"
        (5_000_000_000, "5.0 GB"),
        (1_610_612_736, "1.6 GB"),
        (3 * 10**12, "3.0 TB"),
        (2 * 10**15, "2.0 PB"),
    ],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text
