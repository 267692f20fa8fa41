"""The eager PyTorch backend, the reference every other is verified against: a real tiny model timed on this
machine's CPU, its float32 variant the reference itself, its bfloat16 one verified against it."""

from __future__ import annotations

import json

import pytest

from mlbench.cli.main import main
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = """\
version: 1
name: eager
models:
  - name: tiny_cnn
    source: {root}/examples/tiny_cnn.py:TinyCNN
    kwargs: {{num_classes: 10}}
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
  - backend: torch
    device: [cpu]
    precision: [float32, bfloat16]
latency: {{warmup: 1, repeats: 5, min_time_s: 0.0, retry_s: 0}}
report: {{dir: reports, formats: [json]}}
"""


def test_eager_float32_is_the_reference_and_bfloat16_is_verified_against_it(write_pipeline, capsys):
    pytest.importorskip("torch")
    path = write_pipeline(PIPELINE.format(root=ROOT))
    assert main(["run", str(path)]) == 0
    report = json.loads((path.parent / "reports" / "report.json").read_text(encoding="utf-8"))
    records = {r["variant_id"]: r for r in report["records"]}
    reference, half = records["tiny_cnn/torch/cpu/float32"], records["tiny_cnn/torch/cpu/bfloat16"]
    assert reference["status"] == half["status"] == "ok"
    for record in (reference, half):
        median = record["metrics"]["latency.median"]
        assert median["source"] == "measured" and median["value"] > 0
        assert len(record["latency"]["samples"]) >= 5
    assert reference["verify"] is None  # the reference is not verified against itself
    assert half["verify"]["source"] == "measured" and 0 < half["verify"]["max_rel"] < 0.05
