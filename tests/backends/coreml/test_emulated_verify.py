"""Core ML variants are verified on any OS: mlbench's interpreter runs the saved program (`emulated`),
over `verify.samples` seeded inputs, with SNR and top-1 agreement; an op it lacks is a reason, not a zero."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("torch")

from mlbench.cli import main
from mlbench.run import run
from mlbench.validate import load_pipeline

pytestmark = pytest.mark.torch

MODELS = """\
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 256, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(256, 10)  # over 2,048 weights: coremltools compresses it
        nn.init.normal_(self.head.weight, std=1.0)

    def forward(self, x):
        return self.head(self.body(x))


class Noisy(nn.Module):
    def forward(self, x):
        return x + 0.0 * torch.rand_like(x)
"""

PIPELINE = """\
version: 1
name: emulated
models:
  - name: clf
    source: models.py:Classifier
    inputs: [{{name: image, shape: [2, 3, 16, 16]}}]
{extra}targets:
  - backend: coreml
    precision: [float32, float16]
    compute_units: cpu_and_ne
    optimize: [none, pal4]
optimizations:
  pal4: {{kind: palettize, nbits: 4, mode: uniform}}
verify: {{samples: 3, tolerance: {{float32: 1.0e-5, float16: 1.0e-2, pal4: 0.5}}}}
report: {{dir: out}}
"""


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the measured verification leads")
@pytest.mark.slow
def test_every_core_ml_variant_gets_an_emulated_verification_over_the_samples(tmp_path):
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(extra=""), encoding="utf-8")
    report = run(load_pipeline(path))
    by_id = {r.variant_id: r for r in report.records}
    assert set(by_id) == {f"clf/coreml/{p}/cpu_and_ne/{o}" for p in ("float32", "float16") for o in ("none", "pal4")}
    for record in by_id.values():
        assert record.status == "ok", record.error
        assert record.verify.source == "emulated" and record.verify.samples == 3
        assert record.metrics["verify.max_rel"].source == "emulated"
        snr = record.metrics.get("verify.snr_db")  # absent only when the outputs match exactly
        assert (snr.value if snr else None) == record.verify.snr_db
        assert record.verify.method.startswith("Emulated: mlbench ran the saved Core ML program")
    exact = by_id["clf/coreml/float32/cpu_and_ne/none"].verify
    assert exact.max_rel <= 1e-5 and exact.top1_agreement == 1.0 and (exact.snr_db is None or exact.snr_db > 100)
    rounded = by_id["clf/coreml/float16/cpu_and_ne/none"].verify
    assert 1e-5 < rounded.max_rel <= 1e-2 and 40 < rounded.snr_db < 100
    palettized = by_id["clf/coreml/float16/cpu_and_ne/pal4"].verify
    assert palettized.max_rel > rounded.max_rel and palettized.snr_db < rounded.snr_db
    markdown = (tmp_path / "out" / "report.md").read_text()
    identical = exact.max_rel == 0 and exact.max_abs == 0  # then the cell says why it is exactly zero
    assert (f"| †{exact.max_rel:.2e} (3 samples)"
            + (" (identical outputs: emulated with the reference's own kernels)" if identical else "") + " |") in markdown


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the measured verification leads")
@pytest.mark.slow
def test_a_program_with_a_random_op_is_not_compared_and_says_why(tmp_path):
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(extra="  - name: noisy\n    source: models.py:Noisy\n"
                                    "    inputs: [{name: x, shape: [1, 8]}]\n"), encoding="utf-8")
    report = run(load_pipeline(path))
    noisy = next(r for r in report.records if r.variant_id == "noisy/coreml/float32/cpu_and_ne/none")
    assert noisy.status == "ok" and noisy.verify is None
    metric = noisy.metrics["verify.max_rel"]
    assert (metric.value, metric.source) == (None, None)
    # the interpreter runs random_uniform (seeded), but its values cannot agree with torch's draws
    assert metric.reason == "random op: values not comparable; Core ML runs only on macOS; this machine runs Linux"


def test_inspect_verify_runs_any_package_in_the_interpreter(tmp_path, capsys):
    import torch

    from mlbench.backends.coreml.export import export_coreml

    module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Softmax(-1)).eval()
    result = export_coreml(module, [torch.randn(2, 8)], ["x"], precision="float16", optimization=None,
                           deployment_target=None, dest=tmp_path)
    assert main(["inspect", str(result.artifact), "--verify", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "### Emulated outputs (seed 3," in out
    row = next(line for line in out.splitlines() if line.startswith("| var_"))
    assert row.split(" | ")[1:3] == ["[2, 4]", "float32"] and row.endswith("| 0 | 0 |")
