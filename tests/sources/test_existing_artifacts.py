"""Artifacts you already have: a saved torch.export program (.pt2) or TorchScript module (.pt) as the model
source, and an existing Core ML package or .onnx file measured as it is (no export)."""

from __future__ import annotations

import pytest

from mlbench.errors import UserError
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

TEXT_INPUTS = """\
    inputs:
      - {name: input_ids, dtype: int64, shape: [1, 16], range: [0, 100]}
      - {name: attention_mask, dtype: int64, shape: [1, 16], fill: ones}
"""
IMAGE_INPUTS = """\
    inputs:
      - {name: image, shape: [1, 3, 32, 32]}
"""
TAIL = """\
latency: {warmup: 0, repeats: 2, min_time_s: 0.0, retry_s: 0}
verify: {tolerance: {float16: 5.0e-2, float32: 1.0e-3}}
report: {dir: out, formats: [json]}
history: {enabled: false}
"""


def _text_model():
    import torch

    from examples.tiny_text import TinyText

    torch.manual_seed(0)
    model = TinyText().eval()
    args = (torch.randint(0, 100, (1, 16)), torch.ones(1, 16, dtype=torch.int64))
    return model, args


def _run(path):
    from mlbench.run import run

    return {r.variant_id: r for r in run(load_pipeline(path), jobs=1).records}


@pytest.mark.slow
def test_a_saved_export_program_and_a_torchscript_file_are_model_sources(write_pipeline, tmp_path):
    import torch

    from tests.conftest import ROOT as _  # noqa: F401 - examples importable from the repository root

    model, args = _text_model()
    torch.export.save(torch.export.export(model, args), tmp_path / "text.pt2")
    from examples.tiny_cnn import TinyCNN

    torch.manual_seed(0)
    torch.jit.save(torch.jit.trace(TinyCNN().eval(), torch.randn(1, 3, 32, 32)), tmp_path / "cnn.pt")
    path = write_pipeline(f"""\
version: 1
name: saved
models:
  - name: text
    source: text.pt2
{TEXT_INPUTS}  - name: cnn
    source: cnn.pt
{IMAGE_INPUTS}targets:
  - backend: torch
  - backend: coreml
    precision: [float16]
  - backend: onnxruntime
{TAIL}""")
    records = _run(path)
    assert {v: (r.status, r.error) for v, r in records.items()} == {
        f"{m}/{b}": ("ok", None) for m in ("text", "cnn")
        for b in ("torch/cpu/float32", "coreml/float16/all/none", "onnxruntime/float32/cpu")}
    assert records["text/coreml/float16/all/none"].verify.source == "emulated"  # type: ignore[union-attr]
    assert [o.name for o in records["text/onnxruntime/float32/cpu"].verify.outputs] == [  # type: ignore[union-attr]
        "output.logits", "output.hidden"]


def _export_package(tmp_path, precision: str = "float16"):
    import torch

    from examples.tiny_cnn import TinyCNN
    from mlbench.backends.coreml.export import export_coreml

    torch.manual_seed(0)
    result = export_coreml(TinyCNN().eval(), [torch.randn(1, 3, 32, 32)], ["image"], precision=precision,
                           optimization=None, deployment_target=None, dest=tmp_path / "pkg")
    return result.artifact


@pytest.mark.slow
def test_an_existing_package_is_measured_as_it_is_and_verified_against_eager(write_pipeline, tmp_path):
    package = _export_package(tmp_path)
    path = write_pipeline(f"""\
version: 1
name: existing
models:
  - name: cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
{IMAGE_INPUTS}targets:
  - backend: torch
include:
  - {{model: cnn, backend: coreml, package: {package}, precision: float16, compute_units: cpu_and_ne}}
  - {{model: cnn, backend: coreml, package: {package}, precision: float32, compute_units: cpu_only}}
{TAIL}""")
    records = _run(path)
    ok = records["cnn/coreml/float16/cpu_and_ne/none"]
    assert ok.status == "ok" and ok.artifact is not None and ok.artifact.export_path == "existing package"
    assert ok.artifact.path == str(package) and ok.verify is not None and ok.verify.source == "emulated"
    assert ok.placement is not None and ok.placement.source == "estimated"
    wrong = records["cnn/coreml/float32/cpu_only/none"]
    assert (wrong.status, wrong.error) == ("failed", "export: model.mlpackage computes in float16, not float32: "
                                           "set precision: float16")


@pytest.mark.slow
def test_artifacts_without_a_model_source_are_measured_without_verification(write_pipeline, tmp_path):
    import torch

    from examples.tiny_cnn import TinyCNN

    package = _export_package(tmp_path)
    torch.onnx.export(TinyCNN().eval(), (torch.randn(1, 3, 32, 32),), str(tmp_path / "cnn.onnx"),
                      input_names=["image"], dynamo=False)
    path = write_pipeline(f"""\
version: 1
name: nosource
models:
  - name: cnn
{IMAGE_INPUTS}targets:
  - backend: coreml
    package: {package}
  - backend: onnxruntime
    file: cnn.onnx
{TAIL}""")
    records = _run(path)
    reason = "no model source to compare with (the model names only existing artifacts)"
    coreml = records["cnn/coreml/float16/all/none"]
    assert coreml.status == "ok" and coreml.verify is None
    assert coreml.metrics["verify.max_rel"].reason.startswith(reason)  # type: ignore[union-attr]
    assert coreml.metrics["size.weights"].value > 0
    onnx = records["cnn/onnxruntime/float32/cpu"]
    assert onnx.status == "ok" and onnx.verify is None and onnx.metrics["verify.max_rel"].reason == reason
    assert onnx.metrics["latency.median"].source == "measured"


def test_existing_artifacts_are_checked_when_the_file_is_read(write_pipeline, tmp_path):
    path = write_pipeline(f"""\
version: 1
name: bad
models:
  - name: a
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
{IMAGE_INPUTS}  - name: b
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
{IMAGE_INPUTS}targets:
  - backend: coreml
    package: missing.mlpackage
  - backend: onnxruntime
    file: {ROOT}/README.md
    precision: [float32, float16]
  - backend: coreml
    package: {ROOT}/README.md
    optimize: [none, p4]
optimizations:
  p4: {{kind: palettize, nbits: 4}}
{TAIL}""")
    with pytest.raises(UserError) as info:
        load_pipeline(path)
    assert [line.split(": ", 1)[1] for line in str(info.value).splitlines()] == [
        "targets[1].precision: an existing .onnx file has one precision: give one value",
        "targets[2].optimize: an existing package is measured as it is: optimize stays none",
        f"targets[0].package: not found: {tmp_path / 'missing.mlpackage'}",
        "targets[1].file: names one model's artifact, and there are 2 models: give it as an include entry with "
        "model: NAME",
        "targets[2].package: names one model's artifact, and there are 2 models: give it as an include entry with "
        "model: NAME",
    ]
