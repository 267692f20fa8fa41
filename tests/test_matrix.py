"""Matrix expansion: stable ids, exclude/include, and which axes shape the artifact."""

from __future__ import annotations

import pytest

from mlbench.config.pipeline import PipelineConfig
from mlbench.matrix import Plan, VariantConflict, expand


def config(**overrides) -> PipelineConfig:
    data = {
        "version": 1,
        "name": "m",
        "models": [
            {"name": "a", "source": "torchvision:resnet18", "inputs": [{"name": "x", "shape": [1, 3, 8, 8]}]},
            {"name": "b", "source": "pkg.mod:make", "inputs": [{"name": "x", "shape": [1, 4]}]},
        ],
        "targets": [{"backend": "torch", "device": ["cpu", "cuda"], "precision": ["float32", "float16"]}],
    }
    data.update(overrides)
    return PipelineConfig.model_validate(data)


def test_ids_are_readable_and_ordered():
    ids = [v.id for v in expand(config())]
    assert ids == [
        "a/torch/cpu/float32", "a/torch/cpu/float16", "a/torch/cuda/float32", "a/torch/cuda/float16",
        "b/torch/cpu/float32", "b/torch/cpu/float16", "b/torch/cuda/float32", "b/torch/cuda/float16",
    ]


def test_measurement_only_axes_share_an_artifact():
    plan = Plan(expand(config()))
    groups = plan.artifact_groups()
    assert len(plan.variants) == 8 and len(groups) == 4
    assert [v.id for v in groups[0]] == ["a/torch/cpu/float32", "a/torch/cuda/float32"]
    assert groups[0][0].artifact_id == "a/torch/float32"


def test_exclude_matches_all_named_fields_and_lists_mean_any():
    variants = expand(config(exclude=[{"model": "a", "device": "cuda"}, {"precision": ["float16"], "model": ["b"]}]))
    assert [v.id for v in variants] == [
        "a/torch/cpu/float32", "a/torch/cpu/float16", "b/torch/cpu/float32", "b/torch/cuda/float32",
    ]


def test_include_adds_variants_without_duplicates():
    cfg = config(
        exclude=[{"device": "cuda"}],
        include=[
            {"model": "b", "backend": "torch", "device": "cuda", "precision": "bfloat16"},
            {"model": "a", "backend": "torch", "device": "cpu", "precision": "float32"},  # already there
        ],
    )
    ids = [v.id for v in expand(cfg)]
    assert ids[-1] == "b/torch/cuda/bfloat16"
    assert ids.count("a/torch/cpu/float32") == 1
    assert len(ids) == 5


def test_same_id_with_other_options_is_a_conflict():
    cfg = config(targets=[{"backend": "torch", "precision": "float32"},
                          {"backend": "torch", "precision": ["float32", "float16"], "threads": 1}])
    with pytest.raises(VariantConflict) as info:
        expand(cfg)
    assert (info.value.variant_id, info.value.first_index, info.value.second_index) == ("a/torch/cpu/float32", 0, 1)


def test_fixed_options_are_canonical_json_so_equal_options_share_an_artifact():
    variant = expand(config(targets=[{"backend": "onnxruntime", "precision": "float32", "opset": 17,
                                      "graph_optimization": "basic"}]))[0]
    assert variant.fixed == ('{"coreml_compute_units": null, "file": null, "graph_optimization": "basic", "intra_op_threads": null, '
                             '"opset": 17, "profile_runs": 10}')  # keys sorted, whatever order the target declares


def test_include_entries_are_numbered_after_the_targets():
    cfg = config(targets=[{"backend": "torch", "precision": "float32"}],
                 include=[{"model": "b", "backend": "torch", "precision": "float16"},
                          {"model": "a", "backend": "torch", "precision": "bfloat16"}])
    assert [(v.id, v.target_index) for v in expand(cfg)] == [
        ("a/torch/cpu/float32", 0), ("b/torch/cpu/float32", 0), ("b/torch/cpu/float16", 1), ("a/torch/cpu/bfloat16", 2)]


def test_exclude_can_name_the_backend():
    cfg = config(targets=[{"backend": "torch", "precision": "float32"}, {"backend": "onnxruntime"}],
                 exclude=[{"backend": "onnxruntime", "model": "b"}])
    assert [v.id for v in expand(cfg)] == ["a/torch/cpu/float32", "a/onnxruntime/float32/cpu", "b/torch/cpu/float32"]


def test_a_variant_reads_its_axes_and_a_plan_groups_by_model():
    plan = Plan(expand(config()))
    assert plan.variants[1].axis("precision") == "float16" and plan.variants[2].axis("device") == "cuda"
    assert {model: [v.id for v in variants] for model, variants in plan.by_model().items()} == {
        "a": ["a/torch/cpu/float32", "a/torch/cpu/float16", "a/torch/cuda/float32", "a/torch/cuda/float16"],
        "b": ["b/torch/cpu/float32", "b/torch/cpu/float16", "b/torch/cuda/float32", "b/torch/cuda/float16"]}


def test_a_conflict_says_which_variant():
    cfg = config(targets=[{"backend": "torch", "precision": "float32"},
                          {"backend": "torch", "precision": "float32", "threads": 1}])
    with pytest.raises(VariantConflict) as info:
        expand(cfg)
    assert str(info.value) == "variant a/torch/cpu/float32 comes from two targets with different options"


def test_include_entries_of_a_model_with_shape_alternatives_get_the_shape_axis():
    flexible = {"name": "a", "source": "pkg.mod:make", "inputs": [{"name": "x", "shape": [1, [8, 16]]}]}
    fixed = {"name": "b", "source": "pkg.mod:make", "inputs": [{"name": "x", "shape": [1, 4]}]}
    cfg = config(models=[flexible, fixed], targets=[{"backend": "torch", "precision": "float32"}],
                 include=[{"model": "a", "backend": "torch", "precision": "bfloat16"},
                          {"model": "b", "backend": "torch", "precision": "bfloat16"}])
    assert [v.id for v in expand(cfg)] == [
        "a/torch/cpu/float32/8", "a/torch/cpu/float32/16", "b/torch/cpu/float32",
        "a/torch/cpu/bfloat16/8", "a/torch/cpu/bfloat16/16", "b/torch/cpu/bfloat16"]
