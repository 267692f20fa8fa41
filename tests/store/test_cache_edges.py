"""The artifact cache and its hashing at their edges: every reason an entry counts as corrupt, meta.json's
exact form, stray files in the cache folder, leftovers of dead processes, renames that keep failing, and
one-line errors. Each case kills a mutant that tests/store/test_cache.py and tests/store/test_hashing.py let through
(benchmarks/mutation.py --module cache)."""

from __future__ import annotations

import enum
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlbench.errors import UserError
from mlbench.store import cache as cache_module
from mlbench.store.cache import STALE_TMP_SECONDS, ArtifactCache, BuildResult
from mlbench.store.hashing import artifact_key, jsonable, sha256_path, sha256_tree
from tests.store.test_cache import INPUTS, FileBuilder, build_package, key_for


def built(cache: ArtifactCache, n: int | str, payload: bytes = b"onnx-bytes"):
    entry, _ = cache.get_or_build(key_for(n), {**INPUTS, "n": n}, FileBuilder(payload))
    return entry


@pytest.mark.parametrize("meta_of, why", [
    (lambda meta: [meta], "meta.json is not an object"),
    (lambda meta: {**meta, "key": "0" * 64}, "meta.json is for another key"),
    (lambda meta: {**meta, "artifact": "../model.onnx"}, "meta.json names an invalid artifact"),
    (lambda meta: {k: v for k, v in meta.items() if k != "checksum"}, "meta.json lacks checksum"),
    (lambda meta: {**meta, "size_bytes": "10"}, "meta.json lacks size_bytes"),
], ids=["list", "other-key", "escaping-name", "no-checksum", "size-as-text"])
def test_each_reason_an_entry_is_corrupt_is_named(tmp_path, caplog, meta_of, why):
    cache = ArtifactCache(tmp_path)
    entry = built(cache, "c")
    (entry.path / "meta.json").write_text(json.dumps(meta_of(entry.meta)))
    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        assert cache.lookup(entry.key) is None
    assert [r.getMessage() for r in caplog.records] == [f"cache entry {entry.key[:12]} is corrupt ({why}); rebuilding"]
    assert not entry.path.exists()


def test_unreadable_meta_and_artifact_say_so(tmp_path, caplog):
    cache = ArtifactCache(tmp_path)
    entry = built(cache, "u")
    (entry.path / "meta.json").write_bytes(b'{"key": "\xff"}')
    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        assert cache.lookup(entry.key) is None
    assert caplog.records[0].getMessage().startswith(f"cache entry {entry.key[:12]} is corrupt (meta.json unreadable: "
                                                     "'utf-8' codec can't decode byte 0xff")
    caplog.clear()
    key = key_for("pkg")
    entry, _ = cache.get_or_build(key, INPUTS, build_package)
    (entry.artifact_path / "link").symlink_to(entry.artifact_path / "Manifest.json")
    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        assert cache.lookup(key) is None
    assert caplog.records[0].getMessage() == (
        f"cache entry {key[:12]} is corrupt (artifact unreadable: {entry.artifact_path}: contains a symlink (link); "
        "mlbench hashes real files only); rebuilding")


