"""With several jobs, a variant whose measurement times nothing on this machine (Core ML off macOS) is
measured in the export phase by the child that exported it; timed variants still wait for the phase
where measurements run alone. Faults and Ctrl-C in that phase behave as everywhere else."""

from __future__ import annotations

import json
import sys

import pytest

from mlbench.cli.main import main
from mlbench.run.runner import run
from mlbench.validate import load_pipeline
from tests.conftest import ROOT, TINY_AND_SEGFAULTING_MODELS

pytest.importorskip("coremltools")
pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: early
models:
{TINY_AND_SEGFAULTING_MODELS}targets:
  - backend: torch
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, all]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
limits: {{export_s: 120, measure_s: 60}}
cache: {{dir: cache}}
report: {{dir: out}}
history: {{enabled: false}}
"""


def journal(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS Core ML variants are timed")
@pytest.mark.slow
def test_untimed_variants_are_measured_beside_the_exports_and_faults_stay_their_own(write_pipeline, tmp_path):
    report = run(load_pipeline(write_pipeline(PIPELINE)), jobs=2)
    got = {r.variant_id: (r.status, r.error) for r in report.records}
    assert got["tiny/torch/cpu/float32"] == ("ok", None)
    for precision in ("float32", "float16"):
        for units in ("cpu_only", "all"):
            record = next(r for r in report.records if r.variant_id == f"tiny/coreml/{precision}/{units}/none")
            assert record.status == "ok" and record.verify is not None and record.verify.source == "emulated"
            assert record.metrics["latency.median"].value is None  # nothing timed: absent with its reason
            assert not record.artifact.cache_hit  # built by this run, in the same child that measured it
        # the model's forward crashes its exporting child (the trace calls it): that artifact's variants
        # fail with the cause, the same words as with one job
        for units in ("cpu_only", "all"):
            status, error = got[f"segv/coreml/{precision}/{units}/none"]
            assert status == "failed"
            assert error.startswith(f"the process was killed by SIGSEGV (segmentation fault) while exporting "
                                    f"segv/coreml/{precision}")
    assert got["segv/torch/cpu/float32"][0] == "failed"
    assert got["segv/torch/cpu/float32"][1].startswith("the process was killed by SIGSEGV (segmentation fault) "
                                                       "while measuring")
    assert report.summary == {"ok": 5, "failed": 5, "skipped": 0}

    entries = journal(tmp_path)
    order = [e["record"]["variant_id"] if "record" in e else "started " + e["started"]["variant_id"]
             for e in entries if "record" in e or "started" in e]
    first_timed = order.index("started tiny/torch/cpu/float32")
    assert all("/coreml/" in entry for entry in order[:first_timed])  # every Core ML record came first
    assert sum("/coreml/" in entry and not entry.startswith("started") for entry in order[:first_timed]) == 8
    assert "started segv/torch/cpu/float32" in order[first_timed:]


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS Core ML variants are timed")
@pytest.mark.slow
def test_one_job_measures_the_same_variants_in_plan_order(write_pipeline, tmp_path):
    text = PIPELINE.replace("  - name: segv\n    source: " + f"{ROOT}/tests/faulty_models.py:Faulty\n"
                            "    kwargs: {fault: segfault}\n    inputs: [{name: x, shape: [1, 8]}]\n", "")
    report = run(load_pipeline(write_pipeline(text)), jobs=1)
    assert report.summary == {"ok": 5, "failed": 0, "skipped": 0}
    records = [e["record"]["variant_id"] for e in journal(tmp_path) if "record" in e]
    assert records[0] == "tiny/torch/cpu/float32"  # no early phase with one job: the plan's order


@pytest.mark.slow
def test_ctrl_c_in_the_export_phase_writes_a_partial_report(write_pipeline, tmp_path, capsys):
    (tmp_path / "interrupt.py").write_text(  # built fine (the export order reads its size); its forward interrupts
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        raise KeyboardInterrupt\n")
    text = PIPELINE.replace("  - name: segv\n", "  - name: zz_interrupt\n    source: interrupt.py:Model\n"
                                                "    inputs: [{name: x, shape: [1]}]\n  - name: segv\n")
    text = text.replace("  - backend: torch\n", "").replace("precision: [float32, float16]", "precision: float32")
    path = write_pipeline(text)
    assert main(["run", "-q", "--jobs", "2", str(path)]) == 130
    err = capsys.readouterr().err
    assert err.endswith(f"run `mlbench run {path} --resume` to finish the rest\n")
    partial = json.loads((tmp_path / "out" / "report.json").read_text())
    assert partial["finished"] is None


def test_core_ml_times_its_calls_only_on_macos(monkeypatch):
    from mlbench.backends.coreml.backend import CoremlBackend
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.store.cache import ArtifactCache

    config = PipelineConfig.model_validate({"version": 1, "name": "x", "models": [
        {"name": "m", "source": "torchvision:resnet18", "inputs": [{"name": "x", "shape": [1, 3, 8, 8]}]}],
        "targets": [{"backend": "coreml"}]})
    backend = CoremlBackend(config.targets[0], config, ArtifactCache(ROOT / "unused-cache"))
    monkeypatch.setattr(sys, "platform", "darwin")
    assert backend.measure_times(None) is True
    monkeypatch.setattr(sys, "platform", "linux")
    assert backend.measure_times(None) is False
