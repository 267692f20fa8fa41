"""Loading packages (spec walk, weight blobs), op-type normalisation, unsupported ops, control flow."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from mlbench.backends.coreml.emulate import (
    UnsupportedOps,
    emulate_package,
    load_program,
    normalise_op_type,
    registry,
    supported_op_types,
    unsupported_ops,
)
from mlbench.backends.coreml.emulate.blobs import unpack_bits
from tests.emulate_helpers import MODELS, eager, export, max_rel


def _spec_path(package):
    return package / "Data" / "com.apple.CoreML" / "model.mlmodel"


@pytest.fixture(scope="module")
def cnn_package(tmp_path_factory):
    make, make_inputs, names = MODELS["cnn"]
    model, inputs = make(), make_inputs()
    package = export(model, inputs, names, tmp_path_factory.mktemp("cnn"))
    return package, eager(model, inputs), {"image": inputs[0].numpy()}


def _coremltools_consts(package) -> dict[str, np.ndarray]:
    """const values as coremltools' own milproto loader (and its native blob reader) reads them."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    spec = ct.utils.load_spec(str(package))
    program = milproto_load(spec, spec.specificationVersion,
                            file_weights_dir=str(package / "Data" / "com.apple.CoreML" / "weights"))
    out = {}
    for op in program.functions["main"].operations:
        if op.op_type == "const" and isinstance(op.outputs[0].val, np.ndarray):
            out[op.outputs[0].name] = op.outputs[0].val
    return out


@pytest.mark.parametrize("optimization", [None, {"kind": "palettize", "nbits": 4},
                                          {"kind": "linear_quantize", "dtype": "int8"}])
def test_weights_read_as_coremltools_reads_them(tmp_path, optimization):
    """Every const (float32, float16, int8, packed uint4 blobs and immediates) equals coremltools' reading."""
    make, make_inputs, names = MODELS["cnn"]
    package = export(make(), make_inputs(), names, tmp_path, precision="float16", optimization=optimization,
                     deployment_target="iOS18" if optimization else None)
    theirs = _coremltools_consts(package)
    ours = {}

    def walk(block):
        for op in block.ops:
            if op.type == "const":
                ours[op.outputs[0][0]] = op.attributes["val"]
            for key, value in op.attributes.items():  # iOS16 constexpr operands are attributes
                ours[f"{op.outputs[0][0]}.{key}"] = value

    walk(load_program(package).main)
    assert len(theirs) > 5
    for name, value in theirs.items():
        assert ours[name].dtype == value.dtype or value.dtype == np.uint8, name
        np.testing.assert_array_equal(np.asarray(ours[name]).astype(value.dtype), value, err_msg=name)


def test_unpack_bits_lsb_first():
    # 2-bit values 0,3,2,1 | 3 -> bytes 0b01_10_11_00, 0b000000_11 (the MIL docs' example)
    packed = np.array([0b01101100, 0b00000011], dtype=np.uint8)
    assert unpack_bits(packed, 2, 5).tolist() == [0, 3, 2, 1, 3]
    assert unpack_bits(np.array([0xF8], dtype=np.uint8), 4, 2, signed=True).tolist() == [-8, -1]


def test_op_types_lose_their_opset_prefix(cnn_package, tmp_path):
    from coremltools.proto import Model_pb2

    assert normalise_op_type("ios17.conv") == "conv" and normalise_op_type("relu") == "relu"
    package, reference, feeds = cnn_package
    renamed = tmp_path / "renamed.mlpackage"
    shutil.copytree(package, renamed)
    spec = Model_pb2.Model()
    spec.ParseFromString(_spec_path(renamed).read_bytes())
    block = spec.mlProgram.functions["main"].block_specializations[spec.mlProgram.functions["main"].opset]
    for op in block.operations:
        if op.type in ("conv", "relu"):
            op.type = f"ios17.{op.type}"
    _spec_path(renamed).write_bytes(spec.SerializeToString())
    program = load_program(renamed)
    assert "ios17.conv" in {op.raw_type for op in program.main.ops}
    assert unsupported_ops(renamed) == []
    assert max_rel(reference, list(emulate_package(renamed, feeds).values())) <= 1e-5


