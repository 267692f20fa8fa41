"""Derived figures (`mlbench.store.derived`): computed once per key, found afterwards, recomputed with a note when
their entry is corrupt or stale, covered by `cache verify` and `cache clear`, and computed by one process at a
time when several want the same entry at once. No torch: the values are small pydantic models."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from mlbench.store.cache import ArtifactCache
from mlbench.store.derived import VALUE_NAME, DerivedCache, code_version, derived_key
from mlbench.store.entry import LOCKS_DIR

PARTS = {"artifact": "a" * 64, "checksum": "c" * 64, "inputs": "i" * 64, "code": "v1"}


class Figures(BaseModel):
    max_rel: float
    note: str = ""


class Other(BaseModel):
    tokens: list[int]


def _compute(calls: list[int], value: float = 0.25):
    def compute() -> Figures:
        calls.append(1)
        return Figures(max_rel=value, note="emulated")
    return compute


def _get(cache: ArtifactCache, calls: list[int], parts=PARTS, model=Figures, compute=None) -> BaseModel:
    return DerivedCache(cache).get_or_compute("test.figures", parts, compute or _compute(calls), model,
                                              work="emulated", label="m/coreml/float16")


def test_a_value_is_computed_once_then_found_and_each_use_is_tallied(tmp_path):
    cache, calls = ArtifactCache(tmp_path / "cache"), []
    derived = DerivedCache(cache)
    first = derived.get_or_compute("test.figures", PARTS, _compute(calls), Figures, work="emulated", label="m")
    again = derived.get_or_compute("test.figures", PARTS, _compute(calls), Figures, work="emulated", label="m")
    assert first == again == Figures(max_rel=0.25, note="emulated") and len(calls) == 1
    tally = derived.take_tally()
    assert [(o.kind, o.work, o.computed, o.note) for o in tally] == [
        ("test.figures", "emulated", True, None), ("test.figures", "emulated", False, None)]
    assert tally[0].key == tally[1].key == derived_key("test.figures", PARTS) and derived.take_tally() == []
    entry = cache.lookup(tally[0].key)
    assert entry is not None and entry.meta["derived"] == "test.figures" and entry.meta["label"] == "test.figures of m"
    assert entry.meta["key_inputs"] == PARTS
    # a fresh process (a new cache object) finds it too: a warm rerun computes nothing
    assert _get(ArtifactCache(tmp_path / "cache"), calls) == first and len(calls) == 1
    assert not any((tmp_path / "cache" / LOCKS_DIR).glob("*.lock"))  # the holder removes its lock file


def test_any_part_of_the_key_changed_computes_again(tmp_path):
    cache, calls = ArtifactCache(tmp_path / "cache"), []
    _get(cache, calls)
    for change in ({"code": "v2"}, {"checksum": "d" * 64}, {"inputs": "j" * 64}):
        _get(cache, calls, {**PARTS, **change})
    assert len(calls) == 4


def test_the_code_version_follows_the_source_of_the_modules_it_names(tmp_path, monkeypatch):
    package = tmp_path / "kernels_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text("SCALE = 1\n")
    (package / "rules.yaml").write_text("a: 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_version("kernels_pkg")
    code_version.cache_clear()
    assert code_version("kernels_pkg") == before  # the same files, the same version
    for name, text in (("ops.py", "SCALE = 2\n"), ("rules.yaml", "a: 2\n")):
        (package / name).write_text(text)
        code_version.cache_clear()
        assert code_version("kernels_pkg") != before
        before = code_version("kernels_pkg")
    code_version.cache_clear()


def test_a_corrupt_entry_is_recomputed_with_a_note(tmp_path, caplog):
    cache, calls = ArtifactCache(tmp_path / "cache"), []
    _get(cache, calls)
    key = derived_key("test.figures", PARTS)
    value = cache.entry_dir(key) / VALUE_NAME
    value.write_text('{"max_rel": 9.0, "note": "tampered"}')  # the checksum no longer matches
    cache.release_pins()
    derived = DerivedCache(ArtifactCache(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING):
        got = derived.get_or_compute("test.figures", PARTS, _compute(calls), Figures, work="emulated", label="m")
    assert got == Figures(max_rel=0.25, note="emulated") and len(calls) == 2
    [outcome] = derived.take_tally()
    assert outcome.computed and outcome.note == f"the cached test.figures entry {key[:12]} was corrupt and is computed again"
    assert f"cache entry {key[:12]} is corrupt (checksum mismatch); rebuilding" in caplog.text
    assert _get(ArtifactCache(tmp_path / "cache"), calls) == got and len(calls) == 2  # stored again, whole


def test_a_stale_entry_that_no_longer_reads_as_its_kind_is_recomputed_with_a_note(tmp_path, caplog):
    cache, calls = ArtifactCache(tmp_path / "cache"), []
    DerivedCache(cache).get_or_compute("test.figures", PARTS, lambda: Other(tokens=[1, 2]), Other, work="emulated",
                                       label="m")  # what an older mlbench stored under the same key
    cache.release_pins()
    derived = DerivedCache(ArtifactCache(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING):
        got = derived.get_or_compute("test.figures", PARTS, _compute(calls), Figures, work="emulated", label="m")
    assert got.max_rel == 0.25 and len(calls) == 1
    [outcome] = derived.take_tally()
    key = derived_key("test.figures", PARTS)
    assert outcome.computed and outcome.note.startswith(f"the cached test.figures entry {key[:12]} was stale (")
    assert f"cached test.figures entry {key[:12]} is stale (" in caplog.text


def test_cache_verify_hashes_derived_entries_and_clear_removes_them_with_their_lock_files(tmp_path):
    from mlbench.cli.main import main

    cache, calls = ArtifactCache(tmp_path / "cache"), []
    _get(cache, calls)
    key = derived_key("test.figures", PARTS)
    (tmp_path / "cache" / LOCKS_DIR).mkdir(exist_ok=True)
    (tmp_path / "cache" / LOCKS_DIR / f"{'e' * 64}.lock").write_text("")  # left by a process that died
    cache.release_pins()
    os.environ["MLBENCH_CACHE_TRUST_STAT"] = "0"
    try:
        assert main(["cache", "verify", "--dir", str(tmp_path / "cache")]) == 0
        bytes_ = (cache.entry_dir(key) / VALUE_NAME).read_bytes()
        (cache.entry_dir(key) / VALUE_NAME).write_bytes(bytes_.replace(b"0.25", b"0.35"))
        assert main(["cache", "verify", "--dir", str(tmp_path / "cache")]) == 1
    finally:
        del os.environ["MLBENCH_CACHE_TRUST_STAT"]
    assert not cache.entry_dir(key).exists()  # evicted: the next run computes it again
    _get(cache, calls)
    cache.release_pins()
    assert main(["cache", "clear", "--dir", str(tmp_path / "cache")]) == 0
    assert not cache.entry_dir(key).exists() and not (tmp_path / "cache" / LOCKS_DIR).exists()


def test_a_failed_computation_publishes_nothing_and_the_next_computes_it_for_itself(tmp_path):
    cache, calls = ArtifactCache(tmp_path / "cache"), []

    def fails() -> Figures:
        raise RuntimeError("the interpreter met a bug")

    with pytest.raises(RuntimeError, match="the interpreter met a bug"):
        _get(cache, calls, compute=fails)
    assert _get(cache, calls).max_rel == 0.25 and len(calls) == 1


def _slow_worker(root: str, log: str, start: float, out: str) -> None:
    """One of two processes wanting the same entry at once: computes it slowly, counting computations."""
    def compute() -> Figures:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        return Figures(max_rel=0.5)

    while time.time() < start:
        time.sleep(0.005)
    derived = DerivedCache(ArtifactCache(Path(root)))
    value = derived.get_or_compute("test.figures", PARTS, compute, Figures, work="emulated", label="m")
    [outcome] = derived.take_tally()
    Path(out).write_text(f"{value.max_rel} {'computed' if outcome.computed else 'cached'}")


@pytest.mark.skipif(sys.platform == "win32", reason="no flock")
def test_two_processes_wanting_one_entry_at_once_compute_it_once_and_both_get_it(tmp_path):
    context = multiprocessing.get_context("spawn")
    start = time.time() + 3.0  # both past their imports, then at once
    log = tmp_path / "computations.log"
    outs = [tmp_path / f"out{i}" for i in range(2)]
    procs = [context.Process(target=_slow_worker, args=(str(tmp_path / "cache"), str(log), start, str(out)))
             for out in outs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert len(log.read_text().split()) == 1  # computed once
    assert sorted(out.read_text() for out in outs) == ["0.5 cached", "0.5 computed"]
