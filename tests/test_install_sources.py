"""mlbench-ondevice is not on the package index yet: the README and the example workflows install it from what
exists (a checkout, or mlbench's git repository named by a repository variable) and say so; the publish
workflow (tag → build → check → upload with trusted publishing) is ready beside them."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

tomllib = pytest.importorskip("tomllib")
PUBLISH = ROOT / ".github" / "workflows" / "publish.yml"


def workflow(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_the_readme_installs_from_what_exists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "not on the package index yet" in readme
    assert 'pip install "mlbench-ondevice[coreml] @ git+https://github.com/ORG/mlbench@v' in readme
    assert 'pip install -e ".[coreml]"' in readme


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", ["pull-request.yml", "nightly.yml"])
def test_the_example_install_step_says_what_to_set_when_the_source_is_missing(name, tmp_path):
    steps = [s for job in workflow(ROOT / "examples" / "ci" / name)["jobs"].values() for s in job["steps"]]
    (install,) = [s["run"] for s in steps if "pip install" in s.get("run", "")]
    result = subprocess.run(["bash", "-e", "-c", install], env={**os.environ, "MLBENCH_GIT": "", "MLBENCH": "x"},
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stdout == ("::error::mlbench-ondevice is not on the package index yet: set the repository variable "
                             "MLBENCH_GIT to mlbench's git URL and tag, e.g. git+https://github.com/ORG/mlbench@v0.1.0\n")


def test_the_publish_workflow_builds_on_a_tag_and_uploads_with_trusted_publishing():
    data = workflow(PUBLISH)
    assert data["on"] == {"push": {"tags": ["v*"]}}
    assert data["permissions"] == {"contents": "read"}
    build, publish = data["jobs"]["build"], data["jobs"]["publish"]
    runs = "\n".join(s.get("run", "") for s in build["steps"])
    assert "python -m build" in runs and "twine check --strict dist/*" in runs
    assert "/tmp/core/bin/mlbench validate pipelines/*.yaml" in runs
    assert publish["needs"] == "build" and publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    assert [s.get("uses") for s in publish["steps"]] == ["actions/download-artifact@v4",
                                                         "pypa/gh-action-pypi-publish@release/v1"]
    assert not any("password" in s.get("with", {}) for s in publish["steps"])  # no stored token


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_publish_workflow_refuses_a_tag_that_is_not_the_version(tmp_path):
    (check,) = [s["run"] for s in workflow(PUBLISH)["jobs"]["build"]["steps"] if "GITHUB_REF_NAME" in s.get("run", "")]
    for tag, code in ((f"v{version()}", 0), ("v99.0.0", 1)):
        result = subprocess.run(["bash", "-e", "-c", check], env={**os.environ, "GITHUB_REF_NAME": tag}, cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == code, result.stdout
    assert result.stdout == f"::error::tag v99.0.0, but pyproject.toml says version {version()}\n"
