"""Flexible shapes: an input dimension with alternatives (enumerated) or a range exports once per
backend and is measured at each enumerated shape (a range at its default), as the `shape` axis."""

from __future__ import annotations

import pytest

from mlbench.matrix import Plan, expand
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

PIPELINE = f"""\
version: 1
name: flex
models:
  - name: text
    source: {ROOT}/examples/tiny_text.py:TinyText
    inputs:
      - {{name: input_ids, dtype: int64, shape: [1, SHAPE], range: [0, 100]}}
      - {{name: attention_mask, dtype: int64, shape: [1, SHAPE], fill: ones}}
targets:
  - backend: torch
  - backend: coreml
    precision: [float16]
    compute_units: [cpu_and_ne]
    reshape_frequency: infrequent
  - backend: onnxruntime
latency: {{warmup: 0, repeats: 2, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: 2, tolerance: {{float16: 5.0e-2, float32: 1.0e-3}}}}
report: {{dir: out, formats: [json, markdown]}}
history: {{enabled: false}}
"""


def test_alternatives_add_a_measurement_only_shape_axis(write_pipeline):
    config = load_pipeline(write_pipeline(PIPELINE.replace("SHAPE", "[8, 16, 32]"))).config
    variants = expand(config)
    assert [v.id for v in variants if v.backend == "coreml"] == [
        "text/coreml/float16/cpu_and_ne/none/8", "text/coreml/float16/cpu_and_ne/none/16",
        "text/coreml/float16/cpu_and_ne/none/32"]
    groups = Plan(variants).artifact_groups()
    assert sorted(len(g) for g in groups) == [3, 3, 3]  # one artifact per backend, three shapes each
    assert {v.artifact_id for v in variants if v.backend == "coreml"} == {"text/coreml/float16/none"}
    ranged = expand(load_pipeline(write_pipeline(
        PIPELINE.replace("SHAPE", "{min: 4, max: 64, default: 16}"), "ranged.yaml")).config)
    assert [v.id for v in ranged if v.backend == "torch"] == ["text/torch/cpu/float32/16"]


def test_exclude_matches_a_shape(write_pipeline):
    text = PIPELINE.replace("SHAPE", "[8, 16, 32]").replace(
        "latency:", "exclude:\n  - {backend: onnxruntime, shape: [8, 32]}\nlatency:")
    variants = expand(load_pipeline(write_pipeline(text)).config)
    assert [v.id for v in variants if v.backend == "onnxruntime"] == ["text/onnxruntime/float32/cpu/16"]


@pytest.mark.torch
@pytest.mark.slow
def test_one_package_is_measured_and_verified_at_each_enumerated_shape(write_pipeline):
    from mlbench.run import run

    report = run(load_pipeline(write_pipeline(PIPELINE.replace("SHAPE", "[8, 16, 32]"))), jobs=1)
    records = {r.variant_id: r for r in report.records}
    assert {v: r.status for v, r in records.items()} == {
        f"text/{b}/{n}": "ok" for b in ("torch/cpu/float32", "coreml/float16/cpu_and_ne/none",
                                        "onnxruntime/float32/cpu") for n in (8, 16, 32)}
    coreml = [records[f"text/coreml/float16/cpu_and_ne/none/{n}"] for n in (8, 16, 32)]
    assert len({r.artifact.key for r in coreml}) == 1  # type: ignore[union-attr]
    assert [r.artifact.cache_hit for r in coreml] == [False, False, False]  # type: ignore[union-attr]
    # each shape is verified at its own size (hidden is [1, n, 32])
    for n, record in zip((8, 16, 32), coreml):
        assert record.verify is not None and record.verify.source == "emulated"
        assert [o.shape for o in record.verify.outputs] == [[1, 4], [1, n, 32]]
    onnx = [records[f"text/onnxruntime/float32/cpu/{n}"] for n in (8, 16, 32)]
    assert len({r.artifact.key for r in onnx}) == 1  # type: ignore[union-attr]
    assert [o.shape for o in onnx[2].verify.outputs] == [[1, 4], [1, 32, 32]]  # type: ignore[union-attr]
    artifact = report.artifacts[coreml[0].artifact.key]  # type: ignore[union-attr]
    assert all(i["flexible"] for i in artifact["program"]["inputs"])
    # two inputs with enumerated shapes need iOS18 (coremltools refuses them below)
    assert artifact["export"]["deployment_target"] == "iOS18"
    note = coreml[0].placement.note  # type: ignore[union-attr]
    assert "Flexible input(s) input_ids, attention_mask: loaded with reshape_frequency infrequent" in note


@pytest.mark.torch
@pytest.mark.slow
def test_a_range_exports_flexible_and_measures_its_default(write_pipeline):
    from mlbench.run import run

    text = PIPELINE.replace("SHAPE", "{min: 4, max: 64, default: 16}").replace("    reshape_frequency: infrequent\n", "")
    records = {r.variant_id: r for r in run(load_pipeline(write_pipeline(text)), jobs=1).records}
    assert {v: r.status for v, r in records.items()} == {
        f"text/{b}/16": "ok" for b in ("torch/cpu/float32", "coreml/float16/cpu_and_ne/none", "onnxruntime/float32/cpu")}
    note = records["text/coreml/float16/cpu_and_ne/none/16"].placement.note  # type: ignore[union-attr]
    assert "reshape_frequency: infrequent lets it specialise" in note


def test_two_enumerated_inputs_need_ios18(write_pipeline):
    from mlbench.errors import UserError

    text = PIPELINE.replace("SHAPE", "[8, 16]").replace("    reshape_frequency: infrequent\n",
                                                        "    deployment_target: iOS17\n")
    with pytest.raises(UserError) as info:
        load_pipeline(write_pipeline(text))
    assert str(info.value).split(": ", 1)[1] == ("targets[1].deployment_target: deployment target iOS17 is too low "
                                                 "for enumerated shapes on 2 inputs: it needs iOS18 or later")
