"""The LiteRT backend end to end: real litert-torch exports, real ai-edge-quantizer recipes, the real LiteRT
interpreter with XNNPACK. Skipped where the `litert` extra is not installed (it is not part of `dev`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench.run.runner import run
from mlbench.store.cache import ArtifactCache
from mlbench.validate import load_pipeline
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
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
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
latency: {{warmup: 0, repeats: 2, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: 2}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json]}}
"""


@pytest.mark.slow  # past 10 s on a quiet 2-core machine: out of the fast lane
def test_token_inputs_two_outputs_and_one_export_per_shape(write_pipeline):
    report = run(load_pipeline(write_pipeline(TEXT)))
    recs = {r.variant_id: r for r in report.records}
    first = recs["text/litert/float32/none/1/8"]
    assert first.status == "ok", first.error
    # int64 ids are fed as int32 (the converter narrows 64-bit types); both outputs are compared, in order
    assert first.verify.passed and [o.name for o in first.verify.outputs] == ["output.logits", "output.hidden"]
    # litert-torch 0.10 cannot convert a dynamic dimension: each shape is its own static export, measured
    second = recs["text/litert/float32/none/1/16"]
    assert second.status == "ok", second.error
    assert second.verify.passed and second.artifact.key != first.artifact.key
    assert first.artifact.path != second.artifact.path
    export = report.artifacts[second.artifact.key]["export"]
    assert export["shape"] == "16" and report.artifacts[first.artifact.key]["export"]["shape"] == "8"
    assert export["flexible"].startswith("one export per shape: litert-torch 0.10 does not "
                                                           "convert a dynamic dimension")
    from ai_edge_litert.interpreter import Interpreter

    shapes = [list(d["shape"]) for d in Interpreter(model_path=second.artifact.path).get_input_details()]
    assert shapes == [[1, 16], [1, 16]]


VALUES = f"""\
version: 1
name: lt-values
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32], values: samples.npz}}]
targets:
  - backend: litert
    optimize: [int8]
optimizations:
  int8: {{kind: litert_quantize, scheme: full_int8}}
latency: {{warmup: 0, repeats: 2, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: 2, tolerance: {{int8: 0.1}}}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json]}}
"""


def test_full_int8_calibrates_on_the_given_values_and_they_enter_the_key(write_pipeline, tmp_path):
    """Five real samples in `values:` (verify.samples is 2): the quantizer sees exactly those five, and their
    digest is the key's calibration; other values, another key. Precision, recipe and shape shape the key too."""
    from mlbench.backends.litert.backend import artifact_key_inputs, calibration_samples, digest_samples
    from mlbench.run.tasks import WorkContext

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "samples.npz", image=rng.standard_normal((5, 1, 3, 32, 32)).astype(np.float32))
    pipeline = load_pipeline(write_pipeline(VALUES))
    report = run(pipeline)
    (record,) = report.records
    assert record.status == "ok", record.error
    entry = next(e for e in ArtifactCache(tmp_path / "cache").entries() if e.key == record.artifact.key)
    assert entry.meta["calibration_samples"] == 5
    given = [[s] for s in np.load(tmp_path / "samples.npz")["image"]]
    assert entry.meta["key_inputs"]["calibration"] == digest_samples(given)

    model = WorkContext(pipeline.config, pipeline.base_dir, ArtifactCache(tmp_path / "cache")).model("tiny")
    samples = calibration_samples(model, verify_samples=2)
    assert len(samples) == 5 and all(np.array_equal(a[0], b[0]) for a, b in zip(samples, given))
    recipe = {"kind": "litert_quantize", "scheme": "full_int8"}
    key = artifact_key_inputs(model, "float32", recipe, digest_samples(samples))
    assert key == entry.meta["key_inputs"]
    other = [[a[0] + 1.0] for a in samples]
    assert artifact_key_inputs(model, "float32", recipe, digest_samples(other)) != key
    assert artifact_key_inputs(model, "float16", None, None)["options"] != key["options"]
    assert artifact_key_inputs(model, "float32", recipe, digest_samples(samples), "16") != key


class FeatureMap(torch.nn.Module):
    """An NCHW image in, an NCHW feature map out (no flatten to hide a layout mistake behind)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)

    def forward(self, image):
        return self.pool(torch.relu(self.conv(image)))


def test_nchw_in_and_out_as_eager_with_the_nhwc_transposes_inside_the_graph(tmp_path):
    """The converter keeps the module's NCHW at both ends and puts the TRANSPOSEs to XNNPACK's NHWC inside:
    an asymmetric feature map comes out in eager's layout, value for value."""
    from mlbench.backends.litert.export import export_tflite
    from mlbench.backends.litert.runtime import Runner, build_placement, interpreter

    torch.manual_seed(0)
    module, image = FeatureMap().eval(), torch.randn(1, 3, 12, 20)
    result = export_tflite(module, [image], precision="float32", scheme=None, dest=tmp_path)
    interp = interpreter(result.artifact, 1)
    runner = Runner(interp)
    (out,) = runner.outputs_of(runner(runner.feed([image.numpy()])))
    expected = module(image).detach().numpy()
    assert out.shape == expected.shape == (1, 8, 6, 10)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    ops = [op["op_name"] for op in interp._get_ops_details()]
    placement, _ = build_placement(list(interp._get_ops_details()), 1)
    transposes = [op for op in placement.ops if op.op_type == "transpose"]
    assert len(transposes) >= 2 and "DELEGATE" in ops  # NCHW → NHWC in, NHWC → NCHW out
    assert all(op.provider == "XNNPACK delegate" for op in transposes)