def test_meta_json_is_indented_sorted_utf8_and_times_the_build(tmp_path, monkeypatch):
    clock = iter([100.0, 100.12345])
    monkeypatch.setattr(cache_module.time, "perf_counter", lambda: next(clock))

    def build(tmp: Path) -> BuildResult:
        (tmp / "model.onnx").write_bytes(b"x")
        return BuildResult("model.onnx", {"label": "résumé/float16", "zeta": 1, "alpha": [1, 2]})

    entry, _ = ArtifactCache(tmp_path).get_or_build(key_for("m"), {**INPUTS, "n": "m"}, build)
    assert entry.meta["build_seconds"] == 0.123
    text = (entry.path / "meta.json").read_text(encoding="utf-8")
    assert text == json.dumps(entry.meta, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert '"label": "résumé/float16"' in text and text.index('"alpha"') < text.index('"zeta"')


def test_a_not_a_number_in_the_builders_facts_is_refused(tmp_path):
    def build(tmp: Path) -> BuildResult:
        (tmp / "model.onnx").write_bytes(b"x")
        return BuildResult("model.onnx", {"ratio": float("nan")})

    with pytest.raises(ValueError) as info:
        ArtifactCache(tmp_path).get_or_build(key_for("nan"), INPUTS, build)
    assert str(info.value) == "canonical_json: non-finite float nan at $.ratio"
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b", "meta.json"])
def test_artifact_names_that_could_escape_the_entry_are_refused(tmp_path, name):
    with pytest.raises(ValueError) as info:
        ArtifactCache(tmp_path).get_or_build(key_for("n"), INPUTS, lambda tmp: BuildResult(name))
    assert str(info.value) == f"builder returned an invalid artifact name {name!r}"


def test_a_builder_that_returns_something_else_is_named(tmp_path):
    with pytest.raises(TypeError) as info:
        ArtifactCache(tmp_path).get_or_build(key_for("t"), INPUTS, lambda tmp: "model.onnx")
    assert str(info.value) == "builder returned str, not BuildResult"


def test_non_ascii_facts_are_written_and_read_back_as_utf8_under_an_ascii_locale(tmp_path):
    """meta.json keeps labels as UTF-8 text; a machine whose locale is ASCII (LC_ALL=C without Python's
    UTF-8 mode) must still read its own cache rather than call every entry corrupt."""
    code = textwrap.dedent(f"""
        import locale
        from pathlib import Path
        from mlbench.store.cache import ArtifactCache, BuildResult
        from mlbench.store.hashing import artifact_key

        def build(tmp):
            (tmp / "model.onnx").write_bytes(b"x")
            return BuildResult("model.onnx", {{"label": "r\\u00e9sum\\u00e9/float16"}})

        cache, key = ArtifactCache(Path({str(tmp_path / "there")!r})), artifact_key({{"n": 1}})
        cache.get_or_build(key, {{"n": 1}}, build)
        entry = cache.lookup(key)
        print(locale.getpreferredencoding(False), entry is not None and entry.meta["label"] == "r\\u00e9sum\\u00e9/float16")
    """)
    def build(tmp: Path) -> BuildResult:
        (tmp / "model.onnx").write_bytes(b"x")
        return BuildResult("model.onnx", {"label": "résumé/float16"})

    here = ArtifactCache(tmp_path / "here")  # this process (UTF-8 locale) round-trips the label too
    entry, _ = here.get_or_build(key_for("label"), INPUTS, build)
    assert "résumé" in (entry.path / "meta.json").read_bytes().decode("utf-8")
    assert here.lookup(entry.key).meta["label"] == "résumé/float16"
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, encoding="utf-8")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "ANSI_X3.4-1968 True\n"


def test_the_build_runs_in_a_named_folder_under_the_caches_tmp_even_before_the_cache_exists(tmp_path):
    root = tmp_path / "not" / "yet"
    seen = []

    def build(tmp: Path) -> BuildResult:
        seen.append(tmp)
        (tmp / "model.onnx").write_bytes(b"x")
        return BuildResult("model.onnx")

    key = key_for("folder")
    entry, hit = ArtifactCache(root).get_or_build(key, INPUTS, build)
    assert (entry.key, hit) == (key, False)
    assert seen[0].parent == root / "tmp" and seen[0].name.startswith(f"build-{key[:12]}-")
    assert ArtifactCache(root).lookup(key).key == key


# -- the cache folder holds other things too -----------------------------------------------------


