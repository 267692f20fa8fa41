"""The coreai target without Core AI: recipe validation in Core ML's vocabulary, one line each, and the
one-line reasons where Core AI's wheels cannot exist. Needs neither torch nor Core AI."""

from __future__ import annotations

import pytest

from mlbench.backends.coreai.availability import platform_reason
from mlbench.backends.coreai.recipes import resolve, unsupported
from mlbench.validate import load_pipeline


@pytest.fixture(autouse=True)
def _model_file(tmp_path):
    """The file PIPELINE names (validate reads it for a top-level `Tiny`)."""
    (tmp_path / "tiny.py").write_text("class Tiny:\n    pass\n", encoding="utf-8")


PIPELINE = """\
version: 1
name: cai
models:
  - name: tiny
    source: tiny.py:Tiny
    inputs: [{name: x, shape: [1, 8]}]
targets:
  - backend: coreai
    precision: [float32]
    optimize: [none, OPT]
optimizations:
  palettize4: {kind: palettize, nbits: 4}
  palettize_uniform: {kind: palettize, nbits: 4, mode: uniform}
  int4_block: {kind: linear_quantize, dtype: int4, granularity: per_block, block_size: 32}
  prune50: {kind: prune, target_sparsity: 0.5}
  w8a8: {kind: linear_quantize_activations}
  a8: {kind: linear_quantize_activations, weights: false}
  sparse_pal: {kind: chain, steps: [prune50, palettize4]}
  pal_then_prune: {kind: chain, steps: [palettize4, prune50]}
"""


@pytest.mark.parametrize("name", ["palettize4", "int4_block", "prune50", "sparse_pal", "w8a8"])
def test_recipes_coreai_opt_applies_validate(write_pipeline, name):
    config = load_pipeline(write_pipeline(PIPELINE.replace("OPT", name)))
    assert config.config.targets[0].optimize == ["none", name]


@pytest.mark.parametrize(("name", "why"), [
    ("palettize_uniform", "coreai-opt palettizes by k-means only (mode: uniform has no Core AI pass)"),
    ("a8", "coreai-opt's quantizer is applied here as W8A8 only (weights: false has no Core AI recipe yet)"),
    ("pal_then_prune", "coreai-opt joins only prune then palettize (kmeans, per_tensor) or prune then "
                       "linear_quantize (int8/uint8, per_channel, symmetric); this chain is palettize then prune"),
])
def test_a_recipe_coreai_cannot_apply_fails_validation_in_one_line(write_pipeline, name, why):
    path = write_pipeline(PIPELINE.replace("OPT", name))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value) == (f"{path}:10:22: targets[0].optimize[1]: the coreai backend cannot apply recipe "
                               f"'{name}': {why}")


def test_an_unknown_recipe_names_the_known_ones(write_pipeline):
    path = write_pipeline(PIPELINE.replace("OPT", "palettize5"))
    with pytest.raises(Exception) as info:
        load_pipeline(path)
    assert str(info.value).startswith(f"{path}:10:22: targets[0].optimize[1]: unknown optimization 'palettize5'; "
                                      "did you mean 'palettize4'?")


def test_a_chain_resolves_its_steps_by_name():
    recipes = {"p": {"kind": "prune", "target_sparsity": 0.5}, "q": {"kind": "palettize", "nbits": 4},
               "c": {"kind": "chain", "steps": ["p", "q"]}}
    assert resolve("c", recipes) == {"kind": "chain", "steps": [recipes["p"], recipes["q"]]}
    assert unsupported(resolve("c", recipes) or {}) is None
    assert resolve("none", recipes) is None


@pytest.mark.parametrize(("system", "machine", "python", "glibc", "why"), [
    ("linux", "x86_64", (3, 11), "2.39", None),
    ("darwin", "arm64", (3, 12), None, None),
    ("linux", "aarch64", (3, 11), "2.39", "Core AI has no wheel for Linux aarch64 (only Linux x86_64 and macOS arm64)"),
    ("linux", "x86_64", (3, 11), "2.31", "Core AI's Linux wheel needs glibc 2.34 or later; this machine has glibc 2.31"),
    ("linux", "x86_64", (3, 10), "2.39", "Core AI's wheels need Python 3.11 or later; this is Python 3.10"),
    ("darwin", "x86_64", (3, 11), None, "Core AI has no wheel for macOS x86_64 (only Apple silicon)"),
    ("win32", "AMD64", (3, 11), None, "Core AI has no wheel for win32 (only Linux x86_64 and macOS arm64)"),
])
def test_platforms_without_wheels_get_a_one_line_reason(system, machine, python, glibc, why):
    assert platform_reason(system, machine, python, glibc) == why


def test_where_core_ai_cannot_run_its_variants_are_skipped_with_the_reason(write_pipeline, monkeypatch, tmp_path):
    from mlbench.backends import base
    from mlbench.backends.coreai import backend as coreai_backend
    from mlbench.store.cache import ArtifactCache

    config = load_pipeline(write_pipeline(PIPELINE.replace("OPT", "palettize4"))).config
    why = "Core AI has no wheel for Linux aarch64 (only Linux x86_64 and macOS arm64)"
    monkeypatch.setattr(coreai_backend, "unavailable", lambda: why)
    backend = coreai_backend.CoreaiBackend(config.targets[0], config, ArtifactCache(tmp_path / "cache"))
    with pytest.raises(base.VariantSkipped) as info:
        backend.export(None, None)  # type: ignore[arg-type] - refused before the model is looked at
    assert str(info.value) == why
    with pytest.raises(base.VariantSkipped) as info:
        backend.measure(None, None, None)  # type: ignore[arg-type]
    assert str(info.value) == why
