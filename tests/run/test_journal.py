"""The run journal on disk: what each line holds, and reading back a journal a crash left behind.

`kill -9` can land in the middle of a write: the last line is then cut short, and `--resume` must
still read everything before it (tests/run/test_execution.py kills a real run; the resume after a cut-off
last line is end to end below).
"""

from __future__ import annotations

import json

import pytest

from mlbench.errors import UserError
from mlbench.records import RunRecord
from mlbench.run.journal import Journal


def record(variant_id: str, status: str = "ok", seconds: float = 1.0) -> RunRecord:
    return RunRecord(variant_id=variant_id, model=variant_id.split("/")[0], backend="torch", axes={"device": "cpu"},
                     artifact_id=variant_id, status=status, started="2026-01-01T00:00:00+00:00", seconds=seconds)


HEADER = {"run_id": "r1", "created": "2026-01-01T00:00:00+00:00", "pipeline_sha256": "ab" * 32}


@pytest.fixture
def journal(tmp_path) -> Journal:
    return Journal(tmp_path / "out" / "deeper" / "journal.jsonl")  # folders made on the first write


def test_each_entry_is_one_compact_json_line(journal):
    journal.start(HEADER)
    journal.record(record("a/torch/cpu"))
    journal.artifact("k1", {"label": "a/torch"})
    journal.resumed({"reused": 1})
    lines = journal.path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == '{"run":{"run_id":"r1","created":"2026-01-01T00:00:00+00:00","pipeline_sha256":"' + "ab" * 32 + '"}}'
    assert json.loads(lines[1]) == {"record": json.loads(record("a/torch/cpu").model_dump_json()), "fingerprint": None}
    assert lines[1].startswith('{"record":{"variant_id":"a/torch/cpu","model":"a",')
    assert lines[2:] == ['{"artifact":{"key":"k1","details":{"label":"a/torch"}}}', '{"resumed":{"reused":1}}', ""]


def test_start_replaces_an_old_journal(journal):
    journal.start({"run_id": "old", "created": "t0"})
    journal.record(record("a/torch/cpu"))
    journal.start({"run_id": "new", "created": "t1"})
    assert journal.path.read_text(encoding="utf-8") == '{"run":{"run_id":"new","created":"t1"}}\n'
    assert journal.load().records == {}


def test_load_gives_the_header_the_latest_record_per_variant_and_the_artifacts(journal):
    journal.start(HEADER)
    journal.record(record("a/torch/cpu", status="failed", seconds=1.0))
    journal.artifact("k1", {"n": 1})
    journal.record(record("b/torch/cpu"))
    journal.resumed({"reused": 2})
    journal.record(record("a/torch/cpu", seconds=2.0))
    journal.artifact("k1", {"n": 2})
    contents = journal.load()
    assert contents.header == HEADER
    assert list(contents.records) == ["a/torch/cpu", "b/torch/cpu"]
    assert (contents.records["a/torch/cpu"].status, contents.records["a/torch/cpu"].seconds) == ("ok", 2.0)
    assert contents.artifacts == {"k1": {"n": 2}}
    assert contents.skipped_lines == 0  # a resumed marker is not a skipped line


def test_a_variant_started_and_never_recorded_is_unfinished_with_its_fingerprint(journal):
    journal.start(HEADER)
    journal.started("a/torch/cpu", "fp-a", "t1")
    journal.record(record("a/torch/cpu"), "fp-a")
    journal.started("b/torch/cpu", "fp-b", "t2")
    journal.started("b/torch/cpu", "fp-b2", "t3")  # the run died measuring b twice in a row
    journal.started("c/torch/cpu", None, "t4")
    assert journal.path.read_text(encoding="utf-8").splitlines()[3] == (
        '{"started":{"variant_id":"b/torch/cpu","fingerprint":"fp-b","at":"t2"}}')
    contents = journal.load()
    assert contents.unfinished == {"b/torch/cpu": ("fp-b2", 2), "c/torch/cpu": (None, 1)}
    assert contents.fingerprints == {"a/torch/cpu": "fp-a"} and list(contents.records) == ["a/torch/cpu"]
    journal.record(record("b/torch/cpu"))
    assert journal.load().unfinished == {"c/torch/cpu": (None, 1)}
    assert journal.load().fingerprints == {"a/torch/cpu": "fp-a", "b/torch/cpu": None}


def test_a_resume_under_a_changed_pipeline_moves_the_headers_sha(journal):
    journal.start({"run_id": "r", "created": "t0", "pipeline_sha256": "old"})
    journal.resumed({"at": "t1", "pipeline_sha256": ""})
    assert journal.load().header == {"run_id": "r", "created": "t0", "pipeline_sha256": "old"}
    journal.resumed({"at": "t2", "pipeline_sha256": "new"})
    assert journal.load().header == {"run_id": "r", "created": "t0", "pipeline_sha256": "new"}


