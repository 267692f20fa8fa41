"""Cold loads: the artifact's files dropped from the page cache where the OS allows it, and the record saying
which caches were cleared and which could not be."""

from __future__ import annotations

import os

import pytest

from mlbench import cold_start


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise is Linux's")
def test_linux_drops_every_file_of_the_artifact_from_the_page_cache(tmp_path, monkeypatch):
    folder = tmp_path / "model.mlpackage"
    (folder / "Data").mkdir(parents=True)
    (folder / "Data" / "weights.bin").write_bytes(b"w" * 4096)
    (folder / "Manifest.json").write_text("{}")
    advised: list[tuple[str, int]] = []
    real = os.posix_fadvise

    def spy(fd, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    facts = cold_start.evict_files([folder], "the runtime's registry")
    assert sorted(advised) == [(str(folder / "Data" / "weights.bin"), os.POSIX_FADV_DONTNEED),
                               (str(folder / "Manifest.json"), os.POSIX_FADV_DONTNEED)]
    assert facts == {"cleared": ["the artifact's pages in the OS page cache (posix_fadvise DONTNEED on each file)"],
                     "not_cleared": ["the runtime's registry"]}


def test_an_os_without_per_file_eviction_says_the_page_cache_stayed(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    monkeypatch.setattr("sys.platform", "darwin")
    (tmp_path / "m.onnx").write_bytes(b"x")
    facts = cold_start.evict_files([tmp_path / "m.onnx"], "the runtime's registry")
    assert facts["cleared"] == []
    assert facts["not_cleared"] == ["the artifact's pages in the OS file cache (macOS has no per-file eviction: "
                                    "posix_fadvise is Linux's; purging every cache needs root)", "the runtime's registry"]


def test_an_unreadable_file_is_named_among_what_stayed(tmp_path):
    facts = cold_start.evict_files([tmp_path / "gone.pte"], "registry")
    assert facts["cleared"] == [] and facts["not_cleared"][0].startswith("some of the artifact's pages in the page "
                                                                         "cache (gone.pte: ")


def test_cold_and_warm_metrics_and_a_missing_second_load():
    both = cold_start.load_metrics(30.0, 4.0)
    assert (both["load_time.cold"].value, both["load_time.warm"].value) == (30.0, 4.0)
    assert both["load_time.cold"].source == "measured"
    alone = cold_start.load_metrics(30.0, None, "the device disconnected")
    assert alone["load_time.warm"].value is None and alone["load_time.warm"].reason == "the device disconnected"


COLD_PIPELINE = """\
version: 1
name: cold
models:
  - name: tiny_cnn
    source: {root}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 64, 64]}}]
targets:
  - backend: onnxruntime
  - backend: executorch
    delegate: xnnpack
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json]}}
history: {{enabled: false}}
"""


@pytest.mark.torch
@pytest.mark.slow  # an ONNX and an ExecuTorch export
def test_onnxruntime_session_and_executorch_program_load_cold_before_warm(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("executorch.runtime", reason="the executorch extra is not installed")
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline
    from tests.conftest import ROOT

    path = tmp_path / "cold.yaml"
    path.write_text(COLD_PIPELINE.format(root=ROOT), encoding="utf-8")
    pipeline = load_pipeline(path)
    records = {r.backend: r for r in run(pipeline).records}
    assert set(records) == {"onnxruntime", "executorch"}
    for _ in range(2):  # one load each is one sample: a neighbour's burst can land on the warm one
        reversed_ = [b for b, r in records.items()
                     if r.metrics["load_time.cold"].value < r.metrics["load_time.warm"].value]
        if not reversed_:
            break
        records.update({r.backend: r for r in run(pipeline).records if r.backend in reversed_})
    for backend, record in records.items():
        assert record.status == "ok", record.error
        cold, warm = record.metrics["load_time.cold"], record.metrics["load_time.warm"]
        assert cold.source == warm.source == "measured"
        assert cold.value >= warm.value, (backend, cold.value, warm.value)
        assert record.metrics["load_time"].value == cold.value  # the first load is the cold one, as before
        caches = record.details["load_caches"]
        if hasattr(os, "posix_fadvise"):
            assert caches["cleared"] == ["the artifact's pages in the OS page cache (posix_fadvise DONTNEED on each "
                                         "file)"]
        runtime = {"onnxruntime": "ONNX Runtime's process-wide environment", "executorch": "ExecuTorch's runtime"}
        assert caches["not_cleared"][-1].startswith(runtime[backend])
