"""Shared fixtures: write pipeline files into a temp folder, find the repository's files.

Tests that need the ML stack (torch, coremltools, onnxruntime) carry the `torch` marker, on the
test or for their whole module (`pytestmark = pytest.mark.torch`); without torch they are skipped,
so the light tests (config, matrix, hashing, compare, reports, history...) run on a bare install.
Select either part with `-m torch` / `-m "not torch"`.
"""

from __future__ import annotations

import textwrap
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TINY_PIPELINE = """\
version: 1
name: tiny
models:
  - name: tiny_cnn
    source: {root}/examples/tiny_cnn.py:TinyCNN
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
  - backend: torch
    device: [cpu]
    precision: [float32]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0}}
report: {{dir: out}}
"""


@cache
def _torch_missing() -> str | None:
    """Why `torch`-marked tests cannot run here, or None when torch imports."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"needs torch (the ML stack: pip install -e .), not importable here: {exc}"
    return None


@pytest.hookimpl(trylast=True)  # after -m has deselected: torch is imported only if a selected test needs it
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test is `torch` when it, its class or its module carries the marker (as `-m torch` sees it);
    without torch such a test is skipped, saying why."""
    for item in items:
        if item.get_closest_marker("torch") is not None and (reason := _torch_missing()) is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _private_cache_and_history(tmp_path_factory, monkeypatch):
    """Tests never touch the user's cache or run history."""
    root = tmp_path_factory.mktemp("mlbench-home")
    monkeypatch.setenv("MLBENCH_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("MLBENCH_HISTORY", str(root / "history.sqlite"))


@pytest.fixture
def write_pipeline(tmp_path):
    """Write YAML text (dedented) to tmp_path/NAME and return the path."""

    def write(text: str, name: str = "pipeline.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def tiny_pipeline_text() -> str:
    return TINY_PIPELINE.format(root=ROOT)


CORE_ML_TINY = """\
version: 1
name: cm
models:
  - name: tiny
    source: {root}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: torch
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]
    estimate_on: [a17pro, m1]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown, html]}}
"""


@pytest.fixture(scope="session")
def core_ml_tiny_run(tmp_path_factory):
    """One run of the tiny CNN through Core ML (2 exports serve 8 variants, estimated on two chips) beside eager
    PyTorch, shared by the tests that only read what such a run reports: (report, its folder). Built once per
    test process; its cache and history stay in its own folder, like every test's."""
    from mlbench.config.load import load_pipeline
    from mlbench.run.runner import run

    root = tmp_path_factory.mktemp("core-ml-tiny")
    path = root / "pipeline.yaml"
    path.write_text(CORE_ML_TINY.format(root=ROOT), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:  # the autouse redirect is per test: this runs before it
        patch.setenv("MLBENCH_CACHE_DIR", str(root / "cache"))
        patch.setenv("MLBENCH_HISTORY", str(root / "history.sqlite"))
        report = run(load_pipeline(path))
    return report, root
