"""The command line's surface: every subcommand describes itself and its arguments, `mlbench --help` lists
the exit codes, `%` reads as `%`, and `--format json` gives scripts what the text shows people."""

from __future__ import annotations

import argparse
import json

import pytest

from mlbench.cli.main import build_parser, main
from mlbench.store.history import record_run
from tests.compare.test_comparison import rec, run_of


def _commands(parser: argparse.ArgumentParser, prefix: str = "mlbench") -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(full name, parser, its one-line summary) for every subcommand, nested ones too."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{prefix} {name}", sub, summaries.get(name) or ""))
                found += _commands(sub, f"{prefix} {name}")
    return found


def test_every_subcommand_has_a_summary_a_description_and_argument_help():
    commands = _commands(build_parser())
    names = {name for name, _, _ in commands}
    assert {"mlbench validate", "mlbench plan", "mlbench run", "mlbench inspect", "mlbench rules", "mlbench cache",
            "mlbench cache ls", "mlbench cache info", "mlbench cache prune", "mlbench cache clear", "mlbench schema",
            "mlbench compare", "mlbench history"} <= names
    for name, parser, summary in commands:
        assert summary and "\n" not in summary, name
        assert parser.description and parser.description.splitlines()[0].rstrip(".").lower() == summary.lower(), name
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{name}: {action.dest} has no help"
        text = parser.format_help()
        assert "%%" not in text, name


def test_top_level_help_lists_the_exit_codes_and_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit codes:\n  0    success\n  1    the run finished and some variant failed" in out
    assert ("  2    a mistake in the input, one line each as FILE:LINE:COL: where: what\n  3    the run could not "
            "finish; its partial report and journal are written (--resume goes on from there)\n  130  interrupted") in out
    assert "    history   list recorded runs and a metric's trend per variant" in out


