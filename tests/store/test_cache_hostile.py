"""The cache against a hostile folder (issue 24, findings 2–6): it removes only what is its own, `verify` sees
every broken entry, a FIFO never makes it wait, a folder without permissions is one line, and no symlink
leads it out of its folder.

About permissions: these tests often run as root (CI containers), and root reads a chmod-000 folder anyway.
So mlbench checks the mode bits itself (`mlbench.store.entry.entry_problem`): a folder its owner may not
read and search is broken for every user, root included, and that is tested here with real chmod. Where the
tests run as root and `setpriv` exists, one test also runs the cache as `nobody`, whom the permissions
really stop (the finding's six warnings and RuntimeError, reproduced on the old code).
"""

from __future__ import annotations

import builtins
import logging
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from mlbench.cli.main import main
from mlbench.errors import UserError
from mlbench.store.cache import ArtifactCache, format_size
from tests.conftest import ROOT
from tests.store.test_cache import INPUTS, FileBuilder, build_package, key_for


def built(cache: ArtifactCache, n: str, build=None):
    entry, _ = cache.get_or_build(key_for(n), {**INPUTS, "n": n}, build or FileBuilder(n.encode()))
    cache.release_pins()  # built, and no run measures it: a clear from elsewhere may take it
    return entry


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("mlbench")]


# -- 2: only what carries mlbench's marks is removed -------------------------------------------------


def a_folder_of_ones_own(tmp_path: Path) -> Path:
    """What `--dir X` or `cache: {dir: .}` may point at: a user's folder with an old tmp/ and a trash-* in it."""
    folder = tmp_path / "mine"
    (folder / "tmp" / "trash-photos").mkdir(parents=True)
    (folder / "tmp" / "notes.txt").write_text("keep me")
    (folder / "pipeline.yaml").write_text("mine")
    hours_ago = time.time() - 3 * 3600
    for path in (folder / "tmp" / "notes.txt", folder / "tmp" / "trash-photos"):
        os.utime(path, (hours_ago, hours_ago))
    return folder


NOT_A_CACHE = ("{folder}: not an mlbench cache (it has no CACHEDIR.TAG written by mlbench, and other files); mlbench "
               "removes only what is its own: give the cache an empty or new folder\n")


