"""The litert target without LiteRT installed: validation, recipes beside Core ML's, the missing-extra line."""

from __future__ import annotations

import importlib.util

import pytest

from mlbench.validate import load_pipeline
from tests.conftest import ROOT

PIPELINE = f"""\
version: 1
name: lt
models:
  - name: tiny
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}]
targets:
  - backend: litert
    precision: [float32, float16]
    optimize: [none, dyn8]
    threads: [1, 2]
optimizations:
  dyn8: {{kind: litert_quantize, scheme: dynamic_int8}}
  pal4: {{kind: palettize, nbits: 4}}
"""


def test_axes_and_artifact_axes(write_pipeline):
    from mlbench.matrix import expand

    pipeline = load_pipeline(write_pipeline(PIPELINE))
    variants = expand(pipeline.config)
    ids = [v.id for v in variants]
    assert ids[:4] == ["tiny/litert/float32/none/1", "tiny/litert/float32/none/2", "tiny/litert/float32/dyn8/1",
                       "tiny/litert/float32/dyn8/2"]
    # threads are chosen when the interpreter is created: the two thread counts share one artifact
    assert len({v.artifact_id for v in variants}) == 4


@pytest.mark.parametrize(("optimize", "message"), [
    ("dyn9", "unknown optimization 'dyn9'; did you mean 'dyn8'? (define it under `optimizations`; known: none, dyn8)"),
    ("pal4", "optimization 'pal4' is not a litert_quantize recipe (litert takes: none, dyn8)"),
])
def test_recipe_mistakes_are_one_line_errors(write_pipeline, optimize, message):
    path = write_pipeline(PIPELINE.replace("optimize: [none, dyn8]", f"optimize: [none, {optimize}]"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == f"{path}:10:22: targets[0].optimize[1]: {message}"


def test_an_unknown_scheme_names_the_choices(write_pipeline):
    path = write_pipeline(PIPELINE.replace("scheme: dynamic_int8", "scheme: dynamic_int4"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    # one union of every backend's recipes, by kind: the error names the key, not a union member
    assert str(info.value) == (f"{path}:13:41: optimizations.dyn8.scheme: 'dynamic_int4' is not allowed; expected "
                               "'dynamic_int8', 'weight_only_int8', 'full_int8' or 'weight_only_int4'")


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch):
    from mlbench.backends.base import VariantSkipped, require_modules
    from mlbench.backends.litert.backend import MODULES

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ai_edge_litert" else real(name, *a))
    with pytest.raises(VariantSkipped) as info:
        require_modules("litert", "litert", MODULES)
    if real("litert_torch") is None:  # this machine has no litert-torch: that is named first
        assert str(info.value).startswith("the litert backend needs litert-torch, ai-edge-litert")
    else:
        assert str(info.value) == ("the litert backend needs ai-edge-litert, which is not installed: pip install "
                                   "'mlbench-ondevice[litert]'")


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("litert_torch") is not None, reason="litert-torch is installed here")
def test_without_the_extra_a_run_skips_litert_variants_with_one_line(write_pipeline, tmp_path):
    pytest.importorskip("torch")
    from mlbench.run.runner import run

    text = PIPELINE.replace("precision: [float32, float16]", "precision: float32").replace(
        "optimize: [none, dyn8]", "optimize: none").replace("threads: [1, 2]", "threads: 1")
    report = run(load_pipeline(write_pipeline(text + f"cache: {{dir: {tmp_path}/cache}}\n"
                                                     f"report: {{dir: {tmp_path}/out, formats: [json]}}\n")))
    (record,) = report.records
    assert record.status == "skipped"
    assert record.error.startswith("the litert backend needs litert-torch")
    assert record.error.endswith("not installed: pip install 'mlbench-ondevice[litert]'")
