"""The benchmark scripts still run against the current API (figures are theirs to print, not ours)."""

from __future__ import annotations

import importlib.util

import pytest

from mlbench.config.load import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch  # both scripts run real models


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_harness_overhead_measures_both_sides():
    bench = load("harness_overhead")
    mine, bare, ratio = bench.harness_ratio("mobilenet_v3_small", rounds=1, warmup=1, repeats=3)
    assert mine > 0 and bare > 0 and ratio > 0
    harness_ns, bare_ns = bench.per_call_overhead_ns(calls=1000)
    assert harness_ns > 0 and bare_ns > 0


def test_cache_benchmark_counts_exports(write_pipeline, tiny_pipeline_text, capsys):
    bench = load("cache")
    text = tiny_pipeline_text.replace("targets:", "targets:\n  - backend: coreml\n    precision: float16")
    pipeline = load_pipeline(write_pipeline(text))
    cold, wall = bench.timed_run(pipeline)
    warm, _ = bench.timed_run(pipeline)
    assert bench.exports_performed(cold) == 1 and bench.exports_performed(warm) == 0
    bench.describe("cold", cold, wall)
    assert "exports performed   1" in capsys.readouterr().out
