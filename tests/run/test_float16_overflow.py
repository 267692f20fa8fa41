"""A sweep where one float16 variant overflows: every report is written, the other variants are ok, and
the failure names the overflow (the output in eager float32, the op where the emulated program first
passes 65504) in the record, its metrics and the Markdown, on a first run and on `--resume`."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from mlbench.cli.main import main
from mlbench.overflow import OpOverflow, float16_overflow, short
from tests.conftest import ROOT

MODELS = """\
import torch


class OutputOverflow(torch.nn.Module):
    def forward(self, x):
        h = x * 300.0
        return h * h  # 9e4 in eager float32: inf in float16


class InnerOverflow(torch.nn.Module):
    def forward(self, x):
        h = x * 300.0
        return h * h / 1.0e4  # 9 in eager float32, but h * h is inf in a float16 program
"""

PIPELINE = """\
version: 1
name: overflow
models:
  - name: out
    source: models.py:OutputOverflow
    inputs: [{name: x, shape: [1, 8], fill: ones}]
  - name: inner
    source: models.py:InnerOverflow
    inputs: [{name: x, shape: [1, 8], fill: ones}]
targets:
  - backend: torch
    precision: [float16]
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only]
latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}
cache: {dir: cache}
history: {enabled: false}
report: {dir: out, formats: [json, markdown, html]}
"""

EAGER = "float16 overflow: output 'output' reaches 9e4 in eager float32 (float16 max 65504)"


def test_overflow_sentences():
    pairs = [([("y", np.array([[75000.0, 1.0]]))], [np.array([[np.inf, 1.0]], dtype=np.float16)])]
    assert float16_overflow(pairs) == "float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504)"
    assert float16_overflow(pairs, OpOverflow("mul", "h_sq", 1.2e5)) == (
        "float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504); first at op mul 'h_sq' "
        "(1.2e5)")
    inner = [([("y", np.array([9.0]))], [np.array([np.inf])])]
    assert float16_overflow(inner) is None  # inf with no eager value past 65504: not known to be float16's
    assert float16_overflow(inner, OpOverflow("mul", "h_sq", 9e4)) == (
        "float16 overflow: op mul 'h_sq' reaches 9e4 in the emulated float16 program (float16 max 65504)")
    finite = [([("y", np.array([75000.0]))], [np.array([75000.0])])]
    assert float16_overflow(finite) is None  # a float32 export that holds 7.5e4 did not overflow
    assert [short(v) for v in (75000.0, 1.23e6, 9e4, 0.5)] == ["7.5e4", "1.2e6", "9e4", "0.5"]


@pytest.mark.torch
@pytest.mark.slow
def test_a_sweep_with_an_overflowing_float16_variant_writes_every_report(tmp_path, monkeypatch, capsys):
    pytest.importorskip("coremltools")
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    (tmp_path / "sweep.yaml").write_text(PIPELINE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    schema = json.loads((ROOT / "schemas" / "report.schema.json").read_text(encoding="utf-8"))

    for args in (["run", "sweep.yaml"], ["run", "sweep.yaml", "--resume"]):
        for name in ("report.json", "report.md", "report.html"):
            (out / name).unlink(missing_ok=True)
        assert main([*args, "--quiet"]) == 1  # failed variants, not a crash
        last = capsys.readouterr().err.splitlines()[-1]  # the statuses, what was done and reused, the folder
        reused = " (2 cached)" if "--resume" in args else ""  # a resume reuses the two eager records' timings
        assert last.startswith("2 ok, 4 failed; ") and last.endswith(f" timed{reused}; reports in {out}")
        assert all((out / name).is_file() for name in ("report.json", "report.md", "report.html"))
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        jsonschema.validate(report, schema)
        status = {r["variant_id"]: r["status"] for r in report["records"]}
        assert status == {"out/torch/cpu/float16": "failed", "inner/torch/cpu/float16": "failed",
                          "out/coreml/float32/cpu_only/none": "ok", "out/coreml/float16/cpu_only/none": "failed",
                          "inner/coreml/float32/cpu_only/none": "ok", "inner/coreml/float16/cpu_only/none": "failed"}
        errors = {r["variant_id"]: r["error"] for r in report["records"] if r["error"]}
        assert errors["out/torch/cpu/float16"] == f"verify: {EAGER}; max_rel inf"
        # eager float16 overflows inside too, but only the interpreter can say where
        assert errors["inner/torch/cpu/float16"] == ("verify: max_rel inf exceeds the tolerance 0.01; "
                                                     "output 'output' SNR -inf dB is below the floor 30 dB")
        assert re.fullmatch(re.escape(f"verify: {EAGER}; first at op mul '") + r"\w+"
                            + re.escape("' (9e4); max_rel inf (emulated)"), errors["out/coreml/float16/cpu_only/none"])
        assert re.fullmatch(re.escape("verify: float16 overflow: op mul '") + r"\w+" + re.escape(
            "' reaches 9e4 in the emulated float16 program (float16 max 65504); max_rel inf (emulated)"),
            errors["inner/coreml/float16/cpu_only/none"])
        overflowed = next(r for r in report["records"] if r["variant_id"] == "out/coreml/float16/cpu_only/none")
        why = overflowed["verify"]["overflow"]
        assert overflowed["metrics"]["verify.max_rel"] == {"value": None, "unit": "rel", "source": None,
                                                           "reason": f"inf: {why}"}
        assert overflowed["verify"]["max_rel"] is None and overflowed["verify"]["not_finite"]["max_rel"] == f"inf: {why}"
        assert why in (out / "report.md").read_text(encoding="utf-8")
