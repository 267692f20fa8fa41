"""Tests never touch the user's home: conftest redirects HOME, the XDG folders and mlbench's variables for the
whole session before any fixture runs (module-scoped ones included), and this test, run last, checks the real
home's history and cache against what was there when the session started."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlbench.store.cache import default_cache_dir
from mlbench.store.history import default_history_path
from tests.conftest import HOME_ENV, SNAPSHOT_ENV
from tests.home_check import home_problems


@pytest.mark.runs_last
def test_the_users_history_and_cache_were_untouched(tmp_path_factory, monkeypatch):
    snapshot_path = Path(os.environ[SNAPSHOT_ENV])
    snapshot = json.loads(snapshot_path.read_text(encoding="utf-8"))
    home = Path(snapshot["session_home"])
    for name in HOME_ENV:
        assert Path(os.environ[name]).is_relative_to(home), name
    monkeypatch.delenv("MLBENCH_CACHE_DIR")
    monkeypatch.delenv("MLBENCH_HISTORY")
    assert default_cache_dir().is_relative_to(home)  # even a test that drops mlbench's variables stays inside
    assert default_history_path().is_relative_to(home)
    assert home_problems(snapshot_path, tmp_path_factory.getbasetemp()) == []
