"""`mlbench plan --diff` and `--against`: what a change to a pipeline file does to the matrix."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from mlbench.cli.main import main
from mlbench.plan_diff import diff_plans
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

BASE = """\
version: 1
name: sweep
models:
  - name: a
    source: torchvision:resnet18
    kwargs: {num_classes: 10}
    inputs: [{name: image, shape: [1, 3, 32, 32]}]
  - name: b
    source: torchvision:resnet18
    inputs: [{name: image, shape: [1, 3, 32, 32]}]
targets:
  - backend: torch
    device: [cpu, cuda]
    precision: [float32]
  - backend: coreml
    precision: [float16]
    compute_units: [all]
    optimize: [none, p4]
optimizations:
  p4: {kind: palettize, nbits: 4}
latency: {repeats: 30}
"""

# b's kwargs, torch's precision axis, the recipe and a setting change; cuda goes
HEAD = (BASE.replace("device: [cpu, cuda]\n    precision: [float32]", "device: [cpu]\n    precision: [float32, float16]")
        .replace("p4: {kind: palettize, nbits: 4}", "p4: {kind: palettize, nbits: 6}")
        .replace("kwargs: {num_classes: 10}", "kwargs: {num_classes: 12}")
        .replace("repeats: 30", "repeats: 50"))


def _diff(write_pipeline, base=BASE, head=HEAD):
    b, h = write_pipeline(base, "base.yaml"), write_pipeline(head, "head.yaml")
    return diff_plans(load_pipeline(b).config, load_pipeline(h).config, "base.yaml", "head.yaml")


def test_variants_and_artifacts_added_removed_and_changed(write_pipeline):
    diff = _diff(write_pipeline)
    assert diff.variants.added == ["a/torch/cpu/float16", "b/torch/cpu/float16"]
    assert diff.variants.removed == ["a/torch/cuda/float32", "b/torch/cuda/float32"]
    changed = {c.id: c.fields for c in diff.variants.changed}
    assert changed["a/torch/cpu/float32"] == {"model.kwargs.num_classes": (10, 12)}
    assert changed["b/coreml/float16/all/p4"] == {"optimizations.p4.nbits": (4, 6)}
    assert changed["a/coreml/float16/all/p4"] == {"model.kwargs.num_classes": (10, 12), "optimizations.p4.nbits": (4, 6)}
    assert "b/torch/cpu/float32" not in changed and "b/coreml/float16/all/none" not in changed
    assert diff.variants.unchanged == 2 and len(diff.variants.changed) == 4

    assert diff.artifacts.added == ["a/torch/float16", "b/torch/float16"] and diff.artifacts.removed == []
    assert {c.id for c in diff.artifacts.changed} == {"a/torch/float32", "a/coreml/float16/none",
                                                      "a/coreml/float16/p4", "b/coreml/float16/p4"}
    assert diff.settings == {"latency.repeats": (30, 50)}
    assert (len(diff.base.variants), len(diff.head.variants)) == (8, 8)


def test_a_measurement_only_axis_changes_variants_not_artifacts(write_pipeline):
    diff = _diff(write_pipeline, head=BASE.replace("compute_units: [all]", "compute_units: [all, cpu_only]"))
    assert diff.variants.added == ["a/coreml/float16/cpu_only/none", "a/coreml/float16/cpu_only/p4",
                                   "b/coreml/float16/cpu_only/none", "b/coreml/float16/cpu_only/p4"]
    assert diff.artifacts.empty and not diff.settings


def test_no_change(write_pipeline, capsys):
    path = str(write_pipeline(BASE, "same.yaml"))
    assert main(["plan", "--diff", path, path]) == 0
    assert capsys.readouterr().out.endswith("No change to the matrix: 8 variants, 6 artifacts to build.\n")


def test_markdown_for_a_pull_request(write_pipeline, capsys):
    b, h = write_pipeline(BASE, "base.yaml"), write_pipeline(HEAD, "head.yaml")
    assert main(["plan", "--diff", str(b), str(h)]) == 0
    out = capsys.readouterr().out
    assert "| variants | 8 → 8 (+2 added, −2 removed, 4 changed, 2 unchanged) |" in out
    assert "| artifacts to build | 6 → 8 (+2 added, −0 removed, 4 changed, 2 unchanged) |" in out
    assert "| `a/coreml/float16/all/p4` | `model.kwargs.num_classes` | `10` | `12` |\n|  | `optimizations.p4.nbits` | `4` | `6` |" in out
    assert "| `latency.repeats` | `30` | `50` |" in out
    assert "#### Removed variants (2)\n\n- `a/torch/cuda/float32`\n- `b/torch/cuda/float32`" in out


def test_json(write_pipeline, capsys):
    b, h = write_pipeline(BASE, "base.yaml"), write_pipeline(HEAD, "head.yaml")
    assert main(["plan", "--diff", str(b), str(h), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["base"] == {"label": str(b), "variants": 8, "artifacts": 6}
    assert data["variants"]["added"] == ["a/torch/cpu/float16", "b/torch/cpu/float16"]
    change = next(c for c in data["variants"]["changed"] if c["id"] == "b/coreml/float16/all/p4")
    assert change["fields"] == {"optimizations.p4.nbits": {"base": 4, "head": 6}}
    assert data["settings"] == {"latency.repeats": {"base": 30, "head": 50}}


def test_long_lists_fold_into_details(write_pipeline, capsys):
    many = BASE.replace("device: [cpu, cuda]", "device: [cpu]")
    for i in range(12):
        many = many.replace("targets:", f"  - name: m{i}\n    source: torchvision:resnet18\n"
                            "    inputs: [{name: image, shape: [1, 3, 32, 32]}]\ntargets:", 1)
    b, h = write_pipeline(BASE, "base.yaml"), write_pipeline(many, "head.yaml")
    assert main(["plan", "--diff", str(b), str(h)]) == 0
    out = capsys.readouterr().out
    assert "<details><summary><b>Added variants (36)</b></summary>" in out
    assert "#### Removed variants (2)" in out  # short lists stay open


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_against_a_git_revision(tmp_path, capsys):
    git = lambda *args: subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)  # noqa: E731
    git("init", "-q", "-b", "main")
    git("config", "user.email", "ci@example.com")
    git("config", "user.name", "CI")
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(BASE, encoding="utf-8")
    git("add", ".")
    git("commit", "-q", "-m", "base")
    (folder / "sweep.yaml").write_text(HEAD, encoding="utf-8")
    (folder / "new.yaml").write_text(BASE, encoding="utf-8")
    path = folder / "sweep.yaml"
    assert main(["plan", str(path), "--against", "main", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["base"]["label"] == f"main:{path}" and data["variants"]["added"] == ["a/torch/cpu/float16",
                                                                                     "b/torch/cpu/float16"]
    assert main(["plan", str(folder / "new.yaml"), "--against", "main"]) == 0
    out = capsys.readouterr().out
    assert "(not in that revision)" in out and "| variants | 0 → 8 (+8 added, −0 removed, 0 changed, 0 unchanged) |" in out
    assert main(["plan", str(path), "--against", "no-such-branch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: --against no-such-branch: ") and err[-1] == "\n" and err.count("\n") == 1


def test_the_repositorys_pipelines_against_themselves():
    for path in sorted((ROOT / "pipelines").glob("*.yaml")):
        config = load_pipeline(path).config
        assert diff_plans(config, config, "a", "b").empty
