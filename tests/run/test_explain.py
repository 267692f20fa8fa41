"""`mlbench explain`'s user errors, one line each, and the advised pipeline it writes (no torch)."""

from __future__ import annotations

import json

import pytest
import yaml

from mlbench.errors import UserError
from mlbench.localization import ErrorLocalization, LayerAdvice, as_record
from mlbench.run.explain import advised_pipeline, explain

PIPELINE = """\
version: 1
name: p
models:
  - {name: m, source: torchvision:resnet18, inputs: [{name: x, shape: [1, 3, 8, 8]}]}
targets:
  - {backend: coreml, optimize: [none, pal4]}
optimizations:
  pal4: {kind: palettize, nbits: 4}
verify: {min_snr_db: {pal4: 25}}
"""


def _report(tmp_path, details=None):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    record = {"variant_id": "m/coreml/float16/all/pal4", "model": "m", "backend": "coreml", "axes": {},
              "artifact_id": "a", "status": "failed", "started": "t", "seconds": 1.0, "details": details or {}}
    report = {"schema_version": 2, "mlbench_version": "0", "run_id": "r", "created": "t", "finished": "t",
              "pipeline": {"name": "p", "path": str(pipeline), "sha256": "0" * 64}, "machine": {}, "settings": {}, "records": [record],
              "summary": {"failed": 1}}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


def _found():
    advice = LayerAdvice(recipe="pal4", advised_recipe="pal4_advised", exclude=["layer4"],
                         override={"pal4_advised": {"kind": "palettize", "nbits": 4, "exclude": ["layer4"]}},
                         reason="r")
    return ErrorLocalization(variant="m/coreml/float16/all/pal4", backend="coreml", reference="r", source="emulated",
                             samples=1, seconds=1.0, output_snr_db=9.0, ops=[], advice=advice)


def test_an_unknown_variant_is_one_line_with_a_suggestion(tmp_path):
    path = _report(tmp_path)
    with pytest.raises(UserError) as caught:
        explain(path, "m/coreml/float16/all/pal5")
    assert str(caught.value) == f"{path}: no variant 'm/coreml/float16/all/pal5' in this report; did you mean " \
                                "'m/coreml/float16/all/pal4'?"


def test_the_runs_own_localization_is_reused(tmp_path):
    path = _report(tmp_path, {"localization": as_record(_found())})
    assert explain(path, "m/coreml/float16/all/pal4").advice.exclude == ["layer4"]


def test_the_advised_pipeline_adds_the_recipe_beside_the_variants_with_its_limits(tmp_path):
    path = _report(tmp_path)
    written = advised_pipeline(path, _found(), tmp_path / "p.advised.yaml")
    data = yaml.safe_load(written.read_text(encoding="utf-8"))
    assert data["targets"][0]["optimize"] == ["none", "pal4", "pal4_advised"]
    assert data["optimizations"]["pal4_advised"] == {"kind": "palettize", "nbits": 4, "exclude": ["layer4"]}
    assert data["verify"]["min_snr_db"] == {"pal4": 25, "pal4_advised": 25}


def test_the_advised_pipeline_stays_beside_the_original(tmp_path):
    path = _report(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(UserError, match=r"write the advised pipeline beside p\.yaml"):
        advised_pipeline(path, _found(), tmp_path / "elsewhere" / "p.yaml")
