"""Did the test session leave the user's home alone? Read-only checks against the snapshot conftest took at the
start, before redirecting HOME, the XDG folders and mlbench's variables (tests/test_home_untouched.py and the
controller's session finish use them)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path


def session_root(basetemp: Path) -> Path:
    """The session's temporary root: an xdist worker's basetemp is a `popen-gwN` folder inside it."""
    return basetemp.parent if basetemp.name.startswith("popen-gw") else basetemp


def home_problems(snapshot_path: Path, basetemp: Path | None) -> list[str]:
    snapshot = json.loads(snapshot_path.read_text(encoding="utf-8"))
    problems = []
    cache_dir, history = Path(snapshot["cache_dir"]), Path(snapshot["history"])
    if not snapshot["cache_existed"] and cache_dir.exists():
        problems.append(f"the test run created the user's artifact cache {cache_dir}")
    if not snapshot["history_existed"] and history.exists():
        problems.append(f"the test run created the user's run history {history}")
    elif history.exists() and basetemp is not None:
        root = str(session_root(basetemp))
        connection = sqlite3.connect(f"{history.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = connection.execute("SELECT pipeline_name, pipeline_path FROM runs WHERE pipeline_path LIKE ?",
                                      (root + "%",)).fetchall()
        except sqlite3.Error:
            rows = []  # not a history mlbench can read: nothing of ours in it
        finally:
            connection.close()
        problems += [f"the test run added a run of pipeline {name} ({path}) to the user's history {history}"
                     for name, path in rows]
    return problems
