"""The benchmark scripts still run against the current API (figures are theirs to print, not ours)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch  # both scripts run real models


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script is executed
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_harness_overhead_measures_both_sides():
    bench = load("harness_overhead")
    mine, bare, ratio = bench.harness_ratio("mobilenet_v3_small", rounds=1, warmup=1, repeats=3)
    assert mine > 0 and bare > 0 and ratio > 0
    harness_ns, bare_ns = bench.per_call_overhead_ns(calls=1000)
    assert harness_ns > 0 and bare_ns > 0


@pytest.mark.slow
def test_cache_benchmark_counts_exports(write_pipeline, tiny_pipeline_text, capsys):
    bench = load("cache")
    text = tiny_pipeline_text.replace("targets:", "targets:\n  - backend: coreml\n    precision: float16")
    pipeline = load_pipeline(write_pipeline(text))
    cold, wall = bench.timed_run(pipeline)
    warm, _ = bench.timed_run(pipeline)
    assert bench.exports_performed(cold) == 1 and bench.exports_performed(warm) == 0
    bench.describe("cold", cold, wall)
    assert "exports performed   1" in capsys.readouterr().out


@pytest.mark.slow
def test_ab_noise_runs_a_trial(capsys):
    bench = load("ab_noise")
    bench.main(["--trials", "1", "--rounds", "8", "--calls", "2", "--warmup", "0"])
    out = capsys.readouterr().out
    assert "trial  1: A=A ab " in out and "latency.best:+2%:" in out
    assert "A=A (no change): no regression — ab " in out and "head 5% slower : caught        — ab " in out


@pytest.mark.slow
def test_export_overhead_pairs_plain_and_mlbench(write_pipeline, tiny_pipeline_text, capsys):
    bench = load("parallel_export")
    text = tiny_pipeline_text.replace("  - backend: torch\n    device: [cpu]\n    precision: [float32]\n",
                                      "  - backend: coreml\n    precision: float16\n")
    rows = bench.export_overhead(write_pipeline(text))
    assert [r[0] for r in rows] == ["tiny_cnn/coreml/float16/none"]
    assert rows[0][1] > 0 and rows[0][2] > 0


@pytest.mark.slow
def test_zoo_coverage_counts_both_exporters(capsys, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bench = load("zoo_coverage")
    rows = bench.main(["--models", "clip_text"])
    assert [r.name for r in rows] == ["clip_text"] and rows[0].mlbench.ok and rows[0].plain is not None
    out = capsys.readouterr().out
    assert "mlbench export_coreml:                        1/1 converted" in out
    assert len(bench.torchvision_models()) > 50  # classification and segmentation under 100M parameters


@pytest.mark.slow
def test_executorch_vs_times_the_three_runtimes_on_one_model(capsys):
    pytest.importorskip("executorch.runtime", reason="the executorch extra is not installed")
    bench = load("executorch_vs")
    bench.main(["--models", "lstm", "--repeats", "2", "--min-time", "0"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| lstm |"))
    assert "—" not in row.split("|")[2:5] and row.count("× eager") >= 2
    head = next(line for line in out.splitlines() if line.startswith("| model |"))
    assert "litert-xnnpack median (p90), ms" in head  # measured where the litert extra is, else its skip reason
    assert "load average before" in out


@pytest.mark.slow
def test_stability_grading_runs_a_quiet_trial_and_judges_figures_by_their_reference(capsys):
    bench = load("stability_grading")
    bench.main(["--trials", "1", "--half", "quiet"])
    out = capsys.readouterr().out
    assert "quiet trial  1: conv_linear " in out and "; tiny_cnn " in out
    assert "quiet half: 1 trials; figures marked: " in out and " of 2; trials with a figure within 10% " in out
    stable = bench.Figure("m", 1.05, "stable", stalled=False, remeasured=False)
    assert not bench.off(stable, 1.0, 0.10) and bench.off(stable, 0.9, 0.10) and not stable.marked
