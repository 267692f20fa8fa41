"""The committed pipeline schema and `mlbench validate` give the same verdict, as a real third-party
client (`check-jsonschema`, which reads YAML 1.2 like editors do) sees the schema.

Each case says whether a JSON Schema can express its rule; where it can, the verdicts must match
and the schema's complaint must point where mlbench's does. Where it cannot (references between
sections, the whole matrix, a word that YAML 1.1 and 1.2 read differently), the schema accepts
what mlbench refuses, and the case says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from mlbench.config.pipeline_file import PipelineInvalid
from mlbench.errors import UserError
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytest.importorskip("check_jsonschema", reason="check-jsonschema comes with the dev extra: pip install -e '.[dev]'")

SCHEMA = ROOT / "schemas" / "pipeline.schema.json"

HEAD = """\
version: 1
name: {name}
models:
  - name: resnet18
    source: torchvision:resnet18
    inputs: [{{name: image, shape: [1, 3, 224, 224]}}]
"""


class Case(NamedTuple):
    name: str
    body: str  # after the models section
    mlbench: tuple[str, ...] | list[str]  # mlbench's messages as `where: what` (empty: valid)
    schema_path: str | None  # where the schema complains (None: it accepts); a prefix of an mlbench place
    unexpressible: str = ""  # why a JSON Schema cannot see the rule (then the schema accepts)
    header_name: str = "sweep"


CASES = [
    Case("scalar_axis", "targets:\n  - backend: torch\n    device: cpu\n", [], None),
    Case("quoted_on", "targets:\n  - backend: torch\n", [], None, header_name="'on'"),
    Case("empty_axis", "targets:\n  - backend: torch\n    device: []\n",
         ["targets[0].device: an axis needs at least one value"], "targets[0].device"),
    Case("repeated_axis_value", "targets:\n  - backend: torch\n    precision: [float32, float16, float32]\n",
         ["targets[0].precision: 'float32' is listed twice"], "targets[0].precision"),
    Case("bad_axis_value", "targets:\n  - backend: torch\n    device: [cdua]\n",
         ["targets[0].device[0]: 'cdua' is not allowed; expected 'cpu', 'cuda' or 'mps'"], "targets[0].device"),
    Case("mistyped_backend", "targets:\n  - backend: tourch\n",
         ["targets[0].backend: unknown backend 'tourch'; did you mean 'torch'? (backends: torch, coreml, onnxruntime, coreai, litert, executorch)"],
         "targets[0].backend"),
    Case("typo_in_a_coreml_target", "targets:\n  - backend: coreml\n    compute_unit: [all]\n",
         ["targets[0].compute_unit: unknown key 'compute_unit'; did you mean 'compute_units'?"], "targets[0]"),
    Case("yaml11_boolean_in_an_axis", "targets:\n  - backend: torch\n    precision: off\n",
         ["targets[0].precision: 'off' is not allowed; expected 'float32', 'float16' or 'bfloat16'"],
         "targets[0].precision"),
    Case("yaml11_boolean_as_a_switch", "targets:\n  - backend: torch\nhistory: {enabled: yes}\n",
         ["history.enabled: write true instead of yes: YAML 1.2 (editors, schema checkers) reads it as text"],
         "history.enabled"),
    Case("bad_recipe", "targets:\n  - backend: coreml\n    optimize: [p5]\noptimizations:\n"
         "  p5: {kind: palettize, nbits: 5}\n",
         ["optimizations.p5.nbits: 5 is not allowed; expected 1, 2, 3, 4, 6 or 8"], "optimizations.p5.nbits"),
    Case("missing_targets", "", ["missing required key 'targets'"], ""),
    Case("yaml11_boolean_as_a_name", "targets:\n  - backend: torch\n",
         ["name: on reads as a boolean here (YAML 1.1); quote it: 'on'"], None,
         unexpressible="YAML 1.2 readers (editors, check-jsonschema) read `on` as the text 'on'", header_name="on"),
    Case("unknown_recipe", "targets:\n  - backend: coreml\n    optimize: [palettize4]\n",
         ["targets[0].optimize[0]: unknown optimization 'palettize4' (define it under `optimizations`; known: none)"], None,
         unexpressible="a reference from one section to the keys of another"),
    Case("include_of_an_unknown_model", "targets:\n  - backend: torch\ninclude:\n  - {backend: torch, model: resnet19}\n",
         ["include[0].model: unknown model 'resnet19'; did you mean 'resnet18'?"], None,
         unexpressible="a reference from one section to the names in another"),
    Case("everything_excluded", "targets:\n  - backend: torch\nexclude:\n  - {backend: torch}\n",
         ["exclude: the matrix is empty: every variant is excluded"], None,
         unexpressible="the expanded matrix, not any one value"),
]


def _write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / f"{case.name}.yaml"
    path.write_text(HEAD.format(name=case.header_name) + case.body, encoding="utf-8")
    return path


def mlbench_verdict(path: Path) -> list[str]:
    """`where: what` of each problem `mlbench validate` reports (empty when valid)."""
    try:
        load_pipeline(path)
    except PipelineInvalid as exc:
        return [f"{e.where}: {e.what}" if e.where else e.what for e in exc.errors]
    except UserError as exc:
        return [f"{exc.where}: {exc.what}" if exc.where else exc.what]
    return []


def schema_verdict(paths: list[Path]) -> dict[Path, list[dict]]:
    """check-jsonschema's errors per file, run once over all of them (its own process, its own YAML reader)."""
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), "-o", "json",
                             *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    out = json.loads(result.stdout)
    assert out["parse_errors"] == []
    errors: dict[Path, list[dict]] = {path: [] for path in paths}
    for error in out["errors"]:
        errors[Path(error["filename"])].append(error)
    return errors


