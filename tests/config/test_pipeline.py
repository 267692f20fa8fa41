"""Pipeline files: the documented shape validates; every mistake is one line with its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench.config.pipeline_file import PipelineInvalid
from mlbench.errors import UserError
from mlbench.validate import load_pipeline

ISSUE_EXAMPLE = """\
# yaml-language-server: $schema=../schemas/pipeline.schema.json
version: 1
name: quickstart
models:
  - name: resnet18                      # safe identifier: letters, digits, - _ .
    source: torchvision:resnet18        # or "pkg.module:factory" or "path/to/file.py:Factory"
    kwargs: {weights: null}
    inputs:
      - {name: image, shape: [1, 3, 224, 224]}   # dtype defaults to float32
targets:                                # each target is one backend; list values are matrix axes
  - backend: torch
    device: [cpu]
    precision: [float32]
exclude:                                # entries match any variant field (model, backend, axis values)
  - {model: resnet18, device: cuda}
include: []                             # extra single variants, each a full set of fields
latency: {warmup: 5, repeats: 30, min_time_s: 1.0}
verify: {tolerance: {float32: 1.0e-4, float16: 1.0e-2}}
report: {dir: reports/quickstart, formats: [json, markdown]}
seed: 0
"""


def error_lines(path: Path) -> list[str]:
    with pytest.raises(UserError) as info:
        load_pipeline(path)
    return str(info.value).splitlines()


def test_documented_example_validates(write_pipeline, tmp_path):
    pipeline = load_pipeline(write_pipeline(ISSUE_EXAMPLE))
    config = pipeline.config
    assert config.name == "quickstart"
    assert config.models[0].inputs[0].dtype == "float32"
    assert config.targets[0].device == ["cpu"]
    assert config.latency.repeats == 30
    assert pipeline.report_dir == (tmp_path / "reports" / "quickstart").resolve()
    assert len(pipeline.sha256) == 64


def test_unknown_key_says_where_and_suggests(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("latency: {", "latnecy: {"))
    assert error_lines(path) == [f"{path}:17:1: latnecy: unknown key 'latnecy'; did you mean 'latency'?"]


def test_unknown_key_inside_a_target(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("    precision: [float32]", "    precison: [float32]"))
    assert error_lines(path) == [
        f"{path}:13:5: targets[0].precison: unknown key 'precison'; did you mean 'precision'?"
    ]


def test_bad_axis_value_points_at_the_value(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("device: [cpu]", "device: [cpu, cdua]"))
    assert error_lines(path) == [
        f"{path}:12:19: targets[0].device[1]: 'cdua' is not allowed; expected 'cpu', 'cuda' or 'mps'"
    ]


def test_unknown_backend_suggests(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("backend: torch", "backend: troch"))
    assert error_lines(path) == [
        f"{path}:11:14: targets[0].backend: unknown backend 'troch'; did you mean 'torch'? (backends: torch, coreml, onnxruntime, coreai, litert, executorch)"
    ]


def test_missing_required_key_points_at_its_mapping(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("    source: torchvision:resnet18        # or", "    # or"))
    assert error_lines(path) == [f"{path}:5:5: models[0]: no source, but variant resnet18/torch/cpu/float32 needs "
                                 "one: give the model a source, or exclude its variants that export"]


def test_several_problems_each_get_a_line(write_pipeline):
    text = ISSUE_EXAMPLE.replace("seed: 0", "seed: zero").replace("repeats: 30", "repeats: 0")
    lines = error_lines(write_pipeline(text))
    assert len(lines) == 2
    assert lines[0].endswith("latency.repeats: Input should be greater than or equal to 1, got 0")
    assert lines[1].endswith("seed: Input should be a valid integer, unable to parse string as an integer, got 'zero'")


def test_bad_model_source_and_name(write_pipeline):
    text = ISSUE_EXAMPLE.replace("source: torchvision:resnet18", "source: resnet18").replace(
        "name: resnet18 ", "name: res/net ")
    lines = error_lines(write_pipeline(text))
    assert lines[0].endswith("models[0].name: String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.-]*$', got 'res/net'")
    assert lines[1].endswith(
        "models[0].source: 'resnet18' is not a model source: use torchvision:NAME, pkg.module:factory, "
        "path/to/file.py:Factory, transformers:ClassName, path/model.pt2, path/model.pt or path/to/saved_dir"
    )


def test_scalar_axis_is_a_one_value_axis(write_pipeline):
    pipeline = load_pipeline(write_pipeline(ISSUE_EXAMPLE.replace("device: [cpu]", "device: cpu")))
    assert pipeline.config.targets[0].device == ["cpu"]


def test_duplicate_axis_value(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("device: [cpu]", "device: [cpu, cpu]"))
    assert error_lines(path) == [f"{path}:12:13: targets[0].device: 'cpu' is listed twice"]


def test_exclude_with_unknown_field(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("{model: resnet18, device: cuda}", "{model: resnet18, devcie: cuda}"))
    assert error_lines(path) == [
        f"{path}:15:23: exclude[0].devcie: unknown variant field 'devcie'; did you mean 'device'? "
        "(fields: model, backend, compute_units, delegate, device, optimize, precision, prompt, providers, shape, "
        "threads)"
    ]


def test_include_of_unknown_model(write_pipeline):
    text = ISSUE_EXAMPLE.replace(
        "include: []", "include:\n  - {model: resnet19, backend: torch, device: cpu, precision: float16}")
    path = write_pipeline(text)
    assert error_lines(path) == [f"{path}:17:13: include[0].model: unknown model 'resnet19'; did you mean 'resnet18'?"]


def test_empty_matrix_is_an_error(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("{model: resnet18, device: cuda}", "{model: resnet18}"))
    assert error_lines(path) == [f"{path}:14:1: exclude: the matrix is empty: every variant is excluded"]


def test_duplicate_model_names(write_pipeline):
    text = ISSUE_EXAMPLE.replace(
        "targets:", "  - {name: resnet18, source: torchvision:resnet18, inputs: [{name: x, shape: [1]}]}\ntargets:", 1)
    lines = error_lines(write_pipeline(text))
    assert lines[0].endswith("models: model name 'resnet18' is used twice")


def test_wrong_version(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE.replace("version: 1", "version: 2"))
    assert error_lines(path) == [f"{path}:2:10: version: 2 is not allowed; expected 1"]


def test_yaml_problem_is_one_line(write_pipeline):
    path = write_pipeline(ISSUE_EXAMPLE + "name: again\n")
    assert error_lines(path) == [f"{path}:21:1: duplicate key 'name' (first at line 3)"]


def test_pipeline_invalid_keeps_each_error():
    errors = [UserError("a", file="f.yaml", line=1, col=2, where="x"), UserError("b", file="f.yaml")]
    combined = PipelineInvalid(errors)
    assert str(combined) == "f.yaml:1:2: x: a\nf.yaml: b"
    assert combined.exit_code == 2


def test_two_targets_giving_one_variant_differently(write_pipeline):
    text = ISSUE_EXAMPLE.replace("exclude:", "  - {backend: torch, precision: float32, threads: 2}\nexclude:", 1)
    path = write_pipeline(text)
    assert error_lines(path) == [
        f"{path}:14:5: targets[1]: gives variant resnet18/torch/cpu/float32 again, with other options than "
        "targets[0]; a variant id must name one configuration"
    ]


def test_yaml11_booleans_are_refused_where_text_or_a_switch_is_expected(write_pipeline):
    """PyYAML reads on/off/yes/no as booleans (YAML 1.1); editors read them as text (YAML 1.2)."""
    text = ISSUE_EXAMPLE.replace("name: quickstart", "name: on").replace("precision: [float32]", "precision: [No]")
    path = write_pipeline(text + "history: {enabled: off}\n")
    assert error_lines(path) == [
        f"{path}:3:7: name: on reads as a boolean here (YAML 1.1); quote it: 'on'",
        f"{path}:13:17: targets[0].precision[0]: 'No' is not allowed; expected 'float32', 'float16' or 'bfloat16'",
    ]
    path = write_pipeline(text.replace("name: on", "name: 'on'").replace("[No]", "[float32]")
                          + "history: {enabled: off}\n")
    assert error_lines(path) == [
        f"{path}:21:20: history.enabled: write false instead of off: YAML 1.2 (editors, schema checkers) reads it as text"
    ]
    path = write_pipeline(text.replace("name: on", "name: 'on'").replace("[No]", "[float32]")
                          .replace("kwargs: {weights: null}", "kwargs: {weights: null, flags: [[on], {a: yes}]}")
                          + "history: {enabled: false}\n")
    config = load_pipeline(path).config
    assert config.name == "on"
    assert config.models[0].kwargs["flags"] == [[True], {"a": True}]  # a factory's own arguments: passed as read


def test_snr_floors_per_precision_and_recipe(write_pipeline):
    verify = load_pipeline(write_pipeline(ISSUE_EXAMPLE)).config.verify
    assert verify.min_snr_db == {"float32": 60.0, "float16": 30.0, "bfloat16": 20.0}  # mlbench's defaults
    assert (verify.min_snr_db_for("float32"), verify.min_snr_db_for("float16", "none")) == (60.0, 30.0)
    assert verify.min_snr_db_for("float16", "palettize4") == 10.0  # a recipe without an entry of its own
    assert verify.min_snr_db_for("int8") == 30.0  # a precision mlbench has no floor for: float16's
    path = write_pipeline(ISSUE_EXAMPLE.replace("verify: {tolerance: {float32: 1.0e-4, float16: 1.0e-2}}",
                                                "verify: {min_snr_db: {float16: 8, palettize4: 20, bfloat16: 25}}\n"
                                                "optimizations: {palettize4: {kind: palettize, nbits: 4}}"))
    verify = load_pipeline(path).config.verify
    assert verify.min_snr_db_for("float16", "palettize4") == 20.0  # the recipe's own entry wins
    assert verify.min_snr_db_for("float16", "w8a8") == 8.0  # the precision's floor is lower than a recipe's
    assert (verify.min_snr_db_for("float32"), verify.min_snr_db_for("bfloat16")) == (60.0, 25.0)
    bad = write_pipeline(ISSUE_EXAMPLE.replace("verify: {tolerance: {float32: 1.0e-4, float16: 1.0e-2}}",
                                               "verify: {min_snr_db: {float16: .inf}}"))
    assert error_lines(bad) == [f"{bad}:18:32: verify.min_snr_db.float16: Input should be a finite number, got inf"]
