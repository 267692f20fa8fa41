"""A damaged run history (issue 24, finding 14): history is best-effort, so `mlbench history` says what is
wrong in one line, and `mlbench run` writes every report and warns."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mlbench.cli.main import main
from mlbench.store.history import HistoryError, list_runs, load_report, metric_series, record_run
from tests.store.test_history import _run


def damaged_pages(db: Path) -> None:
    """Garbage over the start of every page of the runs, records and metrics (tables and indexes), the schema
    and its version left whole: opening works, and the first query meets 'database disk image is malformed'."""
    with sqlite3.connect(db) as conn:
        keep = {1, *(page for (page,) in conn.execute("SELECT rootpage FROM sqlite_master WHERE name = "
                                                      "'schema_migrations'"))}
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(db.read_bytes())
    for start in range(0, len(data), size):
        if start // size + 1 not in keep:
            data[start:start + 16] = b"\xff" * 16
    db.write_bytes(bytes(data))


def history_of_three(tmp_path: Path) -> Path:
    db = tmp_path / "history.sqlite"
    for i in range(3):
        record_run(_run(f"run{i:07d}", f"2026-01-0{i + 1}T00:00:00+00:00", 1.0), tmp_path / "p.yaml", db)
    return db


def test_a_malformed_database_is_one_line_for_every_query(tmp_path, capsys):
    db = history_of_three(tmp_path)
    damaged_pages(db)
    why = f"{db}: not a usable history database: database disk image is malformed"
    for query in (list_runs, lambda path: metric_series(path, "latency.median"), lambda path: load_report(path, "run0")):
        with pytest.raises(HistoryError) as info:
            query(db)
        assert str(info.value) == why
    assert main(["history", "--db", str(db)]) == 2
    assert capsys.readouterr() == ("", why + "\n")


def test_text_that_is_not_utf8_or_not_json_is_one_line(tmp_path, capsys):
    db = history_of_three(tmp_path)
    with sqlite3.connect(db) as conn:  # rows added behind mlbench's back (the triggers refuse only changes)
        conn.execute("INSERT INTO runs SELECT 'bad0000001', '2026-02-01', finished, recorded, pipeline_name, "
                     "pipeline_path, pipeline_sha256, git_commit, machine_key, CAST(X'FF1B5B324A7B7D' AS TEXT), "
                     "mlbench_version, summary_json, report_zlib FROM runs WHERE run_id = 'run0000000'")
    assert main(["history", "--db", str(db)]) == 2
    assert capsys.readouterr() == ("", f"{db}: not a usable history database: Could not decode to UTF-8 column "
                                       "'machine_json' with text '\ufffd?[2J{}'\n")
    db = history_of_three(tmp_path / "json")
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO runs SELECT 'bad0000002', '2026-02-01', finished, recorded, pipeline_name, "
                     "pipeline_path, pipeline_sha256, git_commit, machine_key, '{', mlbench_version, summary_json, "
                     "X'00' FROM runs WHERE run_id = 'run0000000'")
    assert main(["history", "--db", str(db)]) == 2
    assert capsys.readouterr().err == (f"{db}: not a usable history database: Expecting property name enclosed in "
                                       "double quotes: line 1 column 2 (char 1)\n")
    with pytest.raises(HistoryError) as info:
        load_report(db, "bad0000002")
    assert str(info.value) == (f"{db}: run bad0000002 is damaged in the history: Error -5 while decompressing data: "
                               "incomplete or truncated stream")


@pytest.mark.torch
@pytest.mark.slow
def test_a_run_beside_a_damaged_history_writes_every_report_and_warns(write_pipeline, tiny_pipeline_text, tmp_path,
                                                                      capsys):
    text = tiny_pipeline_text.replace("report: {dir: out}", "report: {dir: out, formats: [json, markdown, html]}")
    path = write_pipeline(text + "history: {path: runs/history.sqlite}\n")
    assert main(["run", "-q", str(path)]) == 0
    db = tmp_path / "runs" / "history.sqlite"
    damaged_pages(db)
    out = tmp_path / "out"
    before = {name: (out / name).read_bytes() for name in ("report.json", "report.md", "report.html")}
    capsys.readouterr()
    assert main(["run", "-q", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    malformed = f"{db}: not a usable history database: database disk image is malformed"
    assert err == [f"warning: no trends in the HTML report: {malformed}",
                   f"warning: run not added to the history: {malformed}",
                   f"1 ok; 1 timed; reports in {out}"]
    run_id = json.loads((out / "report.json").read_text())["run_id"]
    for name, old in before.items():  # every report is this run's
        assert (out / name).read_bytes() != old, name
        assert run_id in (out / name).read_text(), name
