"""A localization during a run is a cached derived figure (`localize_hook.cached_localization`): a warm rerun
finds it (the work summary says `0 localized (1 cached)`, the section says cached and keeps the time it took
when computed), another input set or another artifact computes it again, and so does a corrupt entry (with a
note). Real ONNX Runtime runs of a two-layer model whose float16 variant fails a tight tolerance."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from mlbench.localization import ErrorLocalization
from mlbench.run import run
from mlbench.store.derived import DERIVED_DETAILS, VALUE_NAME
from mlbench.validate import load_pipeline

pytestmark = pytest.mark.torch

MODELS = """\
from torch import nn


class Two(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, 8)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())
"""

PIPELINE = """\
version: 1
name: loc
models:
  - name: two
    source: models.py:Two
    kwargs: {{width: {width}}}
    inputs: [{{name: x, shape: [2, 16]}}]
targets:
  - backend: onnxruntime
    precision: [float16]
latency: {{warmup: 0, repeats: 1, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: {samples}, tolerance: {{float16: 1.0e-9}}}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json]}}
history: {{enabled: false}}
"""
KIND = "onnxruntime.localization"


def _run(folder, *, samples=2, width=32):
    (folder / "models.py").write_text(MODELS, encoding="utf-8")
    path = folder / "p.yaml"
    path.write_text(PIPELINE.format(samples=samples, width=width), encoding="utf-8")
    report = run(load_pipeline(path))
    [record] = report.records
    assert record.status == "failed", record.error  # so it is localized
    assert "localization" in record.details, record.details.get("localization_error")
    return report, record, ErrorLocalization.model_validate(record.details["localization"])


def _use(record):
    [use] = [u for u in record.details[DERIVED_DETAILS] if u["kind"] == KIND]
    return use


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loc")
    return folder, _run(folder), _run(folder)


def test_a_warm_rerun_finds_the_localization_and_says_it_was_cached(cold_and_warm):
    from mlbench.report.localization import localization_section, render_localization

    _, (cold, cold_record, computed), (warm, warm_record, found) = cold_and_warm
    assert cold.work["localized"] == {"computed": 1, "cached": 0}
    assert warm.work["localized"] == {"computed": 0, "cached": 1}
    assert (_use(cold_record)["outcome"], _use(warm_record)["outcome"]) == ("computed", "cached")
    assert not computed.cached and found.cached
    assert found.seconds == computed.seconds > 0  # the time it took when computed, never a new one
    assert found.model_dump(exclude={"cached"}) == computed.model_dump(exclude={"cached"})
    assert f"took {computed.seconds:.1f} s when computed (cached)" in "\n".join(render_localization(found))
    assert f"({computed.seconds:.1f} s, cached)</summary>" in "\n".join(localization_section([warm_record]))
    assert f"took {computed.seconds:.1f} s. Output SNR" in "\n".join(render_localization(computed))


def test_explain_finds_it_in_the_cache_without_localizing_unless_fresh(cold_and_warm, monkeypatch):
    import json

    import mlbench.backends.onnxruntime.localize as localize
    from mlbench.run.explain import explain

    def refuse(*args):
        raise AssertionError("localized again")

    folder, _, (_, record, warm) = cold_and_warm
    report = json.loads((folder / "out" / "report.json").read_text())
    del report["records"][0]["details"]["localization"]  # so explain goes to the backend (in this process)
    (folder / "bare.json").write_text(json.dumps(report), encoding="utf-8")
    monkeypatch.setattr(localize, "localize_variant", refuse)
    assert explain(folder / "bare.json", record.variant_id) == warm
    with pytest.raises(AssertionError, match="localized again"):
        explain(folder / "bare.json", record.variant_id, fresh=True)


def test_another_input_set_or_artifact_localizes_again(cold_and_warm):
    folder, (_, cold_record, _), _ = cold_and_warm
    report, record, found = _run(folder, samples=3)  # the same graph, one more input set
    assert report.work["exported"] == {"computed": 0, "cached": 1}
    assert report.work["localized"] == {"computed": 1, "cached": 0}
    assert not found.cached and found.samples == 3 and _use(record)["key"] != _use(cold_record)["key"]
    report, record, found = _run(folder, width=24)  # another model: another graph (and reference)
    assert report.work["exported"]["computed"] == 1
    assert report.work["localized"] == {"computed": 1, "cached": 0} and not found.cached


def test_a_corrupt_entry_is_localized_again_with_a_note(cold_and_warm):
    from mlbench.store.cache import ArtifactCache

    folder, (_, cold_record, computed), _ = cold_and_warm
    key = _use(cold_record)["key"]
    [entry] = [e for e in ArtifactCache(folder / "cache").entries() if e.key.startswith(key)]
    value = entry.path / VALUE_NAME
    value.write_text(value.read_text().replace('"samples":2', '"samples":5'), encoding="utf-8")
    report, record, found = _run(folder)
    assert report.work["localized"] == {"computed": 1, "cached": 0}
    assert _use(record)["note"] == f"the cached {KIND} entry {entry.key[:12]} was corrupt and is computed again"
    assert not found.cached and found.samples == 2 and found.ops == computed.ops