def test_missing_kernel_is_named_before_anything_runs(cnn_package, monkeypatch):
    package, _reference, feeds = cnn_package
    calls = []
    monkeypatch.delitem(registry.KERNELS, "relu")
    conv = registry.KERNELS["conv"]
    monkeypatch.setitem(registry.KERNELS, "conv", registry.Kernel("conv", lambda **kw: calls.append(1), frozenset()))
    assert unsupported_ops(package) == ["relu"]
    with pytest.raises(UnsupportedOps, match="relu") as info:
        emulate_package(package, feeds)
    assert info.value.ops == ["relu"] and calls == []
    assert conv is not None


def _mil_package(tmp_path, build, input_shape=(2, 3)):
    """A real coremltools ML program written with the MIL builder."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    program = mb.program(input_specs=[mb.TensorSpec(shape=input_shape)],
                         opset_version=ct.target.iOS17)(build)
    mlmodel = ct.convert(program, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                         minimum_deployment_target=ct.target.iOS17, skip_model_load=True)
    path = tmp_path / "mil.mlpackage"
    mlmodel.save(str(path))
    return path


def test_an_op_without_kernel_in_a_real_package(tmp_path, monkeypatch):
    from coremltools.converters.mil import Builder as mb

    from mlbench.backends.coreml.emulate.registry import KERNELS

    monkeypatch.delitem(KERNELS, "softsign")  # every op coremltools' torch frontend emits has a kernel now

    def build(x):
        return mb.add(x=x, y=mb.softsign(x=x))

    package = _mil_package(tmp_path, build)
    assert unsupported_ops(package) == ["softsign"]
    with pytest.raises(UnsupportedOps, match="softsign"):
        emulate_package(package, {load_program(package).input_names[0]: np.zeros((2, 3), np.float32)})


def test_cond_and_while_loop(tmp_path):
    from coremltools.converters.mil import Builder as mb

    def build(x):
        total = mb.reduce_sum(x=x)
        y = mb.cond(pred=mb.greater(x=total, y=0.0),
                    _true_fn=lambda: mb.mul(x=x, y=2.0), _false_fn=lambda: mb.sub(x=x, y=1.0))

        def body(i, acc):
            return mb.add(x=i, y=1), mb.add(x=mb.mul(x=acc, y=1.5), y=mb.cast(x=i, dtype="fp32"))

        _i, z = mb.while_loop(_cond=lambda i, acc: mb.less(x=i, y=4), _body=body,
                              loop_vars=(np.int32(0), y))
        return z

    package = _mil_package(tmp_path, build)
    types = set(load_program(package).op_types())
    assert {"cond", "while_loop"} <= types
    name = load_program(package).input_names[0]

    def expected(x):
        acc = x * 2.0 if x.sum() > 0 else x - 1.0
        for i in range(4):
            acc = acc * 1.5 + i
        return acc

    for x in (np.arange(6, dtype=np.float32).reshape(2, 3), -np.ones((2, 3), np.float32)):
        out = next(iter(emulate_package(package, {name: x}).values()))
        np.testing.assert_allclose(out, expected(x), rtol=1e-6)


def test_attention_op_of_ios18(tmp_path):
    """At iOS18 coremltools keeps scaled_dot_product_attention as one op."""
    make, make_inputs, names = MODELS["transformer"]
    model, inputs = make(), make_inputs()
    package = export(model, inputs, names, tmp_path, deployment_target="iOS18")
    assert "scaled_dot_product_attention" in load_program(package).op_types()
    feeds = {"tokens": inputs[0].numpy()}
    assert max_rel(eager(model, inputs), list(emulate_package(package, feeds).values())) <= 1e-5


def test_registry_covers_every_op_the_sweep_needs():
    needed = {"add", "avg_pool", "batch_norm", "cast", "clip", "concat", "conv", "expand_dims", "gelu",
              "layer_norm", "linear", "matmul", "max_pool", "mul", "reduce_mean", "relu", "reshape", "sigmoid",
              "sigmoid_hard", "silu", "slice_by_index", "softmax", "split", "squeeze", "thresholded_relu",
              "transpose", "upsample_bilinear", "lstm", "gather", "einsum", "scaled_dot_product_attention",
              "constexpr_lut_to_dense", "constexpr_affine_dequantize", "constexpr_sparse_to_dense",
              "constexpr_blockwise_shift_scale", "constexpr_lut_to_sparse",
              "constexpr_sparse_blockwise_shift_scale", "constexpr_cast", "cond", "while_loop"}
    assert needed <= supported_op_types()
    assert torch is not None
