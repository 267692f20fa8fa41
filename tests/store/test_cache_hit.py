"""`cache_hit` says whether this run found an artifact or built it, on every backend and however many
jobs export: an artifact an export child built earlier in the same run is still a miss when the
measuring child then fetches it from the cache (the runner's `built_keys`)."""

from __future__ import annotations

import pytest

from mlbench.run.runner import run
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytest.importorskip("coremltools")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: hits
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 16, 16]}}]
targets:
  - backend: torch
  - backend: onnxruntime
    precision: [float32]
    providers: [cpu]
  - backend: coreml
    precision: [float16]
    compute_units: [cpu_only]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
history: {{enabled: false}}
report: {{dir: out, formats: [json]}}
"""


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.slow
def test_an_artifact_this_run_built_is_no_cache_hit_on_any_backend(write_pipeline, jobs):
    pipeline = load_pipeline(write_pipeline(PIPELINE))
    first = {r.backend: r for r in run(pipeline, jobs=jobs).records}
    assert sorted(first) == ["coreml", "onnxruntime", "torch"]
    assert all(r.status == "ok" for r in first.values()), {b: r.error for b, r in first.items()}
    assert first["torch"].artifact is None  # eager: nothing exported, nothing cached
    built = {b: r.artifact for b, r in first.items() if r.artifact is not None}
    assert sorted(built) == ["coreml", "onnxruntime"]
    assert {b: a.cache_hit for b, a in built.items()} == {"coreml": False, "onnxruntime": False}
    assert all(a.export_seconds > 0 for a in built.values())

    again = {r.backend: r.artifact for r in run(pipeline, jobs=jobs).records if r.artifact is not None}
    assert {b: (a.cache_hit, a.key) for b, a in again.items()} == {b: (True, a.key) for b, a in built.items()}
