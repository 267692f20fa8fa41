"""Verification never asks more than the reference can give (issue 38): when eager float32 is itself only
~47 dB from the same model in float64 (outputs below float32's normal range, from a cancellation), a
float32 export's SNR floor is capped at the reference's own precision less REFERENCE_MARGIN_DB, and the
record says so; float16 exports keep their floor and fail (float16 cannot hold 1e-40: they return 0)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mlbench.verify import REFERENCE_MARGIN_DB, compare_samples


def _pairs(noise_db: float, scale: float = 1e-40):
    rng = np.random.default_rng(0)
    reference = rng.standard_normal(64) * scale
    noise = rng.standard_normal(64)
    noise *= np.sqrt(np.sum(reference**2) / np.sum(noise**2)) * 10 ** (-noise_db / 20)
    return [([("out", reference.astype(np.float64))], [reference + noise])]


def test_a_float32_export_as_precise_as_its_reference_passes_the_capped_floor_and_says_why():
    asked = []

    def own() -> float:
        asked.append(True)
        return 49.4

    verification = compare_samples(_pairs(45.0), tolerance=1e-5, min_snr_db=60.0, reference_name="eager",
                                   reference_precision_db=own)
    assert verification.passed and asked == [True]
    assert verification.min_snr_db == 43.0 == np.floor(49.4 - REFERENCE_MARGIN_DB)
    assert verification.note.startswith(
        "reference outputs are subnormal (max 2e-40): float32 floor lowered to 43 dB, the reference's own precision "
        "(eager float32 is 49.4 dB from the same model in float64, less 6 dB)")


def test_the_cap_never_lets_an_export_worse_than_its_reference_pass():
    verification = compare_samples(_pairs(30.0), tolerance=1e-5, min_snr_db=60.0, reference_name="eager",
                                   reference_precision_db=lambda: 49.4)
    assert not verification.passed and verification.min_snr_db == 43.0
    assert verification.failures == ["output 'out' SNR 30.0 dB is below the floor 43 dB"]


def test_a_precise_reference_or_a_passing_export_asks_nothing_and_keeps_the_floor():
    def never() -> float:
        raise AssertionError("the reference's precision is asked only when the SNR floor fails")

    assert compare_samples(_pairs(70.0), tolerance=1e-5, min_snr_db=60.0, reference_name="eager",
                           reference_precision_db=never).passed
    kept = compare_samples(_pairs(45.0, scale=1.0), tolerance=0.1, min_snr_db=60.0, reference_name="eager",
                           reference_precision_db=lambda: 80.0)
    assert not kept.passed and kept.min_snr_db == 60.0 and kept.note is None
    normal = compare_samples(_pairs(45.0, scale=1.0), tolerance=0.1, min_snr_db=60.0, reference_name="eager",
                             reference_precision_db=lambda: 50.0)
    assert normal.passed and normal.note == ("float32 floor lowered to 44 dB, the reference's own precision (eager "
                                             "float32 is 50.0 dB from the same model in float64, less 6 dB)")


MODELS = """\
import torch
from torch import nn


class Subnormal(nn.Module):
    \"\"\"Outputs about 1e-40, below float32's normal range (1.2e-38), from the difference of two nearly equal
    convolutions: eager float32 itself keeps about 47 dB of them.\"\"\"

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(3, 8, 3)
        with torch.no_grad():
            self.b.weight.copy_(self.a.weight * (1 + 3e-5 * torch.randn(self.a.weight.shape, generator=g)))
            self.b.bias.copy_(self.a.bias)

    def forward(self, x):
        return (self.a(x) - self.b(x)) * 1e-36
"""

PIPELINE = """\
version: 1
name: subnormal
models:
  - name: tiny
    source: models.py:Subnormal
    inputs: [{name: x, shape: [1, 3, 12, 12]}]
targets:
  - backend: coreml
    precision: [float32, float16]
    compute_units: cpu_only
  - backend: onnxruntime
    precision: [float32, float16]
    providers: cpu
verify: {samples: 2}
report: {dir: out}
"""


@pytest.mark.slow  # four real exports: ~60 s quiet
@pytest.mark.torch
@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the measured Core ML verification leads")
def test_float32_exports_of_a_subnormal_model_pass_at_the_reference_precision_and_float16_fails(tmp_path):
    pytest.importorskip("onnxruntime")
    import re

    from mlbench.run import run
    from mlbench.validate import load_pipeline

    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    (tmp_path / "p.yaml").write_text(PIPELINE, encoding="utf-8")
    by_id = {r.variant_id: r for r in run(load_pipeline(tmp_path / "p.yaml")).records}
    ort32, coreml32 = by_id["tiny/onnxruntime/float32/cpu"], by_id["tiny/coreml/float32/cpu_only/none"]
    assert ort32.status == "ok" and ort32.verify.passed
    own = float(re.search(r"eager float32 is ([0-9.]+) dB from the same model in float64", ort32.verify.note)[1])
    assert own < 60.0 - REFERENCE_MARGIN_DB  # the reference itself misses the float32 floor (~47 dB)
    assert ort32.verify.snr_db < 60.0 and ort32.verify.min_snr_db == np.floor(own - REFERENCE_MARGIN_DB)
    assert ort32.verify.note.startswith("reference outputs are subnormal (max 8e-41): float32 floor lowered to "
                                        f"{ort32.verify.min_snr_db:g} dB, the reference's own precision")
    # the interpreter runs torch's own convolution: the emulated float32 program agrees exactly, no cap needed
    assert coreml32.status == "ok" and coreml32.verify.passed and coreml32.verify.source == "emulated"
    for variant in ("tiny/onnxruntime/float16/cpu", "tiny/coreml/float16/cpu_only/none"):
        record = by_id[variant]
        assert record.status == "failed" and not record.verify.passed and record.verify.min_snr_db == 30.0
        assert "float32 floor lowered" not in (record.verify.note or "")