def test_stray_files_and_folders_in_the_cache_are_not_entries(tmp_path):
    import shutil

    cache = ArtifactCache(tmp_path)
    entry = built(cache, "s")
    (tmp_path / "ab").write_text("a file named like a shard")
    (tmp_path / "zz").mkdir()
    shutil.copytree(entry.path, tmp_path / "zz" / entry.key)       # a whole entry under a folder that is no shard
    other_shard = "00" if entry.key[:2] != "00" else "01"
    (tmp_path / other_shard).mkdir()
    shutil.copytree(entry.path, tmp_path / other_shard / entry.key)  # a whole entry in the wrong shard
    (tmp_path / entry.key[:2] / "notakey").mkdir()                 # a folder that is no key
    (tmp_path / entry.key[:2] / ("f" * 64)).write_text("a file named like a key")
    assert [e.key for e in cache.entries()] == [entry.key]
    assert cache.clear() == 2  # the entry, and the key folder in the wrong shard: clear removes broken entries too
    assert (tmp_path / entry.key[:2] / "notakey").is_dir() and (tmp_path / "ab").is_file()
    assert (tmp_path / "zz" / entry.key).is_dir()


def test_a_corrupt_entry_does_not_hide_the_entries_after_it(tmp_path):
    cache = ArtifactCache(tmp_path)
    good = [built(cache, n) for n in range(12)]
    for entry in good[::2]:
        (entry.path / "meta.json").write_text("{")
    assert [e.key for e in cache.entries()] == sorted(e.key for e in good[1::2])


def test_remove_evicts_one_entry_and_says_whether_there_was_one(tmp_path):
    cache = ArtifactCache(tmp_path)
    entry = built(cache, "r")
    assert cache.remove(entry.key) is True and not entry.path.exists() and cache.lookup(entry.key) is None
    assert cache.remove(entry.key) is False


def test_prune_keeps_evicting_until_the_total_fits(tmp_path):
    cache = ArtifactCache(tmp_path)
    entries = [built(cache, n, b"x" * 10) for n in range(3)]
    for age, entry in enumerate(entries):
        os.utime(entry.path / "meta.json", (1000 + age, 1000 + age))
    evicted = cache.prune(15)
    assert [e.key for e in evicted] == [entries[0].key, entries[1].key]  # oldest first, until 10 <= 15
    assert [e.key for e in cache.entries()] == [entries[2].key]
    with pytest.raises(ValueError) as info:
        cache.prune(-1)
    assert str(info.value) == "max_bytes must be >= 0"


