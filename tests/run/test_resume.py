"""Resume past a crash and past an edit; exit codes that say how the run ended."""

from __future__ import annotations

import json

import pytest

from mlbench.cli.main import main
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: resume
models:
  - name: a
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 16, 16]}}]
  - name: b
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    kwargs: {{width: 8}}
    inputs: [{{name: image, shape: [1, 3, 16, 16]}}]
targets:
  - backend: torch
    precision: [float32, bfloat16]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
report: {{dir: out}}
history: {{enabled: false}}
"""


def journal(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]


def records(tmp_path) -> dict[str, dict]:
    return {r["variant_id"]: r for r in json.loads((tmp_path / "out" / "report.json").read_text())["records"]}


@pytest.mark.slow
def test_a_variant_the_run_died_on_twice_is_failed_not_retried_for_ever(write_pipeline, tmp_path):
    path = write_pipeline(PIPELINE)
    assert main(["run", "-q", "--jobs", "1", str(path)]) == 0
    entries = journal(tmp_path)
    victim = "b/torch/cpu/bfloat16"
    started = next(e["started"] for e in entries if e.get("started", {}).get("variant_id") == victim)
    kept = [e for e in entries if victim not in (e.get("record", {}).get("variant_id"),
                                                 e.get("started", {}).get("variant_id"))]
    lines = [*kept, {"started": started}]  # the run died measuring it ...

    def write(entries: list[dict]) -> None:
        (tmp_path / "out" / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))

    write(lines)
    before = records(tmp_path)
    assert main(["run", "-q", "--resume", str(path)]) == 0  # ... once: measured again (it may not be its fault)
    assert records(tmp_path)[victim]["status"] == "ok" and records(tmp_path)[victim]["started"] != before[victim]["started"]

    write([*lines, {"resumed": {"at": "t"}}, {"started": started}])  # ... and died on it again after a resume
    assert main(["run", "-q", "--resume", str(path)]) == 1
    got = records(tmp_path)
    assert got[victim]["status"] == "failed"
    assert got[victim]["error"] == ("the run died while measuring it, on 2 attempts; "
                                    "`mlbench run --resume --retry-crashed` measures it again")
    assert all(got[v]["started"] == before[v]["started"] for v in got if v != victim)  # the rest kept

    write([*lines, {"resumed": {"at": "t"}}, {"started": started}])
    assert main(["run", "-q", "--resume", "--retry-crashed", str(path)]) == 0
    assert records(tmp_path)[victim]["status"] == "ok"


@pytest.mark.slow
def test_resume_after_an_edit_keeps_what_the_edit_did_not_touch(write_pipeline, tmp_path, capsys):
    path = write_pipeline(PIPELINE)
    assert main(["run", "-q", "--jobs", "1", str(path)]) == 0
    before = records(tmp_path)
    path.write_text(path.read_text().replace("kwargs: {width: 8}", "kwargs: {width: 12}"))
    capsys.readouterr()
    assert main(["run", "-q", "--resume", str(path)]) == 0
    assert capsys.readouterr().err.startswith("warning: resuming: 2 of the journal's records are measured again, "
                                              "as what shaped them changed in pipeline.yaml\n")
    after = records(tmp_path)
    assert [v for v in after if after[v]["started"] == before[v]["started"]] == ["a/torch/cpu/float32",
                                                                                 "a/torch/cpu/bfloat16"]
    path.write_text(path.read_text().replace("repeats: 3", "repeats: 4"))  # shapes every record
    assert main(["run", "-q", "--resume", str(path)]) == 0
    assert all(records(tmp_path)[v]["started"] != after[v]["started"] for v in after)


def test_a_run_that_cannot_finish_exits_3_with_a_partial_report(write_pipeline, tmp_path, capsys, monkeypatch):
    from mlbench.run.journal import Journal

    calls = []
    record = Journal.record

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return record(self, *args, **kwargs)

    monkeypatch.setattr(Journal, "record", failing)
    path = write_pipeline(PIPELINE)
    assert main(["run", "-q", "--jobs", "1", str(path)]) == 3
    assert capsys.readouterr().err == (
        f"the run could not finish: No space left on device (ENOSPC); the partial report and the journal "
        f"are in {tmp_path / 'out'} (`--resume` goes on from there)\n")
    partial = json.loads((tmp_path / "out" / "report.json").read_text())
    assert partial["finished"] is None and len(partial["records"]) == 2


@pytest.mark.timeout(120)  # a lost limit fails here, never hangs CI
@pytest.mark.slow
def test_a_hang_while_loading_times_out_under_the_targets_own_limit(write_pipeline, tmp_path):
    text = PIPELINE.replace("  - name: b\n", f"""\
  - name: stuck
    source: {ROOT}/tests/faulty_models.py:Faulty
    kwargs: {{fault: hang, after: 0}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: b
""").replace("    precision: [float32, bfloat16]\n", "    precision: [float32, bfloat16]\n    limits: {export_s: 3}\n")
    assert main(["run", "-q", "--jobs", "1", str(write_pipeline(text))]) == 1
    got = records(tmp_path)
    assert {v: r["error"] for v, r in got.items() if r["status"] != "ok"} == {
        "stuck/torch/cpu/float32": "timed out after 3 s while loading the model (limits.export_s)",
        "stuck/torch/cpu/bfloat16": "not tried, the same model failed to load for stuck/torch/float32: timed out after "
                                    "3 s while loading the model (limits.export_s)",  # not a second export_s
    }
    assert sum(r["status"] == "ok" for r in got.values()) == 4
