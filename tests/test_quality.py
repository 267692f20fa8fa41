"""The quality floor: ruff and mypy pass on the repository, with the settings in pyproject.toml.

Both come with the `dev` extra (`pip install -e ".[dev]"`, which CI installs); without them these
tests are skipped, saying so. .pre-commit-config.yaml runs the same two on every commit.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import ROOT

LINTED = ["mlbench", "tests", "benchmarks", "examples"]


def _tool(module: str) -> list[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (it comes with the dev extra: pip install -e '.[dev]')")
    return [sys.executable, "-m", module]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_ruff_is_clean():
    result = _run([*_tool("ruff"), "check", "--no-fix", *LINTED])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.torch  # mypy reads the types of the installed ML stack: without it every torch import is an error
def test_mypy_is_clean():
    result = _run(_tool("mypy"))  # the packages and settings come from [tool.mypy]
    assert result.returncode == 0, result.stdout + result.stderr
