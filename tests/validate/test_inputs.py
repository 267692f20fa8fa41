"""Inputs are checked before any work starts: each mistake is one line with its place and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench.errors import UserError
from mlbench.validate import load_pipeline

BASE = """\
version: 1
name: checks
models:
  - name: m
    source: model.py:Net
    inputs:
      - {name: x, shape: [1, 8]}
targets:
  - backend: torch
optimizations:
  pal: {kind: palettize, nbits: 4}
latency: {warmup: 1, repeats: 3}
report: {dir: out}
seed: 0
"""


@pytest.fixture(autouse=True)
def _model_file(tmp_path):
    """The file BASE names (validate reads it for a top-level `Net`)."""
    (tmp_path / "model.py").write_text("class Net:\n    pass\n", encoding="utf-8")


def errors(path: Path) -> list[str]:
    with pytest.raises(UserError) as info:
        load_pipeline(path)
    return str(info.value).splitlines()


def test_the_base_pipeline_is_valid(write_pipeline):
    assert load_pipeline(write_pipeline(BASE)).config.seed == 0


def test_duplicate_input_names(write_pipeline):
    path = write_pipeline(BASE.replace("      - {name: x, shape: [1, 8]}\n",
                                       "      - {name: x, shape: [1, 8]}\n      - {name: x, shape: [2]}\n"))
    assert errors(path) == [f"{path}:7:7: models[0].inputs: input name 'x' is used twice; "
                            "forward() takes each input once"]


def test_report_dir_where_a_file_is(write_pipeline, tmp_path):
    (tmp_path / "out").write_text("a file")
    path = write_pipeline(BASE)
    assert errors(path) == [f"{path}:13:15: report.dir: the report folder {tmp_path / 'out'} cannot be created: "
                            f"{tmp_path / 'out'} is a file"]
    (tmp_path / "out").unlink()
    (tmp_path / "blocker").write_text("a file")
    path = write_pipeline(BASE.replace("report: {dir: out}", "report: {dir: blocker/reports}"))
    assert errors(path) == [f"{path}:13:15: report.dir: the report folder {tmp_path / 'blocker' / 'reports'} cannot "
                            f"be created: {tmp_path / 'blocker'} is a file"]


def test_report_dir_too_long(write_pipeline):
    path = write_pipeline(BASE.replace("report: {dir: out}", f"report: {{dir: {'a' * 300}}}"))
    assert errors(path) == [f"{path}:13:15: report.dir: the report folder's path has a name of 300 bytes "
                            "(aaaaaaaaaaaaaaaa…); a folder name holds at most 255"]
    deep = "/".join(["b" * 200] * 25)
    path = write_pipeline(BASE.replace("report: {dir: out}", f"report: {{dir: {deep}}}"))
    length = len(str((path.parent / deep).resolve()))
    assert errors(path) == [f"{path}:13:15: report.dir: the report folder's path is {length} bytes long; a path "
                            "holds at most 4095"]


def test_default_report_dir_is_checked_at_the_name(write_pipeline, tmp_path):
    (tmp_path / "reports").write_text("a file")
    path = write_pipeline(BASE.replace("report: {dir: out}\n", ""))
    assert errors(path) == [f"{path}:2:7: name: the report folder {tmp_path / 'reports' / 'checks'} cannot be "
                            f"created: {tmp_path / 'reports'} is a file"]


def test_names_must_match_whole_with_no_trailing_newline(write_pipeline):
    path = write_pipeline(BASE.replace("  pal: {kind: palettize, nbits: 4}", '  "pal\\n": {kind: palettize, nbits: 4}'))
    assert errors(path) == [f"{path}:11:3: optimizations: 'pal\\n' cannot name a recipe: use letters, digits, "
                            "- _ . and not 'none'"]
    path = write_pipeline(BASE.replace("    source: model.py:Net", '    source: "model.py:Net\\n"'))
    assert errors(path) == [f"{path}:5:13: models[0].source: 'model.py:Net\\n' is not a model source: use "
                            "torchvision:NAME, pkg.module:factory, path/to/file.py:Factory, transformers:ClassName, "
                            "path/model.pt2, path/model.pt or path/to/saved_dir"]
    path = write_pipeline(BASE.replace("  - name: m\n", '  - name: "m\\n"\n'))
    assert errors(path) == [f"{path}:4:11: models[0].name: String should match pattern "
                            "'^[A-Za-z0-9][A-Za-z0-9_.-]*$', got 'm\\n'"]


@pytest.mark.parametrize(("seed", "col"), [(-1, 7), (2**32, 7)])
def test_seed_out_of_range(write_pipeline, seed, col):
    path = write_pipeline(BASE.replace("seed: 0", f"seed: {seed}"))
    assert errors(path) == [f"{path}:14:{col}: seed: the seed must be between 0 and 4294967295 (2^32 - 1), "
                            f"got {seed}"]


def test_absurd_shape(write_pipeline):
    path = write_pipeline(BASE.replace("shape: [1, 8]", "shape: [100000, 100000, 3]"))
    assert errors(path) == [f"{path}:7:7: models[0].inputs: input 'x' of shape [100000, 100000, 3] has "
                            "30,000,000,000 elements; at most 2,147,483,647 (2^31 - 1) are allowed"]


def test_absurd_repeat_counts(write_pipeline):
    path = write_pipeline(BASE.replace("repeats: 3}", "repeats: 100000000}"))
    assert errors(path) == [f"{path}:12:31: latency.repeats: Input should be less than or equal to 1000000, "
                            "got 100000000"]
    path = write_pipeline(BASE.replace("repeats: 3}", "repeats: 50, max_repeats: 10}"))
    assert errors(path) == [f"{path}:12:10: latency: repeats (50) is more than max_repeats (10); raise max_repeats "
                            "or lower repeats"]


def test_not_a_number_is_called_so(write_pipeline):
    """NaN compares false with everything: it was refused as "less than or equal to 3600"."""
    path = write_pipeline(BASE.replace("latency: {warmup: 1, repeats: 3}", "latency: {warmup: 1, repeats: 3, "
                                       "min_time_s: .nan}\nlimits: {export_s: .nan, measure_s: .inf}"))
    assert errors(path) == [f"{path}:12:46: latency.min_time_s: Input should be a finite number, got nan",
                            f"{path}:13:20: limits.export_s: Input should be a finite number, got nan",
                            f"{path}:13:37: limits.measure_s: Input should be a finite number, got inf"]


def test_limits_are_checked_and_overridable_per_target(write_pipeline):
    path = write_pipeline(BASE.replace("seed: 0", "seed: 0\nlimits: {measure_s: 0}"))
    assert errors(path) == [f"{path}:15:21: limits.measure_s: Input should be greater than 0, got 0"]
    text = BASE.replace("  - backend: torch\n", "  - backend: torch\n    limits: {measure_s: 5, memory_gb: 2}\n")
    config = load_pipeline(write_pipeline(text + "limits: {export_s: 60}\n")).config
    from mlbench.matrix import expand
    from mlbench.run.limits import ChildLimits, limits_for

    assert limits_for(config, expand(config)[0]) == ChildLimits(export_s=60, measure_s=5, memory_gb=2)
    assert "limits" not in expand(config)[0].fixed  # limits shape no artifact
