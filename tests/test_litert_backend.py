"""The LiteRT backend end to end: real litert-torch exports, real ai-edge-quantizer recipes, the real LiteRT
interpreter with XNNPACK. Skipped where the `litert` extra is not installed (it is not part of `dev`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench.config.load import load_pipeline
from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache
from tests.conftest import ROOT

pytest.importorskip("litert_torch", reason="the litert extra is not installed (pip install -e '.[litert]')")
pytest.importorskip("ai_edge_litert", reason="the litert extra is not installed (pip install -e '.[litert]')")
pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: lt
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: torch
  - backend: litert
    precision: [float32, float16]
    optimize: [none, dyn8, int8, w4]
    threads: [1, 2]
exclude:
  - {{backend: litert, precision: float16, optimize: [dyn8, w4]}}
optimizations:
  dyn8: {{kind: litert_quantize, scheme: dynamic_int8}}
  int8: {{kind: litert_quantize, scheme: full_int8}}
  w4: {{kind: litert_quantize, scheme: weight_only_int4}}
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0}}
verify: {{samples: 3, tolerance: {{dyn8: 0.05, int8: 0.05, w4: 0.1}}}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown]}}
"""


def records(report):
    return {r.variant_id.removeprefix("tiny/litert/"): r for r in report.records if r.backend == "litert"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("litert")
    path = folder / "pipeline.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    return folder, run(load_pipeline(path))


def test_float32_is_measured_verified_and_placed_on_xnnpack(tiny_run):
    _, report = tiny_run
    record = records(report)["float32/none/1"]
    assert record.status == "ok", record.error
    assert record.artifact.export_path == "litert_torch.convert" and record.artifact.path.endswith("model.tflite")
    assert record.verify.passed and record.verify.max_rel <= 1e-5 and record.verify.samples == 3
    assert record.latency.threads == 1 and len(record.latency.samples) >= 3 and record.latency.source == "measured"
    assert record.metrics["size.package"].value == record.artifact.size_bytes > 0
    placement = record.placement
    assert placement.preferred == "cpu" and placement.by_count == {"cpu": 1.0} and placement.by_cost is None
    assert {op.provider for op in placement.ops} == {"XNNPACK delegate"}
    assert placement.note.startswith(f"{placement.compute_ops} of {placement.compute_ops} operations on XNNPACK in 1 ")
    assert "no per-operator profiler" in placement.note
    delegated = record.metrics["delegated.xnnpack"]
    assert (delegated.value, delegated.unit, delegated.source) == (1.0, "ratio", "measured")
    assert record.metrics["placement.cpu"].value is None  # no cost per operation: absent, with the reason
    for name in ("memory.load", "memory.peak"):  # the interpreter's, outside the timed loop
        assert record.metrics[name].source == "measured" and record.metrics[name].value >= 0, name
    assert record.details["memory"]["method"].startswith("linux VmHWM")
    # NCHW in: the converter keeps the module's layout and puts the TRANSPOSEs to NHWC inside the graph
    ops = record.details["tflite_ops"]
    assert ops["CONV_2D"] == 3 and ops["TRANSPOSE"] >= 1 and ops["FULLY_CONNECTED"] == 1


def test_threads_share_one_export_and_a_rerun_exports_nothing(tiny_run):
    folder, report = tiny_run
    recs = records(report)
    assert recs["float32/none/2"].latency.threads == 2
    assert recs["float32/none/1"].artifact.key == recs["float32/none/2"].artifact.key
    entries = ArtifactCache(folder / "cache").entries()
    assert len(entries) == 5  # float32 × {none, dyn8, int8, w4} + float16 × none
    for entry in entries:
        assert entry.meta["key_inputs"]["format"] == "tflite"
        assert "threads" not in entry.meta["key_inputs"]["options"]
    again = records(run(load_pipeline(folder / "pipeline.yaml")))
    assert all(r.artifact.cache_hit for r in again.values() if r.status == "ok")


def test_recipes_make_smaller_models_that_verify_within_their_tolerance(tiny_run):
    _, report = tiny_run
    recs = records(report)
    full = recs["float32/none/1"].artifact.size_bytes
    for variant, tolerance in (("float16/none/1", 1e-2), ("float32/dyn8/1", 0.05), ("float32/int8/1", 0.05),
                               ("float32/w4/1", 0.1)):
        record = recs[variant]
        assert record.status == "ok", record.error
        assert record.artifact.size_bytes < full, variant
        assert record.verify.passed and record.verify.tolerance == tolerance, variant
    assert recs["float32/w4/1"].artifact.size_bytes < recs["float32/dyn8/1"].artifact.size_bytes


def test_full_int8_is_calibrated_on_the_verify_samples_and_fed_quantized(tiny_run):
    folder, report = tiny_run
    record = records(report)["float32/int8/1"]
    entry = next(e for e in ArtifactCache(folder / "cache").entries() if e.key == record.artifact.key)
    assert entry.meta["calibration_samples"] == 3 and len(entry.meta["key_inputs"]["calibration"]) == 64
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=record.artifact.path)
    assert interp.get_input_details()[0]["dtype"] == np.int8  # int8 in: mlbench quantizes the float32 inputs
    assert record.verify.passed