def test_a_line_cut_short_by_a_crash_is_skipped_and_counted(journal):
    journal.start(HEADER)
    journal.record(record("a/torch/cpu"))
    whole = json.dumps({"record": json.loads(record("b/torch/cpu").model_dump_json())}, separators=(",", ":"))
    with open(journal.path, "a", encoding="utf-8") as handle:
        handle.write(whole[: len(whole) // 2])  # the process died here: no newline, half a record
    contents = journal.load()
    assert list(contents.records) == ["a/torch/cpu"] and contents.skipped_lines == 1


@pytest.mark.parametrize("line", [
    '{"record": {"variant_id": "x"}}',   # a record that does not validate
    '{"artifact": {"key": "k"}}',        # an artifact without details
    '{"artifact": 3}',                   # not an object where one is needed
    '"run"',                             # valid JSON, not an entry
    '[1, 2]',
    '{"surprise": 1}',                   # an entry of a kind this mlbench does not know
    '{"started": {"at": "t"}}',          # a start that names no variant
    '{"run": {"run_id": "second"}}',     # a second header
    "\udcff garbage",
], ids=["bad-record", "artifact-without-details", "artifact-not-object", "string", "list", "unknown",
        "start-without-variant", "second-header", "garbage"])
def test_lines_that_are_not_entries_are_skipped_and_counted(journal, line):
    journal.start(HEADER)
    with open(journal.path, "a", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(line + "\n")
    journal.record(record("a/torch/cpu"))
    contents = journal.load()
    assert contents.header == HEADER and list(contents.records) == ["a/torch/cpu"]
    assert contents.artifacts == {} and contents.skipped_lines == 1


def test_every_skipped_line_is_counted(journal):
    journal.start(HEADER)
    with open(journal.path, "a", encoding="utf-8") as handle:
        handle.write('{"surprise": 1}\n{"other": 2}\nnot json\n{"record": 3}\n')
    journal.record(record("a/torch/cpu"))
    assert journal.load().skipped_lines == 4


def test_lines_before_the_header_are_skipped(journal):
    journal.path.parent.mkdir(parents=True)
    journal.path.write_text('{"record": {}}\n{"artifact": {"key": "k", "details": {}}}\n{"resumed": {}}\n'
                            '{"run": {"run_id": "r", "created": "t"}}\n', encoding="utf-8")
    contents = journal.load()
    assert contents.header == {"run_id": "r", "created": "t"} and contents.skipped_lines == 2 and contents.artifacts == {}


def test_no_journal_or_no_header_is_a_one_line_error(journal):
    with pytest.raises(UserError) as info:
        journal.load()
    assert str(info.value) == f"{journal.path}: no journal to resume from; run without --resume"
    journal.path.parent.mkdir(parents=True)
    journal.path.write_text('{"record": {}}\n\n', encoding="utf-8")
    with pytest.raises(UserError) as info:
        journal.load()
    assert str(info.value) == f"{journal.path}: the journal has no run header; run without --resume"


@pytest.mark.torch
@pytest.mark.slow
def test_resume_after_a_kill_mid_write_reuses_what_finished(write_pipeline, tiny_pipeline_text, tmp_path, capsys):
    """A run killed while writing its second record: --resume keeps the first and redoes only the second."""
    from mlbench.cli.main import main

    path = write_pipeline(tiny_pipeline_text.replace("precision: [float32]", "precision: [float32, bfloat16]")
                          + "history: {enabled: false}\n")
    assert main(["run", "-q", str(path)]) == 0
    journal = tmp_path / "out" / "journal.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines()
    header = lines[0]
    first, second = (i for i, line in enumerate(lines) if line.startswith('{"record"'))
    assert json.loads(lines[second])["record"]["variant_id"] == "tiny_cnn/torch/cpu/bfloat16"
    kept = "\n".join(lines[:second])
    journal.write_text(f"{kept}\n{lines[second][:40]}", encoding="utf-8")  # cut mid-line, as kill -9 leaves it
    first = lines[first]

    capsys.readouterr()
    assert main(["run", "-q", "--resume", str(path)]) == 0
    assert capsys.readouterr().err == f"2 ok; 1 timed (1 cached); reports in {tmp_path / 'out'}\n"
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    started = {r["variant_id"]: r["started"] for r in report["records"]}
    assert list(started) == ["tiny_cnn/torch/cpu/float32", "tiny_cnn/torch/cpu/bfloat16"]
    assert started["tiny_cnn/torch/cpu/float32"] == json.loads(first)["record"]["started"]  # reused, not redone
    assert report["run_id"] == json.loads(header)["run"]["run_id"]
