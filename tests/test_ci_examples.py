"""The example GitHub Actions workflows: valid YAML, the right triggers, and mlbench commands that
this mlbench accepts (every `mlbench ...` line is parsed by the real argument parser)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlbench.cli.main import build_parser
from mlbench.cli.main import main as cli_main
from mlbench.validate import load_pipeline
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


def test_mutation_workflow_runs_weekly_on_the_configured_modules():
    tomllib = pytest.importorskip("tomllib")

    workflow = load("mutation.yml")
    (cron,) = [entry["cron"] for entry in workflow["on"]["schedule"]]
    _minute, _hour, day, month, weekday = cron.split()
    assert (day, month) == ("*", "*") and weekday.isdigit()  # once a week
    assert workflow["on"]["workflow_dispatch"]["inputs"]["module"]["default"] == "all"
    (job,) = workflow["jobs"].values()
    run = next(s for s in job["steps"] if "benchmarks/mutation.py" in s.get("run", ""))
    assert 'python benchmarks/mutation.py --module "$MODULE" | tee mutation.txt' in run["run"]
    assert "set -o pipefail" in run["run"]  # surviving mutants fail the job
    install = next(s for s in job["steps"] if "pip install" in s.get("run", ""))
    assert '".[dev,mutation]"' in install["run"]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("mutmut>=3") for req in extras["mutation"])


@pytest.mark.parametrize("name", ["pull-request.yml", "nightly.yml", "mutation.yml"])
def test_workflows_pin_action_versions(name):
    for step in steps(load(name)):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+", step["uses"]), step["uses"]


def test_example_paths_exist():
    assert sorted(p.name for p in CI.glob("*.yml")) == ["mutation.yml", "nightly.yml", "pull-request.yml"]
    assert Path(ROOT / load("nightly.yml")["env"]["PIPELINE"]).is_file()


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _installs(workflow: dict) -> list[str]:
    """What each `pip install` line installs, with the workflow's env expanded."""
    env = workflow.get("env", {})
    lines = [line.strip() for s in steps(workflow) for line in s.get("run", "").splitlines() if "pip install" in line]
    return [re.sub(r'"?\$\{?(\w+)\}?"?', lambda m: env.get(m.group(1), m.group(0)), line).split("pip install", 1)[1].strip()
            for line in lines]


def test_workflows_install_mlbench_itself_not_the_users_repository():
    name = _pyproject()["project"]["name"]
    assert name != "mlbench"  # another project's name on the package index
    # not on the package index yet: from mlbench's git repository, named by a repository variable
    assert _installs(load("pull-request.yml")) == [f"{name} @ ${{{{ vars.MLBENCH_GIT }}}}"]  # the core only
    assert _installs(load("nightly.yml")) == [f"{name}[coreml] @ ${{{{ vars.MLBENCH_GIT }}}}"]
    extras = _pyproject()["project"]["optional-dependencies"]
    assert not any(d.split(">")[0].split("[")[0] in ("torch", "coremltools", "onnxruntime")
                   for d in _pyproject()["project"]["dependencies"])
    assert {"torch", "coreml", "onnxruntime", "dask", "all", "dev"} <= set(extras)
    assert f"{name}[all]" in extras["dev"]  # `pip install -e ".[dev]"` still installs everything
    for workflow in (load("pull-request.yml"), load("nightly.yml")):
        for step in steps(workflow):
            assert step.get("with", {}).get("cache") != "pip", "setup-python's pip cache needs a requirements file"
        cache = next(s for s in steps(workflow) if s.get("uses", "").startswith("actions/cache@"))
        assert "pip" in cache["with"]["path"] and "${{ env.MLBENCH }}" in cache["with"]["key"]


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash")
def test_pull_request_job_runs_in_a_fresh_repository_without_torch(tmp_path):
    """The PR workflow's own scripts, in a repository that has only pipelines: validate passes, the plan
    of a changed pipeline lands in plan.md and the summary, and no ML framework is imported."""
    git = lambda cwd, *args: subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)  # noqa: E731
    upstream, work = tmp_path / "upstream", tmp_path / "work"
    upstream.mkdir()  # the pipelines as a user copies them: the folder, with the models it names
    shutil.copytree(ROOT / "pipelines", upstream / "pipelines", ignore=shutil.ignore_patterns("reports", "__pycache__"))
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "-c", "user.email=ci@example.com", "-c", "user.name=CI", "add", ".")
    git(upstream, "-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "-q", "-m", "pipelines")
    subprocess.run(["git", "clone", "-q", str(upstream), str(work)], check=True, capture_output=True)
    coreml = work / "pipelines" / "coreml.yaml"
    coreml.write_text(coreml.read_text(encoding="utf-8").replace(
        "compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]", "compute_units: [cpu_only, cpu_and_ne, all]"))
    git(work, "-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "-q", "-am", "no cpu_and_gpu")

    bin_dir, heavy = tmp_path / "bin", tmp_path / "heavy.txt"
    bin_dir.mkdir()
    shim = bin_dir / "mlbench"
    shim.write_text(f"#!{sys.executable}\nimport os, sys\nfrom mlbench.cli.main import main\nrc = main()\n"
                    "open(os.environ['HEAVY'], 'a').write(' '.join(m for m in ('torch', 'coremltools', 'onnxruntime') "
                    "if m in sys.modules))\nsys.exit(rc)\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "HEAVY": str(heavy),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "BASE_REF": "origin/main"}
    workflow = load("pull-request.yml")
    scripts = [s["run"] for s in steps(workflow) if "run" in s and "pip install" not in s["run"] and "gh pr" not in s["run"]]
    assert len(scripts) == 2
    for script in scripts:
        result = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
    plan = (work / "plan.md").read_text(encoding="utf-8")
    assert plan.startswith("## mlbench plan: `pipelines/coreml.yaml`")
    assert "| variants | 51 → 39 (+0 added, −12 removed, 0 changed, 39 unchanged) |" in plan
    assert "| artifacts to build | 15 → 15 (+0 added, −0 removed, 0 changed, 15 unchanged) |" in plan  # load-time only
    assert "- `resnet18/coreml/float16/cpu_and_gpu/none`" in plan
    assert (tmp_path / "summary.md").read_text(encoding="utf-8") == plan
    assert heavy.read_text() == ""
