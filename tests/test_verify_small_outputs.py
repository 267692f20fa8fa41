"""Verification that scale cannot fool (issue 23), on real exports of a model whose outputs are ~1e-5:
a Core ML package whose weights were zeroed fails while the intact one passes, and a variant whose
only verification is the emulated one is a failed record when that verification fails."""

from __future__ import annotations

import json
import shutil
import struct
import sys

import pytest

pytest.importorskip("torch")

from mlbench.cli import main
from mlbench.run import run
from mlbench.validate import load_pipeline

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the measured verification leads")]

MODELS = """\
import torch
from torch import nn


class Small(nn.Module):
    \"\"\"Class scores of about 1e-5, like a random-weight EfficientNet's: any export is within max_rel.\"\"\"

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10, bias=False))
        with torch.no_grad():
            self.body[2].weight.mul_(1e-4)

    def forward(self, x):
        return self.body(x)
"""

INPUTS = "    inputs: [{name: x, shape: [4, 32]}]\n"


def _zero_weights(package) -> int:
    """Zero every blob of the package's weight file in place (MIL blob storage: a 64-byte header, then
    per blob a 64-byte record `sentinel, dtype, size, data offset` and its data, each 64-byte aligned)."""
    blob = package / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    data = bytearray(blob.read_bytes())
    offset, zeroed = 64, 0
    while offset + 24 <= len(data):
        sentinel, _dtype, size, start = struct.unpack_from("<IIQQ", data, offset)
        assert sentinel == 0xDEADBEEF
        data[start:start + size] = bytes(size)
        zeroed += 1
        offset = -(-(start + size) // 64) * 64
    blob.write_bytes(bytes(data))
    return zeroed


def _packages(tmp_path, precision: str):
    """(intact, zeroed): the model mlbench builds under seed 0, exported, and a copy with its weights zeroed."""
    import importlib.util

    import torch

    from mlbench.backends.coreml.export import export_coreml

    spec = importlib.util.spec_from_file_location("small_models", tmp_path / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    intact = export_coreml(module.Small().eval(), [torch.randn(4, 32)], ["x"], precision=precision,
                           optimization=None, deployment_target=None, dest=tmp_path / f"pkg-{precision}").artifact
    zeroed = tmp_path / f"zeroed-{precision}.mlpackage"
    shutil.copytree(intact, zeroed)
    assert _zero_weights(zeroed) >= 2  # both layers' weights live in the weight file
    return intact, zeroed


@pytest.mark.slow
def test_a_zeroed_package_of_a_small_output_model_fails_and_the_intact_one_passes(tmp_path):
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    packages = {p: _packages(tmp_path, p) for p in ("float32", "float16")}
    includes = "".join(
        f"  - {{model: {name}, backend: coreml, package: {package}, precision: {precision}, compute_units: cpu_only}}\n"
        for precision, (intact, zeroed) in packages.items() for name, package in (("intact", intact), ("zeroed", zeroed)))
    path = tmp_path / "p.yaml"
    path.write_text(f"""\
version: 1
name: small
models:
  - name: intact
    source: models.py:Small
{INPUTS}  - name: zeroed
    source: models.py:Small
{INPUTS}targets:
  - backend: torch
include:
{includes}verify: {{samples: 2}}
report: {{dir: out, formats: [json, markdown]}}
""", encoding="utf-8")
    records = {r.variant_id: r for r in run(load_pipeline(path)).records}
    for precision, floor in (("float32", 60.0), ("float16", 30.0)):
        good = records[f"intact/coreml/{precision}/cpu_only/none"]
        bad = records[f"zeroed/coreml/{precision}/cpu_only/none"]
        assert good.verify is not None and bad.verify is not None
        assert good.status == "ok" and good.verify.passed and good.verify.source == "emulated"
        assert good.verify.snr_db is None or good.verify.snr_db > floor + 10  # None: bit-exact
        # max_rel alone cannot tell them apart: the outputs are smaller than the tolerance
        assert bad.verify.max_rel < bad.verify.tolerance and good.verify.max_rel < good.verify.tolerance
        assert bad.verify.snr_db == pytest.approx(0.0)
        assert bad.status == "failed" and not bad.verify.passed
        assert bad.error is not None and bad.error.startswith(
            f"verify: output 'output' SNR 0.0 dB is below the floor {floor:g} dB; ") and bad.error.endswith(" (emulated)")
        assert bad.verify.note is not None and bad.verify.note.startswith("outputs are at most ")
        assert bad.verify.note.endswith(f"cannot see a wrong export; SNR 0.0 dB (floor {floor:g} dB)")
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "(outputs near 0: max_rel blind; SNR 0 dB)" in markdown


@pytest.mark.slow
def test_a_variant_whose_only_failing_check_is_the_emulated_one_is_a_failed_record(tmp_path, capsys):
    """Core ML off macOS has only the emulated verification: its failure must fail the variant, whatever the
    measured backends beside it say."""
    (tmp_path / "models.py").write_text(MODELS.replace("mul_(1e-4)", "mul_(1.0)"), encoding="utf-8")
    path = tmp_path / "p.yaml"
    path.write_text(f"""\
version: 1
name: emulated_only
models:
  - name: small
    source: models.py:Small
{INPUTS}targets:
  - backend: torch
  - backend: onnxruntime
  - backend: coreml
    precision: [float32, float16]
    compute_units: cpu_only
verify: {{tolerance: {{float32: 1.0e-4, float16: 1.0e-9}}}}
report: {{dir: out, formats: [json]}}
""", encoding="utf-8")
    assert main(["run", "-q", str(path)]) == 1  # some variant failed
    capsys.readouterr()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    records = {r["variant_id"]: r for r in report["records"]}
    assert {v: r["status"] for v, r in records.items()} == {
        "small/torch/cpu/float32": "ok", "small/onnxruntime/float32/cpu": "ok",
        "small/coreml/float32/cpu_only/none": "ok", "small/coreml/float16/cpu_only/none": "failed"}
    failed = records["small/coreml/float16/cpu_only/none"]
    verify = failed["verify"]
    assert verify["source"] == "emulated" and verify["passed"] is False
    assert verify["snr_db"] > verify["min_snr_db"] == 30.0  # the SNR is fine: only max_rel is beyond its tolerance
    assert failed["error"] == f"verify: max_rel {verify['max_rel']:.3g} exceeds the tolerance 1e-09 (emulated)"
    assert verify["failures"] == [f"max_rel {verify['max_rel']:.3g} exceeds the tolerance 1e-09"]