@pytest.mark.parametrize("command", [["clear"], ["prune", "--max-size", "0"], ["verify"], ["ls"]])
def test_a_folder_that_is_not_a_cache_is_refused_in_one_line_and_left_alone(tmp_path, capsys, command):
    folder = a_folder_of_ones_own(tmp_path)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    assert main(["cache", *command, "--dir", str(folder)]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", NOT_A_CACHE.format(folder=folder))
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before


@pytest.mark.torch
def test_a_run_whose_cache_is_a_folder_of_ones_own_is_refused_before_it_starts(write_pipeline, tiny_pipeline_text,
                                                                             tmp_path, capsys):
    folder = a_folder_of_ones_own(tmp_path)
    path = write_pipeline(tiny_pipeline_text + f"cache: {{dir: {folder}}}\n")
    assert main(["run", str(path), "-q"]) == 2
    assert capsys.readouterr().err == NOT_A_CACHE.format(folder=folder)
    assert (folder / "tmp" / "notes.txt").read_text() == "keep me" and (folder / "tmp" / "trash-photos").is_dir()
    assert not (tmp_path / "out" / "journal.jsonl").exists()


def test_in_a_cache_only_mlbench_names_are_removed_from_tmp(tmp_path, capsys):
    cache = ArtifactCache(tmp_path / "cache")
    entry = built(cache, "a")
    tmp = cache.tmp_root
    ours = [tmp / f"trash-{'1' * 32}", tmp / "build-0123456789ab-00000000.7-abc_12"]
    theirs = [tmp / "trash-photos", tmp / "notes.txt", tmp / "build-mine"]
    for path in ours + theirs:
        path.mkdir() if path.suffix != ".txt" else path.write_text("x")
        os.utime(path, (1.0, 1.0))
    assert main(["cache", "clear", "--dir", str(cache.root)]) == 0
    assert capsys.readouterr().out == f"removed 1 entries from {cache.root}\n"
    assert sorted(p.name for p in tmp.iterdir()) == sorted(p.name for p in theirs)
    assert not entry.path.exists() and (cache.root / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f5")


def test_a_cache_made_before_the_tag_is_recognised_by_its_layout_and_tagged(tmp_path):
    cache = ArtifactCache(tmp_path / "old")
    entry = built(cache, "old")
    (cache.root / "CACHEDIR.TAG").unlink()
    assert ArtifactCache(cache.root).clear() == 1 and not entry.path.exists()
    assert (cache.root / "CACHEDIR.TAG").is_file()


def test_a_run_that_finds_the_cache_tagged_between_its_two_looks_uses_it(tmp_path, monkeypatch):
    """Two processes starting on one new cache: the first tags it and makes `locks/` while the second, having
    found no tag, lists the folder. The second must take the tag it now sees, not call the cache foreign (it
    then went on without the entry lock and computed the entry a second time, a failure seen in CI)."""
    from mlbench.store import marker

    root = tmp_path / "cache"
    root.mkdir()
    (root / "locks").mkdir()
    (root / "CACHEDIR.TAG").write_text(marker.TAG_TEXT)
    looks = iter([False])  # the first look, before the other run's tag; the tag is there from then on
    real = marker.has_tag
    monkeypatch.setattr(marker, "has_tag", lambda folder: next(looks, real(folder)))
    assert marker.claim(root, create=True) is True
    monkeypatch.setattr(marker, "has_tag", lambda folder: False)  # no tag at either look: not ours
    with pytest.raises(UserError) as raised:
        marker.claim(root, create=True)
    assert str(raised.value).startswith(f"{root}: not an mlbench cache (it has no CACHEDIR.TAG written by mlbench")


# -- 3: verify sees every broken entry ---------------------------------------------------------------


def test_verify_reports_garbage_meta_a_missing_artifact_and_a_folder_without_permissions(tmp_path, capsys):
    cache = ArtifactCache(tmp_path)
    good, garbage, missing, locked = (built(cache, n) for n in ("good", "garbage", "missing", "locked"))
    package = built(cache, "package", build_package)
    (garbage.path / "meta.json").write_text("{not json")
    missing.artifact_path.unlink()
    shutil.rmtree(package.artifact_path)
    locked.path.chmod(0)
    assert main(["cache", "verify", "--dir", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    expected = {
        garbage.key: f"{garbage.key[:12]}  ?: meta.json is not valid JSON; evicted, the next run rebuilds it",
        missing.key: f"{missing.key[:12]}  onnx: artifact model.onnx missing; evicted, the next run rebuilds it",
        package.key: f"{package.key[:12]}  onnx: artifact model.mlpackage missing; evicted, the next run rebuilds it",
        locked.key: f"{locked.key[:12]}  ?: entry folder unreadable (mode 000); evicted, the next run rebuilds it",
    }
    assert lines[:-1] == [expected[k] for k in sorted(expected)]
    recorded = format_size(good.size_bytes + missing.size_bytes + package.size_bytes)  # meta.json's sizes, where readable
    assert lines[-1] == f"verified 5 entries ({recorded}) in {tmp_path}: 4 corrupt"
    assert [e.key for e in cache.entries()] == [good.key]
    assert not any(os.path.lexists(e.path) for e in (garbage, missing, locked, package))


# -- 4: a FIFO never makes it wait ---------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_fifo_in_place_of_meta_json_never_hangs_ls_verify_or_a_lookup(tmp_path, capsys, caplog):
    cache = ArtifactCache(tmp_path)
    entries = [built(cache, n) for n in ("ls", "lookup")]
    for entry in entries:
        (entry.path / "meta.json").unlink()
        os.mkfifo(entry.path / "meta.json")
    assert main(["cache", "ls", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"0 entries, 0 B in {tmp_path}\n"
    with caplog.at_level(logging.WARNING, logger="mlbench.store.cache"):
        again, hit = cache.get_or_build(entries[1].key, INPUTS, FileBuilder(b"rebuilt"))
    assert not hit and again.artifact_path.read_bytes() == b"rebuilt"
    assert warnings_of(caplog) == [f"cache entry {entries[1].key[:12]} is corrupt (meta.json is not a regular file); "
                                   "rebuilding"]
    assert main(["cache", "verify", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{entries[0].key[:12]}  ?: meta.json is not a regular file; evicted, the next run rebuilds it")


# -- 5: a folder without permissions is one line -------------------------------------------------------


def test_an_entry_folder_without_permissions_is_one_warning_and_a_rebuild(tmp_path, caplog):
    cache = ArtifactCache(tmp_path)
    entry = built(cache, "locked")
    entry.path.chmod(0)
    with caplog.at_level(logging.WARNING):
        again, hit = cache.get_or_build(entry.key, {**INPUTS, "n": "locked"}, FileBuilder(b"rebuilt"))
    assert warnings_of(caplog) == [f"cache entry {entry.key[:12]} is corrupt (entry folder unreadable (mode 000)); "
                                   "rebuilding"]
    assert not hit and again.artifact_path.read_bytes() == b"rebuilt"
    assert stat.S_IMODE(again.path.stat().st_mode) & 0o700 == 0o700
    assert cache.tmp_root.is_dir() and list(cache.tmp_root.iterdir()) == []


UNPRIVILEGED = 65534  # nobody


@pytest.fixture
def reachable_by_nobody():
    """A folder an unprivileged user may work in, removed after the test. Not under tmp_path: pytest keeps its
    base folder private (0700) and any pytest session that starts makes it private again, so a child running
    as another user could not reach tmp_path reliably; /tmp itself is open to every user."""
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a child as an unprivileged user")
    folder = Path(tempfile.mkdtemp(prefix="mlbench-unprivileged-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:  # what the test took away from its owner, given back to delete it
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o700)
        shutil.rmtree(folder)


UNPRIVILEGED_RUN = """
import logging, sys
from pathlib import Path
from mlbench.store.cache import ArtifactCache, BuildResult
from mlbench.store.hashing import artifact_key

logging.basicConfig(format="warning: %(message)s")

def build(tmp):
    (tmp / "model.onnx").write_bytes(sys.argv[2].encode())
    return BuildResult("model.onnx")

cache, key = ArtifactCache(Path(sys.argv[1])), artifact_key({"n": 1})
entry, hit = cache.get_or_build(key, {"n": 1}, build)
print(entry.key[:12], hit, entry.artifact_path.read_text())
if sys.argv[2] == "first":
    entry.path.chmod(0)
"""


def test_as_an_unprivileged_user_a_folder_without_permissions_is_one_warning_and_a_rebuild(reachable_by_nobody):
    """What the finding saw (six warnings, then RuntimeError), run as a user the permissions do stop."""
    import subprocess
    import sys

    root = reachable_by_nobody / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    outputs = []
    for payload in ("first", "again"):
        done = subprocess.run(["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups",
                               sys.executable, "-c", UNPRIVILEGED_RUN, str(root), payload],
                              capture_output=True, text=True, timeout=120, env=env, cwd=reachable_by_nobody)
        outputs.append((done.returncode, done.stdout, done.stderr))
    assert outputs[0][0] == 0, outputs[0]
    key = outputs[0][1].split()[0]
    assert outputs == [
        (0, f"{key} False first\n", ""),
        (0, f"{key} False again\n", f"warning: cache entry {key} is corrupt (entry folder unreadable (mode 000)); "
                                     "rebuilding\n"),
    ]


def test_a_shard_folder_without_permissions_is_given_back_and_the_entry_rebuilt_once(tmp_path, caplog):
    cache = ArtifactCache(tmp_path)
    entry = built(cache, "shard")
    entry.path.parent.chmod(0)
    with caplog.at_level(logging.WARNING):
        _, hit = cache.get_or_build(entry.key, INPUTS, FileBuilder(b"rebuilt"))
        assert not hit and cache.lookup(entry.key) is not None  # served from now on, not rebuilt on every run
    assert warnings_of(caplog) == [f"cache entry {entry.key[:12]} is corrupt (shard folder unreadable (mode 000)); "
                                   "rebuilding"]
    assert stat.S_IMODE(entry.path.parent.stat().st_mode) == 0o700


def test_a_meta_json_without_permissions_is_corrupt_too(tmp_path, caplog):
    cache = ArtifactCache(tmp_path)
    entry = built(cache, "meta")
    (entry.path / "meta.json").chmod(0)
    with caplog.at_level(logging.WARNING):
        assert cache.lookup(entry.key) is None
    assert warnings_of(caplog) == [f"cache entry {entry.key[:12]} is corrupt (meta.json unreadable (mode 000)); "
                                   "rebuilding"]


# -- 6: no symlink leads it out of its folder ---------------------------------------------------------


def moved_out(path: Path, outside: Path) -> Path:
    """Move ``path`` outside the cache and leave a symlink to it in its place; return where it went."""
    shutil.move(path, outside)
    path.symlink_to(outside, target_is_directory=outside.is_dir())
    return outside


@pytest.mark.parametrize("what, why", [
    ("artifact", "artifact model.onnx is a symlink"),
    ("meta", "meta.json is a symlink"),
    ("entry", "entry folder is a symlink"),
    ("shard", "shard folder is a symlink"),
])
def test_nothing_is_served_or_read_from_outside_the_cache_through_a_symlink(tmp_path, caplog, monkeypatch, what, why):
    cache = ArtifactCache(tmp_path / "cache")
    entry = built(cache, "x")
    place = {"artifact": entry.artifact_path, "meta": entry.path / "meta.json", "entry": entry.path,
             "shard": entry.path.parent}[what]
    outside = moved_out(place, tmp_path / "outside")  # the very bytes the entry had: following it would be a hit
    before = sorted((p.relative_to(outside), p.read_bytes() if p.is_file() else None)
                    for p in [outside, *(outside.rglob("*") if outside.is_dir() else [])])
    opened: list[str] = []  # where every path opened while the entry is looked up and rebuilt led

    def watching(real):
        def open_(path, *args, **kwargs):
            where = path if isinstance(path, int) else os.path.realpath(path)
            handle = real(path, *args, **kwargs)  # an open refused (O_NOFOLLOW) reads nothing
            opened.append(where)
            return handle
        return open_

    for module in (os, builtins):
        monkeypatch.setattr(module, "open", watching(module.open))
    with caplog.at_level(logging.WARNING):
        again, hit = cache.get_or_build(entry.key, INPUTS, FileBuilder(b"inside"))
    monkeypatch.undo()
    assert not hit and warnings_of(caplog) == [f"cache entry {entry.key[:12]} is corrupt ({why}); rebuilding"]
    assert again.artifact_path.read_bytes() == b"inside" and not again.path.is_symlink()
    assert not again.path.parent.is_symlink() and not again.artifact_path.is_symlink()
    after = sorted((p.relative_to(outside), p.read_bytes() if p.is_file() else None)
                   for p in [outside, *(outside.rglob("*") if outside.is_dir() else [])])
    assert after == before  # what the link pointed to is untouched
    resolved = [p for p in opened if not isinstance(p, int)]  # where each path led when it was opened
    assert resolved and not [p for p in resolved if p.startswith(str(outside))]


def test_verify_names_symlinks_and_removes_only_the_links(tmp_path, capsys):
    cache = ArtifactCache(tmp_path / "cache")
    artifact, folder = built(cache, "artifact"), built(cache, "folder")
    moved_out(artifact.artifact_path, tmp_path / "outside.onnx")
    moved_out(folder.path, tmp_path / "outside-entry")
    assert main(["cache", "verify", "--dir", str(cache.root)]) == 1
    lines = sorted(capsys.readouterr().out.splitlines()[:-1])
    assert lines == sorted([
        f"{artifact.key[:12]}  onnx: artifact model.onnx is a symlink; evicted, the next run rebuilds it",
        f"{folder.key[:12]}  ?: entry folder is a symlink; evicted, the next run rebuilds it",
    ])
    assert (tmp_path / "outside.onnx").read_bytes() == b"artifact"
    assert (tmp_path / "outside-entry" / "model.onnx").read_bytes() == b"folder"


def test_a_symlinked_stat_state_is_not_written_through(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    first = built(cache, "first")
    for name in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm"):
        (cache.root / name).unlink(missing_ok=True)
    target = tmp_path / "outside.sqlite"
    target.write_bytes(b"")  # an empty file: SQLite would make its database there
    (cache.root / "state.sqlite").symlink_to(target)
    again = ArtifactCache(cache.root)
    entry = built(again, "second")
    assert again.lookup(entry.key) is not None and again.lookup(first.key) is not None  # served, by hashing
    assert target.read_bytes() == b""
    assert not any((tmp_path / f"outside.sqlite{suffix}").exists() for suffix in ("-wal", "-shm", "-journal"))


def test_a_symlinked_tmp_is_never_cleaned_or_built_in(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    built(cache, "first")
    shutil.rmtree(cache.tmp_root)
    outside = tmp_path / "outside"
    (outside / f"trash-{'2' * 32}").mkdir(parents=True)  # named as mlbench names its own leftovers
    cache.tmp_root.symlink_to(outside, target_is_directory=True)
    cache.clean_stale_builds()  # as every run starts
    seen = []
    cache.get_or_build(key_for("second"), INPUTS, lambda tmp: seen.append(tmp) or FileBuilder()(tmp))
    assert (outside / f"trash-{'2' * 32}").is_dir() and sorted(p.name for p in outside.iterdir()) == [f"trash-{'2' * 32}"]
    assert not cache.tmp_root.is_symlink() and seen[0].parent == cache.tmp_root
