"""Shared fixtures: write pipeline files into a temp folder, find the repository's files.

Tests that need the ML stack (torch, coremltools, onnxruntime) carry the `torch` marker, on the
test or for their whole module (`pytestmark = pytest.mark.torch`); without torch they are skipped,
so the light tests (config, matrix, hashing, compare, reports, history...) run on a bare install.
Select either part with `-m torch` / `-m "not torch"`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
import time
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
"""The tests folder: its shared parts (fake_coremltools, toy_backend, golden, models) sit here, whatever a
test file's depth."""
HOME_ENV = ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
SNAPSHOT_ENV = "MLBENCH_TEST_REAL_HOME"  # the real home's snapshot, for tests/test_home_untouched.py


def _real_home_snapshot() -> dict:
    """Where mlbench keeps the user's cache and history with the environment the tests were started in, and
    what is there now (the session ends by checking they are as they were)."""
    from mlbench.store.cache import default_cache_dir
    from mlbench.store.history import default_history_path

    cache_dir, history = default_cache_dir(), default_history_path()
    return {"started": time.time(), "cache_dir": str(cache_dir), "cache_existed": cache_dir.exists(),
            "history": str(history), "history_existed": history.exists()}


_SESSION_HOME = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Before any fixture or test module runs (module- and session-scoped fixtures included): HOME, the XDG
    folders and mlbench's own variables point into a private folder for the whole session, so no test can
    reach the user's cache or run history. xdist workers inherit the redirection from the controller."""
    if SNAPSHOT_ENV in os.environ:  # an xdist worker: the controller has done it
        return
    home = Path(tempfile.mkdtemp(prefix="mlbench-test-home-"))
    snapshot = {**_real_home_snapshot(), "session_home": str(home), "real_env": {k: os.environ.get(k) for k in (
        *HOME_ENV, "MLBENCH_CACHE_DIR", "MLBENCH_HISTORY")}}
    (home / "real-home.json").write_text(json.dumps(snapshot), encoding="utf-8")
    for name in HOME_ENV:
        os.environ[name] = str(home / name.lower())
    os.environ["MLBENCH_CACHE_DIR"] = str(home / "mlbench-cache")
    os.environ["MLBENCH_HISTORY"] = str(home / "mlbench-history.sqlite")
    os.environ[SNAPSHOT_ENV] = str(home / "real-home.json")
    config.stash[_SESSION_HOME] = home


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The controller's own last word (under xdist a worker's last test may not be the session's): the
    user's history holds no run of this session's pipelines, and an absent cache stayed absent."""
    if _SESSION_HOME not in session.config.stash:
        return
    from tests.home_check import home_problems

    factory = getattr(session.config, "_tmp_path_factory", None)
    problems = home_problems(Path(os.environ[SNAPSHOT_ENV]), factory.getbasetemp() if factory else None)
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in problems:
            if reporter is not None:
                reporter.write_line(f"ERROR: {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_SESSION_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)

TINY_AND_SEGFAULTING_MODELS = f"""\
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
  - name: segv
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: segfault}}
    inputs: [{{name: x, shape: [1, 8]}}]
"""
"""A pipeline's `models:` entries: the tiny CNN, and a model whose forward segfaults (its exporting or
measuring child dies)."""

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
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
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
    without torch such a test is skipped, saying why. The check that the user's home was left alone runs
    last."""
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)
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
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown, html]}}
"""


@pytest.fixture(scope="session")
def core_ml_tiny_run(tmp_path_factory):
    """One run of the tiny CNN through Core ML (2 exports serve 8 variants, estimated on two chips) beside eager
    PyTorch, shared by the tests that only read what such a run reports: (report, its folder). Built once per
    test process; its cache and history stay in its own folder, like every test's."""
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    root = tmp_path_factory.mktemp("core-ml-tiny")
    path = root / "pipeline.yaml"
    path.write_text(CORE_ML_TINY.format(root=ROOT), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:  # the autouse redirect is per test: this runs before it
        patch.setenv("MLBENCH_CACHE_DIR", str(root / "cache"))
        patch.setenv("MLBENCH_HISTORY", str(root / "history.sqlite"))
        report = run(load_pipeline(path))
    return report, root
