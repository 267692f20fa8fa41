"""A backend whose extra is not installed skips its variants naming the extra, instead of failing them with a
ModuleNotFoundError: a machine without coremltools or onnxruntime cannot run them, which is no failure of the
model (a `.[litert]` environment running a pipeline that also names Core ML, say)."""

from __future__ import annotations

import sys

import pytest

from mlbench.matrix import expand
from mlbench.run.tasks import WorkContext, run_group
from mlbench.store.cache import ArtifactCache
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: extras
models:
  - name: cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
  - backend: coreml
    precision: [float32]
    compute_units: [cpu_only]
  - backend: onnxruntime
  - backend: executorch
  - backend: litert
cache: {{dir: cache}}
history: {{enabled: false}}
"""


@pytest.mark.parametrize("hidden, backend, message", [
    (["coremltools"], "coreml", "the coreml backend needs coremltools, which is not installed: "
                                "pip install 'mlbench-ondevice[coreml]'"),
    (["onnx"], "onnxruntime", "the onnxruntime backend needs onnx, which is not installed: "
                              "pip install 'mlbench-ondevice[onnxruntime]'"),
    (["executorch"], "executorch", "the executorch backend needs executorch, which is not installed: "
                                   "pip install 'mlbench-ondevice[executorch]'"),
    (["litert_torch", "ai_edge_litert", "ai_edge_quantizer"], "litert",
     "the litert backend needs litert-torch, ai-edge-litert and ai-edge-quantizer, which are not installed: "
     "pip install 'mlbench-ondevice[litert]'"),
])
def test_a_backend_without_its_extra_skips_naming_the_extra(write_pipeline, monkeypatch, hidden, backend, message):
    pipeline = load_pipeline(write_pipeline(PIPELINE))
    variants = [v for v in expand(pipeline.config) if v.backend == backend]
    ctx = WorkContext(pipeline.config, pipeline.base_dir, ArtifactCache(pipeline.cache_dir))
    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # find_spec then says it is not there
    records = [finished.record for finished in run_group(ctx, variants)]
    assert [(r.status, r.error) for r in records] == [("skipped", message)] * len(variants)
