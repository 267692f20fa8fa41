"""Shared fixtures: write pipeline files into a temp folder, find the repository's files."""

from __future__ import annotations

import textwrap
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
