"""Models that crash, exit, hang or allocate without bound cost their own variants, never the sweep:
under --jobs 1, --jobs 2 and a Dask cluster, the other variants are ok, the bad ones fail with the
cause on one line, and the report and the journal are complete."""

from __future__ import annotations

import json
import re

import pytest

from mlbench.cli.main import main
from mlbench.run.runner import run
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

FAULTS = f"""\
version: 1
name: faults
models:
  - name: good
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
  - name: segv
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: segfault}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: exits
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: exit}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: hangs
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: hang}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: hog
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: allocate}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: noisy
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: raise}}
    inputs: [{{name: x, shape: [1, 8]}}]
targets:
  - backend: torch
  - backend: onnxruntime
exclude:
  - {{model: [hangs, hog, noisy], backend: onnxruntime}}  # torch.export would trace their faults with fake tensors
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
limits: {{export_s: 60, measure_s: 5, memory_gb: 3}}
cache: {{dir: cache}}
report: {{dir: out}}
history: {{enabled: false}}
"""

NOISY_AT = f"{ROOT}/tests/faulty_models.py:46 in _raise"  # the user's innermost frame, outside the pipeline's folder
MEMORY = "out of memory: over the limit of 3 GB (limits.memory_gb, peak resident memory seen "
MEMORY_TAIL = (r"\d+\.\d [kMG]B\); {stage}: " + re.escape(f"{ROOT}/tests/faulty_models.py:")
               + r"\d+ in _allocate: RuntimeError: \[enforce fail at alloc_cpu\.cpp:")
EXPECTED = {
    "good/torch/cpu/float32": ("ok", None),
    "good/onnxruntime/float32/cpu": ("ok", None),
    "segv/torch/cpu/float32": ("failed", "the process was killed by SIGSEGV (segmentation fault) while measuring"),
    "segv/onnxruntime/float32/cpu": ("failed", "the process was killed by SIGSEGV (segmentation fault) while "
                                               "exporting segv/onnxruntime/float32"),
    "exits/torch/cpu/float32": ("failed", "the process exited with code 3 while measuring"),
    "exits/onnxruntime/float32/cpu": ("failed", "the process exited with code 3 while exporting "
                                                "exits/onnxruntime/float32"),
    "hangs/torch/cpu/float32": ("failed", "timed out after 5 s while measuring (limits.measure_s)"),
    "hog/torch/cpu/float32": ("failed", MEMORY.format(stage="measure")),
    "noisy/torch/cpu/float32": ("failed", f"measure: {NOISY_AT}: ValueError: first line | with a pipe"),
}


def outcomes(report) -> dict[str, tuple[str, str | None]]:
    return {r.variant_id: (r.status, r.error) for r in report.records}


def check(report, tmp_path) -> None:
    got = outcomes(report)
    assert got.keys() == EXPECTED.keys()
    for variant_id, (status, error) in EXPECTED.items():
        assert got[variant_id][0] == status, (variant_id, got[variant_id])
        if error is None:
            assert got[variant_id][1] is None
        else:
            assert got[variant_id][1].startswith(error), (variant_id, got[variant_id])
    assert report.summary == {"ok": 2, "failed": 7, "skipped": 0} and report.finished is not None
    journal = [json.loads(line) for line in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]
    journaled: dict[str, dict] = {}
    for entry in journal:  # append-only: a figure measured again at the end of the run is journaled again
        if "record" in entry:
            assert entry["record"]["variant_id"] not in journaled or "remeasured" in entry["record"]["details"]
            journaled[entry["record"]["variant_id"]] = entry["record"]
    assert sorted(journaled) == sorted(EXPECTED)
    assert {v: (r["status"], r["error"]) for v, r in journaled.items()} == got
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {r["variant_id"]: (r["status"], r["error"]) for r in written["records"]} == got


@pytest.mark.timeout(300)  # the limits below are what end the hang: a lost one fails here, never hangs CI
@pytest.mark.slow
def test_faults_cost_their_own_variants_with_one_job(write_pipeline, tmp_path, capsys):
    path = write_pipeline(FAULTS)
    assert main(["run", "-q", "--jobs", "1", str(path)]) == 1  # finished, with failed variants
    assert capsys.readouterr().err.endswith(f"2 ok, 7 failed; 1 exported, 2 timed; reports in {tmp_path / 'out'}\n")
    check(_report(tmp_path), tmp_path)
    hog = outcomes(_report(tmp_path))["hog/torch/cpu/float32"][1]
    assert re.match(re.escape(MEMORY) + MEMORY_TAIL.format(stage="measure"), hog), hog  # the peak the child saw
    noisy = outcomes(_report(tmp_path))["noisy/torch/cpu/float32"][1]
    assert noisy == f"measure: {NOISY_AT}: ValueError: first line | with a pipe"  # one line, never the second
    markdown = (tmp_path / "out" / "report.md").read_text()
    noisy_md = NOISY_AT.replace(" _", " \\_")  # Markdown's emphasis escaped where it could open
    assert f"| `torch/cpu/float32` | **failed** | measure: {noisy_md}: ValueError: first line \\| with a pipe |" in (
        markdown.split("### noisy")[1])  # the PR-width table drops the empty columns
    assert f"| measure: {noisy_md}: ValueError: first line \\| with a pipe |" in markdown and "<b>" not in markdown


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_faults_cost_their_own_variants_with_two_jobs(write_pipeline, tmp_path):
    report = run(load_pipeline(write_pipeline(FAULTS)), jobs=2)
    check(report, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_faults_cost_their_own_variants_on_a_dask_cluster(write_pipeline, tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"measure": 1},
                      dashboard_address=None) as cluster:
        report = run(load_pipeline(write_pipeline(FAULTS)), executor=cluster.scheduler_address)
    check(report, tmp_path)


def _report(tmp_path):
    from mlbench.records import RunReport

    return RunReport.model_validate_json((tmp_path / "out" / "report.json").read_text())
