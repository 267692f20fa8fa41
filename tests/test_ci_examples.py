"""The example GitHub Actions workflows: valid YAML, the right triggers, and mlbench commands that
this mlbench accepts (every `mlbench ...` line is parsed by the real argument parser)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from mlbench.cli.main import build_parser
from mlbench.cli.main import main as cli_main
from mlbench.config.load import load_pipeline
from tests.conftest import ROOT

CI = ROOT / "examples" / "ci"


def load(name: str) -> dict:
    data = yaml.safe_load((CI / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def parser() -> argparse.ArgumentParser:
    return build_parser()


def mlbench_commands(workflow: dict, env: dict[str, str]) -> list[list[str]]:
    """Every `mlbench ...` command in the workflow's run scripts, with $VARS expanded."""
    commands = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                line = line.strip()
                if not line.startswith("mlbench "):
                    continue
                line = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), line)
                words = shlex.split(line.split(">")[0])
                commands.append(words[1:])
    return commands


def steps(workflow: dict) -> list[dict]:
    return [s for job in workflow["jobs"].values() for s in job["steps"]]


def test_pull_request_workflow_validates_every_pipeline():
    workflow = load("pull-request.yml")
    assert "pull_request" in workflow["on"]
    assert "pipelines/**" in workflow["on"]["pull_request"]["paths"]
    commands = mlbench_commands(workflow, {"file": str(ROOT / "pipelines" / "quickstart.yaml")})
    validate = [c for c in commands if c[0] == "validate"]
    assert validate == [["validate", "pipelines/*.yaml"]]
    for command in commands:
        parser().parse_args(command)
    pipelines = sorted(str(p) for p in ROOT.glob(validate[0][1]))
    assert pipelines and cli_main(["validate", "-q", *pipelines]) == 0  # the check passes on this repository


def test_nightly_workflow_runs_compares_uploads_and_summarises():
    workflow = load("nightly.yml")
    crons = [entry["cron"] for entry in workflow["on"]["schedule"]]
    assert crons and all(len(c.split()) == 5 for c in crons)
    assert "workflow_dispatch" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert job["runs-on"].startswith("macos")
    env = dict(workflow["env"])
    pipeline = load_pipeline(ROOT / env["PIPELINE"])
    assert pipeline.report_dir == (ROOT / env["REPORT_DIR"]).resolve()
    assert "MLBENCH_HISTORY" in env

    commands = mlbench_commands(workflow, env)
    kinds = [c[0] for c in commands]
    assert kinds[:2] == ["validate", "run"] and "compare" in kinds
    for command in commands:
        parser().parse_args(command)  # SystemExit here means the workflow calls a flag mlbench lacks
    compare = next(c for c in commands if c[0] == "compare")
    assert compare[1] == "last-on-this-machine" and compare[2] == f"{env['REPORT_DIR']}/report.json"

    by_use = {s.get("uses", "").split("@")[0]: s for s in steps(workflow)}
    restore, save = by_use["actions/cache/restore"], by_use["actions/cache/save"]
    assert restore["with"]["path"] == save["with"]["path"] == ".mlbench/history.sqlite"
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"]) and save["if"] == "always()"
    upload = by_use["actions/upload-artifact"]
    assert upload["if"] == "always()" and "${{ env.REPORT_DIR }}/report.json" in upload["with"]["path"]
    summary = next(s for s in steps(workflow) if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert 'cat compare.md >> "$GITHUB_STEP_SUMMARY"' in summary["run"] and "exit $status" in summary["run"]


@pytest.mark.parametrize("name", ["pull-request.yml", "nightly.yml"])
def test_workflows_pin_action_versions(name):
    for step in steps(load(name)):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+", step["uses"]), step["uses"]


def test_example_paths_exist():
    assert sorted(p.name for p in CI.glob("*.yml")) == ["nightly.yml", "pull-request.yml"]
    assert Path(ROOT / load("nightly.yml")["env"]["PIPELINE"]).is_file()