def test_percent_signs_read_as_one(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "METRIC:+N% (a relative change)" in out and "latency.median:+10%," in out
    assert "e.g. latency.median:+10%; repeatable" in out and "%%" not in out


def test_validate_as_json(write_pipeline, tiny_pipeline_text, capsys):
    good = write_pipeline(tiny_pipeline_text, "good.yaml")
    bad = write_pipeline(tiny_pipeline_text.replace("version: 1", "version: 1\nsede: 1"), "bad.yaml")
    assert main(["validate", "--format", "json", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out) == [
        {"file": str(good), "ok": True, "errors": []},
        {"file": str(bad), "ok": False, "errors": [
            {"line": 2, "col": 1, "where": "sede", "message": "unknown key 'sede'; did you mean 'seed'?"}]},
    ]


def test_plan_as_json(write_pipeline, tiny_pipeline_text, capsys):
    text = tiny_pipeline_text.replace("device: [cpu]", "device: [cpu, cuda]")
    assert main(["plan", "--format", "json", str(write_pipeline(text))]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {"variants": 2, "artifacts": 1, "models": 1}
    assert [v["id"] for v in out["variants"]] == ["tiny_cnn/torch/cpu/float32", "tiny_cnn/torch/cuda/float32"]
    assert out["variants"][1] == {"id": "tiny_cnn/torch/cuda/float32", "model": "tiny_cnn", "backend": "torch",
                                  "axes": {"device": "cuda", "precision": "float32"},
                                  "artifact": "tiny_cnn/torch/float32", "artifact_axes": ["precision"]}


def test_cache_ls_as_json(tmp_path, capsys):
    from mlbench.store.cache import ArtifactCache, BuildResult

    def build(folder):
        (folder / "model.bin").write_bytes(b"x" * 10)
        return BuildResult("model.bin")

    cache = ArtifactCache(tmp_path / "cache")
    key = "ab" * 32
    cache.get_or_build(key, {"backend": "toy"}, build)
    assert main(["cache", "ls", "--dir", str(tmp_path / "cache"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["root"] == str(tmp_path / "cache") and out["total_bytes"] == 10
    (entry,) = out["entries"]
    assert entry["key"] == key and entry["size_bytes"] == 10 and entry["label"] == "toy"


def test_cache_ls_lists_the_most_recently_used_first_and_says_so(tmp_path, capsys):
    import os
    from datetime import datetime

    from mlbench.store.cache import ArtifactCache, BuildResult

    def build(folder):
        (folder / "model.bin").write_bytes(b"x" * 10)
        return BuildResult("model.bin")

    cache = ArtifactCache(tmp_path / "cache")
    used = {"aa" * 32: 1_700_000_000, "bb" * 32: 1_700_300_000, "cc" * 32: 1_700_100_000}
    for key, when in used.items():
        cache.get_or_build(key, {"backend": key[:2]}, build)
        os.utime(cache.root / key[:2] / key / "meta.json", (when, when))  # a lookup's mark: meta.json's mtime
    assert main(["cache", "ls", "--dir", str(tmp_path / "cache")]) == 0
    lines = capsys.readouterr().out.splitlines()
    stamp = lambda key: datetime.fromtimestamp(used[key]).strftime("%Y-%m-%d %H:%M")  # noqa: E731
    newest_first = ("bb" * 32, "cc" * 32, "aa" * 32)
    assert lines == [*(f"{key[:12]}       10 B  used {stamp(key)}  {key[:2]}" for key in newest_first),
                     f"3 entries, 30 B in {tmp_path / 'cache'} (most recently used first)"]
    assert main(["cache", "ls", "--dir", str(tmp_path / "cache"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["order"] == "last_used, newest first" and [e["label"] for e in out["entries"]] == ["bb", "cc", "aa"]


def _history_with_three_pipelines(tmp_path):
    """The same variant id in three pipelines, two runs each: three trends, not one."""
    db = tmp_path / "h.sqlite"
    for day, factor in ((1, 1.0), (2, 1.1)):
        for i, name in enumerate(("quickstart", "coreml", "onnx")):
            report = run_of([rec("resnet18/torch/cpu", [(i + 1) * 10.0 * factor] * 6)], f"run{day}{name}")
            pipeline = report.pipeline.model_copy(update={"name": name})
            record_run(report.model_copy(update={"pipeline": pipeline, "created": f"2026-01-0{day}T0{i}:00:00+00:00"}),
                       tmp_path / f"{name}.yaml", db)
    return db


def test_history_keeps_pipelines_apart(tmp_path, capsys):
    db = _history_with_three_pipelines(tmp_path)
    assert main(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "latency.median per pipeline and variant, oldest → newest (≈ estimated):" in out
    trend = out.split("(≈ estimated):\n")[1].splitlines()
    assert trend[0].split() == ["pipeline", "variant", "runs", "first", "last", "change", "trend"]
    assert [line.split()[:6] for line in trend[1:]] == [
        ["quickstart", "resnet18/torch/cpu", "2", "10.00", "ms", "11.00"],
        ["coreml", "resnet18/torch/cpu", "2", "20.00", "ms", "22.00"],
        ["onnx", "resnet18/torch/cpu", "2", "30.00", "ms", "33.00"],
    ]
    assert all("+10.0%" in line for line in trend[1:])

    assert main(["history", "--db", str(db), "--name", "coreml", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["pipeline"] for r in data["runs"]] == ["coreml", "coreml"]
    (series,) = data["series"]
    assert series["pipeline"] == "coreml" and series["variant"] == "resnet18/torch/cpu"
    assert [p["value"] for p in series["points"]] == [20.0, 22.0]


def test_history_as_json_lists_every_pipelines_series(tmp_path, capsys):
    db = _history_with_three_pipelines(tmp_path)
    assert main(["history", "--db", str(db), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 6 and data["metric"] == "latency.median"
    assert [(s["pipeline"], len(s["points"])) for s in data["series"]] == [("quickstart", 2), ("coreml", 2), ("onnx", 2)]


def test_plan_refuses_mixed_forms(write_pipeline, tiny_pipeline_text, capsys):
    path = str(write_pipeline(tiny_pipeline_text))
    assert main(["plan", path, "--diff", path, path]) == 2
    assert capsys.readouterr().err == "plan: give either --diff BASE HEAD, or FILE (with --against REF to diff it)\n"
    assert main(["plan", path, "--format", "markdown"]) == 2
    assert "--format markdown is for a diff" in capsys.readouterr().err
