"""Run history in a real SQLite file: append-only, migrated, git commits, and `mlbench history`."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess

import pytest

from mlbench.cli.main import main
from mlbench.store.history import (
    SCHEMA_VERSION,
    HistoryError,
    SeriesKey,
    connect,
    list_runs,
    load_report,
    metric_series,
    record_run,
    resolve,
)
from tests.compare.test_comparison import rec, run_of


def _run(run_id: str, created: str, median: float):
    report = run_of([rec("m/torch/cpu", [median] * 6), rec("n/torch/cpu", [median * 2] * 6)], run_id)
    return report.model_copy(update={"created": created})


def test_runs_round_trip_and_trends(tmp_path):
    db = tmp_path / "h.sqlite"
    first, second = _run("run0000001", "2026-01-01T00:00:00+00:00", 1.0), _run("run0000002", "2026-01-02T00:00:00+00:00", 1.5)
    record_run(second, tmp_path / "p.yaml", db)  # recorded out of order: listing follows `created`
    record_run(first, tmp_path / "p.yaml", db)
    assert [r.run_id for r in list_runs(db)] == ["run0000001", "run0000002"]
    assert [r.run_id for r in list_runs(db, limit=1)] == ["run0000002"]
    assert list_runs(db, model="nope") == []
    loaded, row = load_report(db, "run0000001")
    assert loaded == first and row.summary == first.summary
    assert loaded.records[0].latency.samples == [1.0] * 6  # raw samples kept for the noise test
    series = metric_series(db, "latency.median")
    assert [p.value for p in series[SeriesKey("p", "m/torch/cpu")]] == [1.0, 1.5]
    assert [p.value for p in series[SeriesKey("p", "n/torch/cpu")]] == [2.0, 3.0]
    assert resolve(db, "last")[0].run_id == "run0000002"
    assert resolve(db, "last", exclude=("run0000002",))[0].run_id == "run0000001"
    with pytest.raises(HistoryError, match="no earlier run of pipeline 'p' on this machine"):
        resolve(db, "last-on-this-machine", pipeline="p")  # these runs name a CPU called "x"
    with pytest.raises(HistoryError, match="no earlier run of pipeline 'other'"):
        resolve(db, "last", pipeline="other")
    with pytest.raises(HistoryError, match="ambiguous"):
        load_report(db, "run0")


def test_history_is_append_only(tmp_path):
    db = tmp_path / "h.sqlite"
    report = _run("run0000001", "2026-01-01T00:00:00+00:00", 1.0)
    record_run(report, tmp_path / "p.yaml", db)
    changed = report.model_copy(update={"created": "2027-01-01T00:00:00+00:00"})
    with pytest.raises(HistoryError, match="run run0000001 is already in the history; it is kept as it was"):
        record_run(changed, tmp_path / "p.yaml", db)
    assert load_report(db, "run0000001")[0] == report
    with connect(db) as conn:
        for sql in ("UPDATE runs SET created = 'x'", "DELETE FROM metrics", "UPDATE records SET status = 'ok'"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(sql)
    assert load_report(db, "run0000001")[0] == report


def test_an_old_schema_is_migrated_and_its_runs_kept(tmp_path):
    db = tmp_path / "h.sqlite"
    with connect(db, upto=1) as conn:  # a database written by the first schema
        conn.execute("INSERT INTO records VALUES ('old', 'm/torch/cpu', 'm', 'torch', 'ok', NULL)")
        assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == 1
        conn.execute("UPDATE records SET status = 'failed'")  # no triggers yet in version 1
    with connect(db) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        assert conn.execute("SELECT status FROM records WHERE run_id = 'old'").fetchone() == ("failed",)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM records")


def test_unusable_databases_are_one_line_errors(tmp_path):
    newer = tmp_path / "newer.sqlite"
    with connect(newer) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (99, 'future')")
    with pytest.raises(HistoryError) as info:
        list_runs(newer)
    assert str(info.value) == f"{newer}: history schema version 99 is newer than this mlbench knows ({SCHEMA_VERSION}); upgrade mlbench"
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(HistoryError, match="not a usable history database: file is not a database"):
        list_runs(junk)


def test_git_commit_is_recorded_inside_a_repo_and_never_fails_without_git(tmp_path, monkeypatch):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    (repo / "p.yaml").write_text("x")
    for args in (["init", "-q"], ["add", "p.yaml"], ["commit", "-qm", "first"]):
        subprocess.run([git, "-C", str(repo), *args], check=True, env=env)
    commit = subprocess.run([git, "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    db = tmp_path / "h.sqlite"
    record_run(_run("inrepo0001", "2026-01-01T00:00:00+00:00", 1.0), repo / "p.yaml", db)
    record_run(_run("outside001", "2026-01-02T00:00:00+00:00", 1.0), tmp_path / "p.yaml", db)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git at all
    record_run(_run("nogit00001", "2026-01-03T00:00:00+00:00", 1.0), repo / "p.yaml", db)
    assert [r.git_commit for r in list_runs(db)] == [commit, None, None]


@pytest.fixture
def tiny_with_history(write_pipeline, tiny_pipeline_text, tmp_path):
    text = tiny_pipeline_text.replace("report: {dir: out}", "report: {dir: out, formats: [json, html]}")
    return write_pipeline(text + "history: {path: runs/history.sqlite}\n")


@pytest.mark.torch
@pytest.mark.slow
def test_every_run_is_recorded_and_listed(tiny_with_history, tmp_path, capsys):
    from mlbench.cli.main import main as cli_main

    assert cli_main(["run", "-q", str(tiny_with_history)]) == 0
    assert cli_main(["run", "-q", str(tiny_with_history)]) == 0
    capsys.readouterr()
    db = tmp_path / "runs" / "history.sqlite"
    runs = list_runs(db)
    assert len(runs) == 2 and all(r.pipeline_name == "tiny" for r in runs)
    assert runs[0].pipeline_path == str(tiny_with_history.resolve())

    assert main(["history", "--pipeline", str(tiny_with_history)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"2 runs of pipeline tiny in {db}, oldest first\n")
    for run in runs:
        assert f"\n{run.run_id}  {run.created}  tiny " in out
    assert "latency.median per variant, oldest → newest (≈ estimated):" in out
    assert "tiny_cnn/torch/cpu/float32     2" in out

    assert main(["history", "--db", str(db), "--model", "nope"]) == 0
    assert capsys.readouterr().out == f"no runs with model nope in {db}\n"
    assert main(["history", "--db", str(db), "--metric", "latency.medain"]) == 2  # a typo: nothing printed but why
    assert capsys.readouterr() == ("", "--metric: unknown metric 'latency.medain'; did you mean 'latency.median'?\n")
    assert main(["history", "--db", str(db), "--metric", "tokens_per_s.decode"]) == 0  # known, no run has it
    assert "\nno figures of tokens_per_s.decode in these runs\n" in capsys.readouterr().out
    assert main(["history", "--db", str(tmp_path / "missing.sqlite")]) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'missing.sqlite'}: no run history here yet (runs are recorded by `mlbench run`)\n"


@pytest.mark.torch
def test_a_history_that_cannot_be_written_is_a_warning_not_a_lost_report(tiny_with_history, tmp_path, capsys):
    from mlbench.cli.main import main as cli_main

    (tmp_path / "runs" / "history.sqlite").mkdir(parents=True)  # a folder where the database should be
    assert cli_main(["run", "-q", str(tiny_with_history)]) == 0
    err = capsys.readouterr().err
    assert "warning: run not added to the history: " in err and "cannot open the history database" in err
    assert (tmp_path / "out" / "report.json").is_file() and (tmp_path / "out" / "report.html").is_file()
