"""Compressed programs: the emulated error is exactly what the decompressed weights explain.

For each compression, coremltools' own decompression (its MIL op classes' ``materialized_val_inference``
on the program it rebuilds from the package) gives the weights; loaded into the torch model, eager
PyTorch must agree with the emulation within 1e-5, while differing from the uncompressed model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mlbench.backends.coreml.emulate import emulate_package, load_program
from tests.emulate_helpers import eager, export, max_rel


class CompressModel(nn.Module):
    """Three weights over 2048 elements (coremltools compresses only those), of distinct shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(8, 16, 5, padding=2)  # 3200
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)  # 4608
        self.head = nn.Linear(32, 80)  # 2560

    def forward(self, image):
        x = torch.relu(self.conv1(image))
        x = torch.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def _model_and_input():
    torch.manual_seed(0)
    model = CompressModel().eval()
    return model, torch.randn(1, 8, 12, 12, generator=torch.Generator().manual_seed(1))


def decompressed_weights(package) -> list[np.ndarray]:
    """coremltools' decompression of every compressed weight in the package (not our kernels)."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    spec = ct.utils.load_spec(str(package))
    weights_dir = package / "Data" / "com.apple.CoreML" / "weights"
    program = milproto_load(spec, spec.specificationVersion, file_weights_dir=str(weights_dir))
    values = []
    for op in program.functions["main"].operations:
        if op.op_type.startswith("constexpr_") and not any(
            child.op_type.startswith("constexpr_") for out in op.outputs for child in out.child_ops
        ):
            values.append(np.asarray(op.materialized_val_inference(), dtype=np.float32))
    return values


def _load_into(model: nn.Module, weights: list[np.ndarray]) -> int:
    """Put each decompressed weight into the parameter of the same shape; returns how many."""
    params = {tuple(p.shape): p for name, p in model.named_parameters() if name.endswith("weight")}
    with torch.no_grad():
        for value in weights:
            params[value.shape].copy_(torch.from_numpy(value))
    return len(weights)


def _compress(package, dest, configs: dict):
    """Apply coremltools passes directly (joint compression is not an mlbench recipe):
    prune first, then the second pass with ``joint_compression=True``."""
    import coremltools as ct
    import coremltools.optimize.coreml as cto

    passes = {"prune": (cto.OpMagnitudePrunerConfig, cto.prune_weights),
              "palettize": (cto.OpPalettizerConfig, cto.palettize_weights),
              "quantize": (cto.OpLinearQuantizerConfig, cto.linear_quantize_weights)}
    mlmodel = ct.models.MLModel(str(package), skip_model_load=True)
    for i, (kind, config) in enumerate(configs.items()):
        config_class, apply = passes[kind]
        mlmodel = apply(mlmodel, cto.OptimizationConfig(global_config=config_class(**config)),
                        joint_compression=i > 0)
    out = dest / "compressed.mlpackage"
    mlmodel.save(str(out))
    return out


RECIPES = {
    # name: (optimization for mlbench's exporter, deployment target, constexpr ops expected)
    "palettize4_ios16": ({"kind": "palettize", "nbits": 4}, None, {"constexpr_lut_to_dense"}),
    "quantize_int8_ios16": ({"kind": "linear_quantize", "dtype": "int8"}, None, {"constexpr_affine_dequantize"}),
    "quantize_uint8_linear_ios16": ({"kind": "linear_quantize", "dtype": "uint8", "mode": "linear"}, None,
                                    {"constexpr_affine_dequantize"}),
    "prune_ios16": ({"kind": "prune", "target_sparsity": 0.5}, None, {"constexpr_sparse_to_dense"}),
    "palettize4_ios18": ({"kind": "palettize", "nbits": 4}, "iOS18", {"constexpr_lut_to_dense"}),
    "palettize3_grouped_ios18": ({"kind": "palettize", "nbits": 3, "granularity": "per_grouped_channel",
                                  "group_size": 4}, "iOS18", {"constexpr_lut_to_dense"}),
    "quantize_int8_ios18": ({"kind": "linear_quantize", "dtype": "int8"}, "iOS18",
                            {"constexpr_blockwise_shift_scale"}),
    "prune_ios18": ({"kind": "prune", "target_sparsity": 0.5}, "iOS18", {"constexpr_sparse_to_dense"}),
}


_SLOW_RECIPES = {"quantize_uint8_linear_ios16", "palettize4_ios18"}  # same kernels as their neighbours


@pytest.mark.parametrize("recipe", [pytest.param(r, marks=pytest.mark.slow) if r in _SLOW_RECIPES else r
                                    for r in sorted(RECIPES)])
def test_compressed_program_matches_its_decompressed_weights(recipe, tmp_path):
    optimization, target, expected_ops = RECIPES[recipe]
    model, x = _model_and_input()
    original = eager(model, [x])
    package = export(model, [x], ["image"], tmp_path, optimization=optimization, deployment_target=target)
    assert expected_ops <= set(load_program(package).op_types())
    _assert_explained(model, x, original, package)


JOINT = {
    "prune_then_palettize_ios18": (
        {"prune": {"target_sparsity": 0.5},
         "palettize": {"nbits": 4, "mode": "kmeans"}},
        {"constexpr_lut_to_sparse", "constexpr_sparse_to_dense"}),
    "prune_then_quantize_ios18": (
        {"prune": {"target_sparsity": 0.5}, "quantize": {"dtype": "int8"}},
        {"constexpr_sparse_blockwise_shift_scale", "constexpr_sparse_to_dense"}),
}


@pytest.mark.parametrize("recipe", sorted(JOINT))
def test_joint_compression_matches_its_decompressed_weights(recipe, tmp_path):
    configs, expected_ops = JOINT[recipe]
    model, x = _model_and_input()
    original = eager(model, [x])
    package = export(model, [x], ["image"], tmp_path, deployment_target="iOS18")
    compressed = _compress(package, tmp_path, configs)
    assert expected_ops <= set(load_program(compressed).op_types())
    _assert_explained(model, x, original, compressed)


def _assert_explained(model, x, original, package):
    emulated = list(emulate_package(package, {"image": x.numpy()}).values())
    assert max_rel(original, emulated) > 1e-4  # compression changed the outputs...
    assert _load_into(model, decompressed_weights(package)) == 3
    explained = eager(model, [x])
    assert max_rel(explained, emulated) <= 1e-5  # ...by exactly what the decompressed weights explain
