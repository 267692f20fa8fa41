"""A history is read defensively: SQLite keeps whatever it is given (a text latency), and a file that is not
mlbench's (its own user_version, its own tables) is refused in one line and never written by a command that
only reads."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from mlbench.cli.main import main
from mlbench.store.history import HistoryError, SeriesKey, metric_series, record_run
from tests.store.test_history import _run


def _damaged(tmp_path):
    db = tmp_path / "h.sqlite"
    record_run(_run("run0000001", "2026-01-01T00:00:00+00:00", 1.0), tmp_path / "p.yaml", db)
    record_run(_run("run0000002", "2026-01-02T00:00:00+00:00", 1.5), tmp_path / "p.yaml", db)
    with sqlite3.connect(db) as conn:  # a value of the wrong type: appended, as a bug or a hand could
        conn.execute("INSERT INTO metrics VALUES ('run0000002', 'o/torch/cpu', 'latency.median', 'fast', 'ms', "
                     "'measured', NULL)")
    return db


def test_a_text_value_in_the_history_is_left_out_with_one_warning_naming_the_run(tmp_path, caplog):
    db = _damaged(tmp_path)
    series = metric_series(db, "latency.median")
    assert [p.value for p in series[SeriesKey("p", "m/torch/cpu")]] == [1.0, 1.5]
    assert SeriesKey("p", "o/torch/cpu") not in series
    assert [r.getMessage() for r in caplog.records] == [
        f"run run0000002 in the history {db}: latency.median of o/torch/cpu is 'fast', not a number; left out of "
        "the trends"]


def test_mlbench_history_reads_a_damaged_history(tmp_path, capsys):
    db = _damaged(tmp_path)
    assert main(["history", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert "2 runs in" in captured.out and "m/torch/cpu" in captured.out
    assert captured.err == (f"warning: run run0000002 in the history {db}: latency.median of o/torch/cpu is 'fast', "
                            "not a number; left out of the trends\n")


def _foreign(tmp_path, kind: str):
    path = tmp_path / f"{kind}.sqlite"
    with sqlite3.connect(path) as conn:
        if kind == "user_version":
            conn.execute("PRAGMA user_version = 999")
            conn.execute("CREATE TABLE notes (text TEXT)")
        else:
            conn.execute("CREATE TABLE runs (id INTEGER, name TEXT)")
            conn.execute("INSERT INTO runs VALUES (1, 'theirs')")
    return path


@pytest.mark.parametrize("kind", ["user_version", "own_runs"])
@pytest.mark.parametrize("command", ["history", "compare"])
def test_a_foreign_database_is_refused_in_one_line_and_never_written(tmp_path, capsys, kind, command):
    db = _foreign(tmp_path, kind)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    argv = ["history", "--db", str(db)] if command == "history" else ["compare", "last", "last", "--db", str(db)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    why = {"user_version": "(its user_version is 999; mlbench leaves it 0):",
           "own_runs": ": it holds tables of its own (runs);"}[kind]
    assert err.splitlines() == [f"{db}: not an mlbench history database {why} give mlbench a file of its own"
                                .replace("database :", "database:")]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name]  # no -journal, no -wal left beside it


def test_a_run_refuses_to_add_its_tables_to_a_foreign_database(tmp_path):
    db = _foreign(tmp_path, "own_runs")
    with pytest.raises(HistoryError, match="it holds tables of its own"):
        record_run(_run("run0000001", "2026-01-01T00:00:00+00:00", 1.0), tmp_path / "p.yaml", db)
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["runs"]
