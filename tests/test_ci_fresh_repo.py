"""The example workflows as a user adopts them: `examples/ci/*.yml` and `pipelines/` copied into a fresh
repository with nothing else, then every shell step the workflows run (all but installing and commenting on
the pull request) runs there and passes.

The pull-request workflow runs as written, on every copied pipeline. The nightly validates the real Core ML
pipeline (`pipelines/coreml.yaml`, whose models are in `pipelines/models/`), then runs, compares and
summarises a tiny pipeline written into the copied `pipelines/` beside it (eager PyTorch on the copied
`models/tiny_cnn.py`): the Core ML sweep takes minutes, too long for a test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = [pytest.mark.torch, pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None,
                                                    reason="needs git and bash")]

TINY = """\
version: 1
name: tiny
models:
  - name: tiny_cnn
    source: models/tiny_cnn.py:TinyCNN
    inputs:
      - {name: image, shape: [1, 3, 32, 32]}
targets:
  - backend: torch
    device: [cpu]
    precision: [float32]
latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}
report: {dir: reports/tiny, formats: [json, markdown, html]}
"""


def scripts(workflow: Path) -> list[tuple[str, str, bool]]:
    """(name, script, may fail) of each step that runs a shell script, but installing mlbench and posting on the
    PR; a step marked `continue-on-error` may fail, as it may on GitHub (the nightly's calibrate step finds no
    Mac-measured records on Linux), but only with a one-line message."""
    data = yaml.safe_load(workflow.read_text(encoding="utf-8"))
    return [(step.get("name", ""), step["run"], bool(step.get("continue-on-error")))
            for job in data["jobs"].values() for step in job["steps"]
            if "run" in step and "pip install" not in step["run"] and "gh pr" not in step["run"]]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.email=ci@example.com", "-c", "user.name=CI", *args],
                   check=True, capture_output=True)


def fresh_repository(tmp_path: Path) -> Path:
    upstream, work = tmp_path / "upstream", tmp_path / "work"
    (upstream / ".github" / "workflows").mkdir(parents=True)
    for path in (ROOT / "examples" / "ci").glob("*.yml"):
        shutil.copy(path, upstream / ".github" / "workflows" / path.name)
    shutil.copytree(ROOT / "pipelines", upstream / "pipelines", ignore=shutil.ignore_patterns("reports", "__pycache__"))
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "pipelines and workflows")
    subprocess.run(["git", "clone", "-q", str(upstream), str(work)], check=True, capture_output=True)
    return work


def run_steps(steps: list[tuple[str, str, bool]], work: Path, env: dict[str, str]) -> None:
    for name, script, may_fail in steps:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                                capture_output=True, text=True, timeout=600)
        if may_fail and result.returncode != 0:
            assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
                f"step {name!r} failed without one clear line: {result.stderr[-3000:]}")
            continue
        assert result.returncode == 0, f"step {name!r} failed: {result.stderr[-3000:]}"


def test_the_example_workflows_run_in_a_repository_with_only_pipelines(tmp_path):
    work = fresh_repository(tmp_path)
    assert sorted(p.name for p in work.iterdir() if p.name != ".git") == [".github", "pipelines"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mlbench").write_text(f"#!{sys.executable}\nimport sys\nfrom mlbench.cli.main import main\n"
                                     "sys.exit(main())\n")
    (bin_dir / "mlbench").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "BASE_REF": "origin/main"}
    workflows = work / ".github" / "workflows"

    run_steps(scripts(workflows / "pull-request.yml"), work, env)  # validate every pipeline, plan the change
    assert (work / "plan.md").read_text(encoding="utf-8") == "No pipeline file changed the matrix.\n"

    nightly = yaml.safe_load((workflows / "nightly.yml").read_text(encoding="utf-8"))
    assert nightly["env"]["PIPELINE"] == "pipelines/coreml.yaml"
    validate = [step for step in scripts(workflows / "nightly.yml") if step[1].strip().startswith("mlbench validate")]
    run_steps(validate, work, {**env, "PIPELINE": "pipelines/coreml.yaml"})  # the real one: its models are there

    (work / "pipelines" / "tiny.yaml").write_text(TINY, encoding="utf-8")
    night = {**env, "PIPELINE": "pipelines/tiny.yaml", "REPORT_DIR": "pipelines/reports/tiny",
             "MLBENCH_HISTORY": str(work / ".mlbench" / "history.sqlite"),
             "MLBENCH_CACHE_DIR": str(work / ".mlbench" / "cache")}
    run_steps(scripts(workflows / "nightly.yml"), work, night)  # the first night: nothing to compare with
    first = json.loads((work / "compare.json").read_text(encoding="utf-8"))
    assert first["base"] is None and first["regressed"] is False
    assert first["missing_base"].startswith("Nothing to compare with: ")
    assert (work / "pipelines" / "reports" / "tiny" / "report.html").is_file()
    assert "This run is the first" in (tmp_path / "summary.md").read_text(encoding="utf-8")