def _place(json_path: str) -> str:
    """`$.targets[0].device` → `targets[0].device`."""
    return json_path.removeprefix("$").removeprefix(".")


def test_schema_and_validate_agree_on_the_repository_and_on_mistakes(tmp_path):
    good = sorted((ROOT / "pipelines").glob("*.yaml"))
    assert len(good) >= 3
    written = [(case, _write(tmp_path, case)) for case in CASES]
    verdicts = schema_verdict([*good, *(p for _, p in written)])
    for path in good:
        assert mlbench_verdict(path) == [], path
        assert verdicts[path] == [], (path, verdicts[path])
    for case, path in written:
        mine, theirs = mlbench_verdict(path), verdicts[path]
        assert mine == case.mlbench, case.name
        if case.unexpressible:
            assert mine and not theirs, f"{case.name}: the schema now expresses it; move it to the agreeing cases"
            continue
        assert bool(mine) == bool(theirs), (case.name, theirs)
        if case.schema_path is not None:
            places = [_place(e["path"]) for e in theirs]
            assert case.schema_path in places, (case.name, theirs)
            assert all(m.startswith(case.schema_path) for m in mine), (case.name, mine)


def test_an_editor_sees_the_named_targets_errors_not_the_first_targets(tmp_path):
    """The tag picks the branch: a Core ML target with a typo gets Core ML's complaint, and a mistyped
    backend gets the list of backends (not 'Value must be "torch"', which a oneOf gave)."""
    cases = [c for c in CASES if c.name in ("typo_in_a_coreml_target", "mistyped_backend")]
    paths = [_write(tmp_path, c) for c in cases]
    messages = {p.stem: [e["message"] for e in errs] for p, errs in schema_verdict(paths).items()}
    assert messages["typo_in_a_coreml_target"] == ["Additional properties are not allowed ('compute_unit' was unexpected)"]
    assert messages["mistyped_backend"] == ["'tourch' is not one of ['torch', 'coreml', 'onnxruntime', 'coreai', 'litert', 'executorch']"]
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert "discriminator" not in SCHEMA.read_text(encoding="utf-8")
    branches = schema["properties"]["targets"]["items"]["allOf"]
    assert [b["if"]["properties"]["backend"]["const"] for b in branches] == ["torch", "coreml", "onnxruntime", "coreai", "litert", "executorch"]


def test_an_axis_in_the_schema_is_one_value_or_a_list_without_repeats():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    device = schema["$defs"]["TorchTarget"]["properties"]["device"]
    single, listed = device["anyOf"]
    assert single == {"enum": ["cpu", "cuda", "mps"], "type": "string"}
    assert listed == {"type": "array", "items": single, "minItems": 1, "uniqueItems": True}


def test_an_entry_without_a_backend_gets_one_schema_error_naming_it(tmp_path):
    """Each branch's `if` requires the tag: without it, a validator would take every branch's `then` and
    show four complaints (the missing tag plus each backend's own) for one missing key."""
    case = Case("no_backend", "targets:\n  - {precision: [float32]}\ninclude:\n  - {model: resnet18}\n", [], None)
    path = _write(tmp_path, case)
    assert [(e["path"], e["message"]) for e in schema_verdict([path])[path]] == [
        ("$.targets[0]", "'backend' is a required property"), ("$.include[0]", "'backend' is a required property")]
    assert mlbench_verdict(path) == ["targets[0]: missing required key 'backend'",
                                     "include[0]: missing required key 'backend'"]
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    for section in ("targets", "include"):
        items = schema["properties"][section]["items"]
        assert items["required"] == ["backend"]
        assert all(branch["if"]["required"] == ["backend"] for branch in items["allOf"])