def test_xnnpack_leaves_int4_dequantize_to_the_reference_kernels(tiny_run):
    _, report = tiny_run
    record = records(report)["float32/w4/1"]
    reference = [op for op in record.placement.ops if op.provider == "LiteRT reference (builtin) kernels"]
    assert "dequantize" in {op.op_type for op in reference}
    assert all(op.reason.startswith("XNNPACK did not take this operation") for op in reference)
    share = record.metrics["delegated.xnnpack"].value
    assert share == pytest.approx(1 - len(reference) / record.placement.compute_ops) and 0 < share < 1


def test_float16_with_a_recipe_is_skipped_with_the_reason(tiny_run):
    _, report = tiny_run
    record = records(report)["float16/int8/1"]
    assert record.status == "skipped"
    assert record.error == ("precision float16 with optimize int8: the recipe sets the weight type itself; "
                            "quantize the float32 export (optimize none for float16)")


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch on a value: torch.export cannot trace it
            return x * 2
        return x


def test_a_model_the_converter_cannot_take_is_one_line(tmp_path):
    from mlbench.backends.litert.export import LitertExportError, export_tflite

    with pytest.raises(LitertExportError) as info:
        export_tflite(DataDependent(), [torch.randn(1, 4)], precision="float32", scheme=None, dest=tmp_path)
    message = str(info.value)
    assert message.startswith("LiteRT export failed: litert_torch.convert: GuardOnDataDependentSymNode: Could not "
                              "guard on data-dependent expression")  # torch.export's root cause, not the wrappers
    assert "\n" not in message and len(message) < 300
    assert list(tmp_path.iterdir()) == []


TEXT = f"""\
version: 1
name: lt-text
models:
  - name: text
    source: {ROOT}/examples/tiny_text.py:TinyText
    inputs:
      - {{name: input_ids, dtype: int64, shape: [1, [8, 16]], range: [0, 100]}}
      - {{name: attention_mask, dtype: int64, shape: [1, [8, 16]], fill: ones}}
targets:
  - backend: litert
latency: {{warmup: 0, repeats: 2, min_time_s: 0.0}}
verify: {{samples: 2}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json]}}
"""


def test_token_inputs_two_outputs_and_one_static_shape(write_pipeline):
    report = run(load_pipeline(write_pipeline(TEXT)))
    recs = {r.variant_id: r for r in report.records}
    first = recs["text/litert/float32/none/1/8"]
    assert first.status == "ok", first.error
    # int64 ids are fed as int32 (the converter narrows 64-bit types); both outputs are compared, in order
    assert first.verify.passed and [o.name for o in first.verify.outputs] == ["output.logits", "output.hidden"]
    second = recs["text/litert/float32/none/1/16"]
    assert second.status == "skipped"
    assert second.error == ("litert exports one static shape, the model's first (8); shape 16 is not measured "
                            "(flexible shapes are not exported yet)")
