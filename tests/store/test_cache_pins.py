"""An entry a run is using is pinned: a real `mlbench cache clear` (or prune) in another process skips it and
says so; once the run lets go, it goes. A pinned entry evicted anyway (no locks) is a miss, rebuilt."""

from __future__ import annotations

import subprocess
import sys

from mlbench.store.cache import ArtifactCache
from mlbench.store.entry import BuildResult
from tests.conftest import ROOT

KEY_A, KEY_B = "a" * 64, "b" * 64


def _build(name: str):
    def build(folder):
        (folder / name).write_text("model bytes")
        return BuildResult(artifact_name=name)
    return build


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "mlbench.cli", "cache", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cache_clear_and_prune_skip_the_entries_a_run_is_using(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    used, _ = cache.get_or_build(KEY_A, {"k": 1}, _build("model.onnx"))
    cache.release_pins()
    other, _ = cache.get_or_build(KEY_B, {"k": 2}, _build("model.onnx"))
    cache.release_pins()
    assert cache.lookup(KEY_A) is not None  # the run found its entry: pinned while it measures

    out = _cli("prune", "--max-size", "0", "--dir", str(tmp_path / "cache"))
    assert out.startswith("removed 1 entries (") and out.rstrip().endswith("; kept 1 entry a run is using")
    assert used.artifact_path.read_text() == "model bytes"
    out = _cli("clear", "--dir", str(tmp_path / "cache"))
    assert out == f"removed 0 entries from {tmp_path / 'cache'}; kept 1 entry a run is using\n"
    assert cache.lookup(KEY_A) is not None and not other.path.exists()

    cache.release_pins()  # the run is done with it
    assert _cli("clear", "--dir", str(tmp_path / "cache")) == f"removed 1 entries from {tmp_path / 'cache'}\n"
    assert not used.path.exists()


def test_a_clear_in_this_process_is_refused_by_its_own_pin_too(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    cache.get_or_build(KEY_A, {"k": 1}, _build("model.onnx"))
    assert ArtifactCache(tmp_path / "cache").clear() == 0
    cache.release_pins()
    assert ArtifactCache(tmp_path / "cache").clear() == 1


def test_a_clear_just_after_an_entry_is_published_keeps_it(tmp_path, monkeypatch):
    """The entry is pinned before its build folder is renamed into place: a clear in another process right after
    the rename, before the run looks at the artifact again, keeps it (it took it once: the run's next stat of
    model.onnx failed with FileNotFoundError and the variant failed)."""
    import mlbench.store.cache as cache_module

    real_signature, said = cache_module.signature, []

    def clear_first(path):
        said.append(_cli("clear", "--dir", str(tmp_path / "cache")))
        return real_signature(path)

    monkeypatch.setattr(cache_module, "signature", clear_first)
    cache = ArtifactCache(tmp_path / "cache")
    entry, hit = cache.get_or_build(KEY_A, {"k": 1}, _build("model.onnx"))
    assert not hit and entry.artifact_path.read_text() == "model bytes"
    assert said == [f"removed 0 entries from {tmp_path / 'cache'}; kept 1 entry a run is using\n"]
    cache.release_pins()
    monkeypatch.setattr(cache_module, "signature", real_signature)
    assert _cli("clear", "--dir", str(tmp_path / "cache")) == f"removed 1 entries from {tmp_path / 'cache'}\n"
