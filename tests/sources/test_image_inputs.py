"""Image inputs: a Core ML ImageType (pixels 0-255, scale and bias inside the program) and, for eager
PyTorch and ONNX Runtime, the same pixels as the normalised tensor; verification compares like with like."""

from __future__ import annotations

import pytest

from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: images
models:
  - name: cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs:
      - {{name: image, kind: image, shape: [1, 3, 32, 32], color_layout: LAYOUT, scale: 0.0039215686,
         bias: [-0.485, -0.456, -0.406]}}
targets:
  - backend: torch
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only]
  - backend: onnxruntime
latency: {{warmup: 0, repeats: 1, min_time_s: 0.0, retry_s: 0}}
verify: {{samples: 2, tolerance: {{float32: 1.0e-4, float16: 5.0e-2}}}}
report: {{dir: out, formats: [json]}}
history: {{enabled: false}}
"""


@pytest.mark.parametrize("layout", ["RGB", "BGR"])
@pytest.mark.slow
def test_an_image_type_package_agrees_with_its_eager_equivalent(write_pipeline, layout):
    from mlbench.run import run

    report = run(load_pipeline(write_pipeline(PIPELINE.replace("LAYOUT", layout))), jobs=1)
    records = {r.variant_id: r for r in report.records}
    assert {v: (r.status, r.error) for v, r in records.items()} == dict.fromkeys(("cnn/torch/cpu/float32", "cnn/coreml/float32/cpu_only/none", "cnn/coreml/float16/cpu_only/none", "cnn/onnxruntime/float32/cpu"), ("ok", None))
    fp32 = records["cnn/coreml/float32/cpu_only/none"]
    assert fp32.verify is not None and fp32.verify.source == "emulated" and fp32.verify.max_rel < 1e-4
    program = report.artifacts[fp32.artifact.key]["program"]  # type: ignore[union-attr]
    assert [(i["name"], i["kind"], i["shape"], i["dtype"]) for i in program["inputs"]] == [
        ("image", "image", [32, 32], layout)]


def test_the_package_takes_pixels_and_applies_scale_and_bias_itself(tmp_path):
    import numpy as np
    import torch

    from examples.tiny_cnn import TinyCNN
    from mlbench.backends.coreml.emulate import emulate_package
    from mlbench.backends.coreml.export import export_coreml
    from mlbench.config.models import ModelInput
    from mlbench.sources.inputs import normalise_image

    item = ModelInput.model_validate({"name": "image", "kind": "image", "shape": [1, 1, 16, 16],
                                      "color_layout": "GRAYSCALE", "scale": 0.5, "bias": [-3.0]})
    torch.manual_seed(0)
    model = TinyCNN().eval()
    first = torch.nn.Conv2d(1, 3, 1)
    net = torch.nn.Sequential(first, model).eval()
    pixels = torch.randint(0, 256, (1, 1, 16, 16)).float()
    result = export_coreml(net, [normalise_image(pixels, item)], ["image"], precision="float32", optimization=None,
                           deployment_target=None, dest=tmp_path, inputs=[item])
    out = emulate_package(result.artifact, {"image": pixels.numpy()})
    got = next(iter((out if isinstance(out, dict) else out.outputs).values()))
    with torch.no_grad():
        expected = net(pixels * 0.5 - 3.0).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
