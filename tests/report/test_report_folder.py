"""The report folder against a hostile setup (issue 24, findings 7 and 12): no file outside it is written or
read through a symlink in it (`.lock`, `journal.jsonl`, every report), reports are written through a
temporary file and a rename, a damaged journal header is one line, and the previous report is never
replaced by an emptier one."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from mlbench.errors import UserError
from mlbench.records import RunRecord
from mlbench.run.journal import Journal
from mlbench.run.lock import ReportLock

HEADER = {"run_id": "r1", "created": "2026-01-01T00:00:00+00:00", "pipeline_sha256": "ab" * 32}
SYMLINK = "{path}: is a symlink; mlbench writes only its own files in the report folder: remove it"


def victim(tmp_path: Path, name: str = "precious.txt") -> Path:
    path = tmp_path / name
    path.write_text("not mlbench's\n")
    return path


def linked(place: Path, target: Path) -> Path:
    place.parent.mkdir(parents=True, exist_ok=True)
    place.symlink_to(target)
    return place


def record(variant_id: str) -> RunRecord:
    return RunRecord(variant_id=variant_id, model="m", backend="torch", axes={"device": "cpu"}, artifact_id=variant_id,
                     status="ok", started="2026-01-01T00:00:00+00:00", seconds=1.0)


# -- 7: nothing outside is written through a symlink ------------------------------------------------


def test_a_symlinked_lock_is_refused_and_what_it_points_to_is_untouched(tmp_path):
    target = victim(tmp_path)
    lock = linked(tmp_path / "out" / ".lock", target)
    with pytest.raises(UserError) as info, ReportLock(tmp_path / "out"):
        pass
    assert str(info.value) == SYMLINK.format(path=lock)
    assert target.read_text() == "not mlbench's\n"


def test_a_new_journal_replaces_a_symlink_and_an_append_or_a_resume_never_follows_one(tmp_path):
    target = victim(tmp_path)
    journal = Journal(linked(tmp_path / "out" / "journal.jsonl", target))
    journal.start(HEADER)  # a temporary file renamed over the link: the link goes, its target stays
    assert not journal.path.is_symlink() and json.loads(journal.path.read_text()) == {"run": HEADER}
    assert [p.name for p in journal.path.parent.iterdir()] == ["journal.jsonl"]  # no temporary file left
    journal.path.unlink()
    journal.path.symlink_to(target)
    for act in (lambda: journal.record(record("a/torch/cpu")), journal.load):
        with pytest.raises(UserError) as info:
            act()
        assert str(info.value) == SYMLINK.format(path=journal.path)
    assert target.read_text() == "not mlbench's\n"


@pytest.mark.timeout(60)
def test_a_fifo_in_place_of_the_journal_is_refused_without_waiting(tmp_path):
    journal = Journal(tmp_path / "out" / "journal.jsonl")
    journal.path.parent.mkdir()
    os.mkfifo(journal.path)
    not_regular = (f"{journal.path}: is not a regular file; mlbench writes only its own files in the report folder: "
                   "remove it")
    for act in (journal.load, lambda: journal.record(record("a/torch/cpu"))):
        with pytest.raises(UserError) as info:
            act()
        assert str(info.value) == not_regular


@pytest.mark.torch
def test_a_run_writes_its_journal_and_every_report_beside_symlinks_never_through_them(write_pipeline,
                                                                                     tiny_pipeline_text, tmp_path):
    from mlbench.cli.main import main

    path = write_pipeline(tiny_pipeline_text.replace("precision: [float32]", "precision: [float32, bfloat16]")
                          .replace("report: {dir: out}", "report: {dir: out, formats: [json, markdown, html]}")
                          + "history: {enabled: false}\n")
    names = ["journal.jsonl", "report.json", "report.md", "report.html", "report.full.md"]
    targets = {name: victim(tmp_path, f"victim-{name}") for name in names}
    for name in names:
        linked(tmp_path / "out" / name, targets[name])
    assert main(["run", "-q", str(path)]) == 0
    for name in names:
        assert targets[name].read_text() == "not mlbench's\n", name
        assert not (tmp_path / "out" / name).is_symlink(), name
    assert json.loads((tmp_path / "out" / "report.json").read_text())["summary"]["ok"] == 2
    # report.md was not cut, so the stale report.full.md (here a link) is removed; no temporary file is left
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([".lock", *names[:-1]])


# -- 12: a damaged journal header ---------------------------------------------------------------------


@pytest.mark.parametrize("header, why", [
    (5, "a int, not an object"),
    ([1, 2], "a list, not an object"),
    ({"run_id": "r1"}, "no created"),
    ({"created": 3}, "no run_id or created"),
])
def test_a_damaged_run_header_is_one_line_naming_its_line(tmp_path, header, why):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.path.write_text('garbage\n{"run": ' + json.dumps(header) + "}\n", encoding="utf-8")
    with pytest.raises(UserError) as info:
        journal.load()
    assert str(info.value) == f"{journal.path}:2: the run header is damaged ({why}); run without --resume to start over"


@pytest.mark.torch
def test_a_resume_from_a_damaged_header_keeps_the_report_and_says_so_in_one_line(write_pipeline, tiny_pipeline_text,
                                                                                 tmp_path, capsys, caplog):
    from mlbench.cli.main import main
    from mlbench.records import RunReport
    from mlbench.validate import load_pipeline

    path = write_pipeline(tiny_pipeline_text.replace("precision: [float32]", "precision: [float32, bfloat16]")
                          + "history: {enabled: false}\n")
    assert main(["run", "-q", str(path)]) == 0
    out = tmp_path / "out"
    before = {name: (out / name).read_bytes() for name in ("report.json", "report.md")}
    journal = out / "journal.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(['{"run": 5}', *lines[1:]]) + "\n")
    capsys.readouterr()
    assert main(["run", "-q", "--resume", str(path)]) == 2
    assert capsys.readouterr().err == (f"{journal}:1: the run header is damaged (a int, not an object); run without "
                                       "--resume to start over\n")
    assert {name: (out / name).read_bytes() for name in before} == before

    # and a run that stops early never replaces a report holding more records with its emptier one
    from mlbench.run.runner import write_partial

    report = RunReport.model_validate_json(before["report.json"])
    with caplog.at_level(logging.WARNING, logger="mlbench.run"):
        write_partial(report.model_copy(update={"records": report.records[:1]}), load_pipeline(path))
    assert {name: (out / name).read_bytes() for name in before} == before
    assert [r.getMessage() for r in caplog.records] == [
        f"the previous reports in {out} are kept: they hold 2 records, this unfinished run 1 (its records are in "
        "the journal)"]
    write_partial(report.model_copy(update={"run_id": "as-many"}), load_pipeline(path))  # as many records: written
    assert json.loads((out / "report.json").read_text())["run_id"] == "as-many"