def test_five_matches_are_all_shown_and_a_sixth_adds_an_ellipsis(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    entries = [built(cache, n) for n in range(6)]
    fake_keys = [f"abcd{i:060x}" for i in range(6)]
    fakes = [cache_module.CacheEntry(key=k, path=e.path, meta=e.meta) for k, e in zip(fake_keys, entries)]
    monkeypatch.setattr(ArtifactCache, "entries", lambda self: fakes[:5])
    with pytest.raises(UserError) as info:
        cache.find("abcd")
    shown = ", ".join(k[:12] for k in fake_keys[:5])
    assert str(info.value) == f"cache key prefix 'abcd' is ambiguous: 5 entries match ({shown})"
    monkeypatch.setattr(ArtifactCache, "entries", lambda self: fakes)
    with pytest.raises(UserError) as info:
        cache.find("ABCD")
    assert str(info.value) == f"cache key prefix 'ABCD' is ambiguous: 6 entries match ({shown}, ...)"


# -- leftovers of dead processes -----------------------------------------------------------------


def other_build(name: str) -> str:
    """A build folder's name as mlbench gives it, of a process on another machine (judged by age alone)."""
    return f"build-0123456789ab-00000000.1-{name}"


def test_a_build_folder_is_stale_only_after_an_hour_without_a_write_anywhere_inside(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    cache.claim()
    tmp = tmp_path / "tmp"
    old, busy, edge = (tmp / other_build(n) for n in ("old", "busy", "edge"))
    (old / "model.mlpackage").mkdir(parents=True)
    (old / "model.mlpackage" / "weight.bin").write_bytes(b"w")
    (busy / "model.mlpackage").mkdir(parents=True)
    (busy / "model.mlpackage" / "weight.bin").write_bytes(b"w")
    edge.mkdir()
    (tmp / other_build("file")).write_bytes(b"f")
    now = 1_000_000_000.0
    for path in [old, *old.rglob("*"), busy, busy / "model.mlpackage", tmp / other_build("file")]:
        os.utime(path, (now - STALE_TMP_SECONDS - 1, now - STALE_TMP_SECONDS - 1))
    os.utime(busy / "model.mlpackage" / "weight.bin", (now - 10, now - 10))  # still being written
    os.utime(edge, (now - STALE_TMP_SECONDS, now - STALE_TMP_SECONDS))       # exactly an hour
    monkeypatch.setattr(cache_module.time, "time", lambda: now)
    cache.prune(10**12)
    assert sorted(p.name for p in tmp.iterdir()) == [busy.name, edge.name]


def test_a_stale_link_in_tmp_is_removed_without_touching_what_it_points_to(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path / "cache")
    cache.claim()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    for path in (target / "keep.txt", target):
        os.utime(path, (1.0, 1.0))
    (tmp_path / "cache" / "tmp").mkdir(parents=True)
    link = tmp_path / "cache" / "tmp" / other_build("link")
    link.symlink_to(target, target_is_directory=True)
    os.utime(link, (1.0, 1.0), follow_symlinks=False)
    cache.clear()
    assert not os.path.lexists(link) and (target / "keep.txt").read_text() == "keep"


def test_a_tmp_entry_that_vanishes_while_cleaning_does_not_stop_the_rest(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    cache.claim()
    for name in map(other_build, ("1", "2", "3")):
        (tmp_path / "tmp" / name).mkdir(parents=True)
        os.utime(tmp_path / "tmp" / name, (1.0, 1.0))
    real, seen = cache_module.tree_mtime, []

    def vanishing(path: Path) -> float:
        if not seen:  # the first one the cleaner looks at is gone by the time it looks
            seen.append(path)
            raise FileNotFoundError(path)
        return real(path)

    monkeypatch.setattr(cache_module, "tree_mtime", vanishing)
    cache.clear()
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == [seen[0].name]


# -- renames that fail -----------------------------------------------------------------------------


def test_a_shard_folder_pruned_during_the_rename_is_made_again(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    key = key_for("shard")
    real_rename, calls = os.rename, []

    def rename(src, dst):
        calls.append(dst)
        if len(calls) == 1 and Path(dst).parent.name == key[:2]:
            Path(dst).parent.rmdir()  # a concurrent prune removed the empty shard
            raise FileNotFoundError(dst)
        return real_rename(src, dst)

    monkeypatch.setattr(cache_module.os, "rename", rename)
    entry, hit = cache.get_or_build(key, INPUTS, FileBuilder())
    assert (entry.key, hit, len(calls)) == (key, False, 2)
    assert cache.lookup(key) is not None


def test_a_rename_that_keeps_losing_to_corrupt_entries_gives_up_after_five_tries(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    key = key_for("lost")
    calls = []

    def rename(src, dst):
        if Path(dst).name == key:
            calls.append(dst)
            Path(dst).mkdir(parents=True, exist_ok=True)  # "another process" publishes a broken entry first
            raise OSError(39, "Directory not empty")
        return os.replace(src, dst)

    monkeypatch.setattr(cache_module.os, "rename", rename)
    with pytest.raises(RuntimeError) as info:
        cache.get_or_build(key, INPUTS, FileBuilder())
    assert str(info.value) == f"cache entry {key[:12]}: could not move the build into place"
    assert len(calls) == 5
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == []  # our build folder is gone too


def test_a_rename_that_fails_for_another_reason_is_raised(tmp_path, monkeypatch):
    def rename(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(cache_module.os, "rename", rename)
    with pytest.raises(PermissionError):
        ArtifactCache(tmp_path).get_or_build(key_for("perm"), INPUTS, FileBuilder())
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == []


# -- hashing -----------------------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    ODD = object()


class Name(str):
    pass


class Count(int):
    pass


def test_subclasses_of_str_and_int_become_plain_values_and_enums_their_values():
    value = jsonable({"n": Name("x"), "c": Count(3), "e": Colour.RED})
    assert value == {"n": "x", "c": 3, "e": "red"}
    assert [type(v) for v in value.values()] == [str, int, str]
    with pytest.raises(TypeError) as info:
        jsonable({"k": [Colour.ODD]})
    assert str(info.value) == "canonical_json: unsupported type object at $.k[0]"


def test_artifact_key_errors_name_the_problem():
    with pytest.raises(TypeError) as info:
        artifact_key([1])  # type: ignore[arg-type]
    assert str(info.value) == "artifact_key: inputs must be a dict, not list"
    with pytest.raises(ValueError) as info:
        artifact_key({"schema": 2})
    assert str(info.value) == "artifact_key: 'schema' is reserved; it is added by artifact_key"


def test_special_files_are_refused_with_their_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UserError) as info:
        sha256_path(fifo)
    assert str(info.value) == f"{fifo}: is neither a file nor a directory"
    package = tmp_path / "model.mlpackage"
    package.mkdir()
    os.mkfifo(package / "pipe")
    with pytest.raises(UserError) as info:
        sha256_path(package)
    assert str(info.value) == f"{package}: contains a special file (pipe), not a regular file"
    with pytest.raises(FileNotFoundError) as info:
        sha256_path(tmp_path / "missing")
    assert str(info.value) == f"sha256_path: {tmp_path / 'missing'} does not exist"
    with pytest.raises(NotADirectoryError) as info:
        sha256_tree(tmp_path / "missing")
    assert str(info.value) == f"sha256_tree: {tmp_path / 'missing'} is not a directory"



# -- deletes that fail ---------------------------------------------------------------------------------


class FailingRmtree:
    """shutil.rmtree on a disk where deleting fails (permissions, another process in the way): nothing
    is deleted, and the error is raised unless the caller asked to ignore errors."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path, ignore_errors: bool = False, **_: object) -> None:
        self.paths.append(Path(path))
        if not ignore_errors:
            raise PermissionError(13, "Permission denied", str(path))


def test_a_delete_that_fails_never_breaks_a_lookup_a_failed_build_or_a_cleanup(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    corrupt = built(cache, "del")
    (corrupt.path / "meta.json").write_text("{")
    rmtree = FailingRmtree()
    monkeypatch.setattr(cache_module.shutil, "rmtree", rmtree)
    assert cache.lookup(corrupt.key) is None and not corrupt.path.exists()  # taken out of service all the same

    def boom(tmp: Path) -> BuildResult:
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError) as info:
        cache.get_or_build(key_for("boom"), INPUTS, boom)
    assert str(info.value) == "conversion failed"  # the build's own error, not the failed cleanup's
    cache.clear()
    # the trash, the failed build's folder, then the trash again (the build folder is too fresh to be stale)
    assert [p.parent.name for p in rmtree.paths] == ["tmp", "tmp", "tmp"]


def test_a_lost_race_adopts_the_winner_even_when_its_own_folder_cannot_be_deleted(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    key = key_for("race")

    def loser(tmp: Path) -> BuildResult:
        cache.get_or_build(key, INPUTS, FileBuilder(b"winner"))
        (tmp / "model.onnx").write_bytes(b"loser")
        return BuildResult("model.onnx")

    monkeypatch.setattr(cache_module.shutil, "rmtree", FailingRmtree())
    entry, hit = cache.get_or_build(key, INPUTS, loser)
    assert not hit and entry.artifact_path.read_bytes() == b"winner"


def test_an_entry_that_cannot_be_moved_aside_is_deleted_in_place(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    entry, stuck = built(cache, "inplace"), built(cache, "stuck")
    for broken in (entry, stuck):
        (broken.path / "meta.json").write_text("{")

    def rename(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(cache_module.os, "rename", rename)
    assert cache.lookup(entry.key) is None and not entry.path.exists()
    monkeypatch.setattr(cache_module.shutil, "rmtree", FailingRmtree())  # moving and deleting both fail: one line,
    with pytest.raises(UserError) as info:                               # not a rebuild that cannot be published
        cache.lookup(stuck.key)
    assert str(info.value) == (f"{stuck.path}: cache entry {stuck.key[:12]} is corrupt (meta.json is not valid JSON) "
                               "and cannot be removed: fix its permissions or delete it")


def test_a_stale_file_that_vanishes_before_it_is_deleted_is_no_error(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    cache.claim()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / other_build("leftover")).write_bytes(b"x")

    def gone_after_looking(path: Path) -> float:
        path.unlink()  # another process cleans it up between the look and the delete
        return 1.0

    monkeypatch.setattr(cache_module, "tree_mtime", gone_after_looking)
    cache.prune(10**9)
    assert list((tmp_path / "tmp").iterdir()) == []


# -- the stat state beside the entries ---------------------------------------------------------------


@pytest.fixture
def hashes(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = cache_module.sha256_path

    def counting(path) -> str:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(cache_module, "sha256_path", counting)
    return seen


def test_verify_checks_every_entry_reports_each_corrupt_one_and_trusts_the_good_ones_again(tmp_path, hashes):
    from mlbench.store.state import STATE_NAME

    cache = ArtifactCache(tmp_path)
    entries = [built(cache, n, f"payload {n}".encode()) for n in range(4)]
    for broken in entries[:2]:
        broken.artifact_path.write_bytes(b"flipped")
    hashes.clear()
    results = {entry.key: why for entry, why in cache.verify()}
    assert results == {e.key: ("checksum mismatch" if e in entries[:2] else None) for e in entries}
    assert sorted(p.parent.name for p in hashes) == sorted(e.key for e in entries)
    hashes.clear()
    assert all(ArtifactCache(tmp_path).lookup(e.key) is not None for e in entries[2:])
    assert hashes == []  # what verify found good is trusted by the next run without hashing
    assert (tmp_path / STATE_NAME).exists()


def test_the_stat_state_stays_while_entries_remain_and_forgets_the_evicted(tmp_path):
    from mlbench.store.state import STATE_NAME, signature

    cache = ArtifactCache(tmp_path)
    kept, dropped = built(cache, "kept", b"x" * 10), built(cache, "dropped", b"y" * 10)
    os.utime(dropped.path / "meta.json", (1000, 1000))  # the least recently used
    sig = signature(dropped.artifact_path)
    assert cache.state.trusted(dropped.key, sig, dropped.meta["checksum"])
    cache.prune(15)
    assert [e.key for e in cache.entries()] == [kept.key]
    assert not cache.state.trusted(dropped.key, sig, dropped.meta["checksum"])  # evicted: forgotten
    assert (tmp_path / STATE_NAME).exists()  # an entry is left to describe
    cache.prune(0)
    assert not (tmp_path / STATE_NAME).exists()


def test_a_build_folder_names_its_machine_and_process_so_a_dead_ones_leftovers_can_go(tmp_path):
    from mlbench.store.stale import host_tag

    seen = []

    def build(tmp: Path) -> BuildResult:
        seen.append(tmp.name)
        (tmp / "model.onnx").write_bytes(b"x")
        return BuildResult("model.onnx")

    key = key_for("owner")
    ArtifactCache(tmp_path).get_or_build(key, INPUTS, build)
    assert seen[0].startswith(f"build-{key[:12]}-{host_tag()}.{os.getpid()}-")
