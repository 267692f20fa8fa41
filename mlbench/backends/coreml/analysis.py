"""Static analysis of a saved Core ML model, without a Core ML runtime.

``analyse_package(path)`` reads an ``.mlpackage`` directory or an ``.mlmodel`` file and
describes what it holds: the model type, the compute precision, the operations of the
program (in program order, nested blocks included), parameters, weight bytes as stored
(compressed weights count at their compressed size), multiply-accumulates and FLOPs.

It parses the protobuf spec with coremltools' generated classes only (no ``MLModel``,
no compilation, no prediction), so it runs on Linux.

Definitions used throughout:

* **Compute op**: every MIL operation except ``const`` and the ``constexpr_*`` ops, which
  only materialise weights (data, not computation).  ``constexpr_*`` ops are counted
  apart in ``weight_ops``.
* **Weight**: a ``const`` of a numeric dtype other than int32/int64/uint32 and of rank
  >= 1 that feeds a compute op (conv/linear weights, biases, norm scales, embedding
  tables...), or the output of a ``constexpr_*`` op.  Scalars and int32 index/shape
  constants are parameters of the op, not weights.
* **Params**: elements of the dense weights the compute ops see (a palettized weight of
  shape 16x8x3x3 is 1152 params, whatever its storage).
* **Weight bytes as stored**: bytes of the data that is stored for the weights: for a
  plain const its dtype x elements; for ``constexpr_lut_to_dense`` the packed indices plus
  the look-up table; for ``constexpr_affine_dequantize`` / ``constexpr_blockwise_shift_scale``
  the quantized data plus scales and zero points/offsets; for ``constexpr_sparse_to_dense``
  the non-zero data plus the bit mask.  Blob-backed values use the size recorded in the
  weight file's blob header; inline values use their declared type.
* **MACs**: multiply-accumulates of conv, conv_transpose, linear, matmul and einsum only;
  other ops have ``macs=None`` (not counted).  **FLOPs = 2 x MACs** (one multiply and one
  add per MAC); bias adds, activations, pooling and normalisation are not counted.
* **Precision**: from the floating-point output dtypes of the compute ops, leaving out
  the ``cast`` ops at the program boundary that coremltools inserts to turn float32
  inputs into float16 and float16 outputs back into float32.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlbench.errors import UserError

__all__ = [
    "LayerInfo",
    "ProgramAnalysis",
    "TensorDescription",
    "Totals",
    "analyse_package",
    "MAC_OPS",
]

Precision = Literal["FLOAT32", "FLOAT16", "MIXED", "UNKNOWN"]

#: Ops whose MACs are counted.
MAC_OPS = frozenset({"conv", "conv_transpose", "linear", "matmul", "einsum"})
#: Ops that do many MACs but whose MACs this analysis does not count (a note says so).
_UNCOUNTED_HEAVY_OPS = frozenset({"lstm", "gru", "rnn", "scaled_dot_product_attention"})

# MIL DataType enum (coremltools/proto/MIL_pb2.py) -> (short name, bits per element).
_MIL_DTYPES: dict[int, tuple[str, int]] = {
    1: ("bool", 8),
    2: ("string", 0),
    10: ("fp16", 16),
    11: ("fp32", 32),
    12: ("fp64", 64),
    13: ("bf16", 16),
    21: ("int8", 8),
    22: ("int16", 16),
    23: ("int32", 32),
    24: ("int64", 64),
    25: ("int4", 4),
    31: ("uint8", 8),
    32: ("uint16", 16),
    33: ("uint32", 32),
    34: ("uint64", 64),
    35: ("uint4", 4),
    36: ("uint2", 2),
    37: ("uint1", 1),
    38: ("uint6", 6),
    39: ("uint3", 3),
    40: ("fp8e4m3fn", 8),
    41: ("fp8e5m2", 8),
}
_FLOAT_DTYPES = frozenset({"fp16", "fp32", "fp64", "bf16", "fp8e4m3fn", "fp8e5m2"})
# Numeric dtypes that are shapes, indices or axes rather than weights when held in a const.
_INDEX_DTYPES = frozenset({"int32", "int64", "uint32", "uint64", "bool", "string"})
# Inputs/attributes of constexpr ops that are metadata, not stored weight data.
_CONSTEXPR_METADATA = frozenset({"name", "shape", "axis", "output_dtype", "vector_axis"})

# ArrayFeatureType.ArrayDataType (FeatureTypes.proto) -> short name.
_ARRAY_DTYPES = {65568: "fp32", 65552: "fp16", 65600: "fp64", 131104: "int32", 131080: "int8"}

# Specification version -> first OS release that reads it (coremltools/__init__.py).
_SPEC_VERSION_OS = {
    1: "iOS11",
    2: "iOS11.2",
    3: "iOS12",
    4: "iOS13",
    5: "iOS14",
    6: "iOS15",
    7: "iOS16",
    8: "iOS17",
    9: "iOS18",
    10: "iOS26",
}
# MIL opset name -> OS release (coremltools/__init__.py, _OPSET).
_OPSET_OS = {
    "CoreML3": "iOS13",
    "CoreML4": "iOS14",
    "CoreML5": "iOS15",
    "CoreML6": "iOS16",
    "CoreML7": "iOS17",
    "CoreML8": "iOS18",
    "CoreML9": "iOS26",
}
_NEURAL_NETWORK_TYPES = frozenset({"neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor"})
_BLOB_SENTINEL = 0xDEADBEEF


# --------------------------------------------------------------------------- models


class TensorDescription(BaseModel):
    """A model input or output as the spec describes it."""

    name: str
    kind: str = Field(description="tensor, image, int64, double, string, dictionary, sequence, state")
    shape: list[int | None] | None = Field(
        default=None, description="default shape; None for a flexible dimension; image: [height, width]"
    )
    dtype: str | None = Field(default=None, description="fp32, fp16, int32...; colour space for images")
    flexible: bool = Field(default=False, description="the shape has ranges or enumerated alternatives")


class LayerInfo(BaseModel):
    """One compute operation (an ML program op, or a neural-network layer)."""

    name: str
    op_type: str
    output_dtype: str | None = None
    output_shape: list[int | None] | None = Field(default=None, description="None for an unknown dimension")
    macs: int | None = Field(default=None, description="multiply-accumulates; None: not counted or unknown")
    params: int | None = Field(default=0, description="elements of the weights this op is first to use")
    weight_bytes: int | None = Field(default=0, description="bytes of those weights as stored")
    weight_storage: str | None = Field(
        default=None, description="how the weights are stored, e.g. 'fp16' or 'lut(uint4 indices, fp16 lut)'"
    )
    depth: int = Field(default=0, description="nesting depth: 0 in the function body, 1 inside a cond/loop block")
    attributes: dict[str, Any] = Field(
        default_factory=dict,
        description="parameters that decide where an op can run: dilations, kernel_sizes, strides, scale factors, "
        "and dynamic_shape when a reshape's shape is computed at run time",
    )


class Totals(BaseModel):
    """Sums over the compute ops."""

    compute_ops: int
    const_ops: int
    weight_ops: int = Field(description="constexpr_* ops (compressed weights materialised at load)")
    params: int | None = Field(description="None where not analysed")
    weight_bytes: int | None = Field(description="bytes of weights as stored (compressed size); None where not analysed")
    macs: int | None = Field(description="MACs of conv/conv_transpose/linear/matmul/einsum with known shapes")
    flops: int | None = Field(description="2 x macs")
    macs_complete: bool = Field(description="False when some MAC ops have unknown shapes (macs is then a lower bound)")


class ProgramAnalysis(BaseModel):
    """What a saved Core ML model holds, read statically."""

    model_config = ConfigDict(protected_namespaces=())

    path: str
    model_type: str = Field(description="mlProgram, neuralNetwork, neuralNetworkClassifier, pipeline...")
    spec_version: int
    min_os: str | None = Field(default=None, description="first iOS release that reads this spec version")
    opset: str | None = Field(default=None, description="MIL opset of the analysed function, e.g. CoreML7")
    opset_os: str | None = Field(default=None, description="OS release of that opset, e.g. iOS17")
    function: str | None = Field(default=None, description="the analysed ML program function")
    functions: list[str] = Field(default_factory=list)
    precision: Precision
    dtype_counts: dict[str, int] = Field(
        default_factory=dict, description="compute ops per floating-point output dtype (boundary casts left out)"
    )
    op_counts: dict[str, int] = Field(description="compute op type -> count")
    const_count: int
    weight_ops: dict[str, int] = Field(default_factory=dict, description="constexpr_* op type -> count")
    layers: list[LayerInfo]
    totals: Totals
    package_size_bytes: int
    inputs: list[TensorDescription]
    outputs: list[TensorDescription]
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- loading


def _load_spec(path: Path) -> tuple[Any, Path, Path | None]:
    """Parse the spec. Returns (spec, spec file, package root or None for an .mlmodel)."""
    if not path.exists():
        raise UserError("no such file or directory", file=path)
    if path.is_dir():
        manifest_path = path / "Manifest.json"
        if not manifest_path.is_file():
            raise UserError("not a Core ML model: no Manifest.json", file=path)
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            root_id = manifest["rootModelIdentifier"]
            entry = manifest["itemInfoEntries"][root_id]
            spec_file = path / "Data" / entry["path"]
        except (ValueError, UnicodeDecodeError) as exc:
            raise UserError(f"corrupt Core ML package: Manifest.json is not valid JSON ({exc})", file=path) from None
        except (KeyError, TypeError):
            raise UserError(
                "corrupt Core ML package: Manifest.json does not name the root model", file=path
            ) from None
        if not spec_file.is_file():
            rel = spec_file.relative_to(path) if spec_file.is_relative_to(path) else spec_file
            raise UserError(f"corrupt Core ML package: the model spec {rel} is missing", file=path)
        package_root: Path | None = path
    else:
        if path.suffix.lower() != ".mlmodel":
            raise UserError(
                "not a Core ML model: expected an .mlpackage directory or an .mlmodel file", file=path
            )
        spec_file = path
        package_root = None

    from mlbench.backends.coreml.export import import_coremltools

    import_coremltools()  # quietly: coremltools prints import-time notices on Linux
    from coremltools.proto import Model_pb2  # deferred: importing coremltools is slow

    spec = Model_pb2.Model()
    try:
        data = spec_file.read_bytes()
        spec.ParseFromString(data)
    except OSError as exc:
        raise UserError(f"cannot read the model spec: {exc.strerror or exc}", file=path) from None
    except Exception:  # google.protobuf.message.DecodeError; its text varies with the protobuf backend
        raise UserError("cannot parse the model spec: the protobuf is truncated or corrupt", file=path) from None
    if not data:
        raise UserError("not a Core ML model: the model spec is empty", file=path)
    if spec.WhichOneof("Type") is None:
        raise UserError("not a Core ML model: the spec holds no model", file=path)
    return spec, spec_file, package_root


def _disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


# --------------------------------------------------------------------------- inputs/outputs


def _describe_feature(feature: Any) -> TensorDescription:
    ftype = feature.type
    kind = ftype.WhichOneof("Type")
    if kind == "multiArrayType":
        arr = ftype.multiArrayType
        shape: list[int | None] = [int(d) for d in arr.shape]
        flexible = False
        if arr.WhichOneof("ShapeFlexibility") == "shapeRange":
            flexible = True
            ranges = arr.shapeRange.sizeRanges
            if not shape:
                shape = [int(r.lowerBound) for r in ranges]
            shape = [
                s if (i < len(ranges) and ranges[i].lowerBound == ranges[i].upperBound) else None
                for i, s in enumerate(shape)
            ]
        elif arr.WhichOneof("ShapeFlexibility") == "enumeratedShapes":
            flexible = True
            if not shape and arr.enumeratedShapes.shapes:
                shape = [int(d) for d in arr.enumeratedShapes.shapes[0].shape]
        return TensorDescription(
            name=feature.name,
            kind="tensor",
            shape=shape or None,
            dtype=_ARRAY_DTYPES.get(arr.dataType),
            flexible=flexible,
        )
    if kind == "imageType":
        img = ftype.imageType
        from coremltools.proto import FeatureTypes_pb2

        colour = FeatureTypes_pb2.ImageFeatureType.ColorSpace.Name(img.colorSpace)
        return TensorDescription(
            name=feature.name,
            kind="image",
            shape=[int(img.height), int(img.width)],
            dtype=colour,
            flexible=img.WhichOneof("SizeFlexibility") is not None,
        )
    if kind == "stateType":
        arr = ftype.stateType.arrayType
        return TensorDescription(
            name=feature.name, kind="state", shape=[int(d) for d in arr.shape] or None,
            dtype=_ARRAY_DTYPES.get(arr.dataType),
        )
    names = {"int64Type": "int64", "doubleType": "double", "stringType": "string",
             "dictionaryType": "dictionary", "sequenceType": "sequence"}
    return TensorDescription(name=feature.name, kind=names.get(kind or "", kind or "unknown"))


# --------------------------------------------------------------------------- ML program helpers


def _short_type(op_type: str) -> str:
    """Op type without an opset prefix ("ios17.conv" -> "conv")."""
    return op_type.rsplit(".", 1)[-1]


def _is_data_op(op_type: str) -> bool:
    t = _short_type(op_type)
    return t == "const" or t.startswith("constexpr_")


def _tensor_info(value_type: Any) -> tuple[str | None, list[int | None] | None]:
    """(dtype name, shape) of a MIL ValueType; shape None when not a tensor or rank unknown."""
    which = value_type.WhichOneof("type")
    if which == "stateType":
        return _tensor_info(value_type.stateType.wrappedType)
    if which != "tensorType":
        return None, None
    tt = value_type.tensorType
    dtype = _MIL_DTYPES.get(tt.dataType, (f"dtype{tt.dataType}", 0))[0]
    if tt.rank < 0:
        return dtype, None
    dims: list[int | None] = []
    for d in tt.dimensions:
        dims.append(int(d.constant.size) if d.WhichOneof("dimension") == "constant" else None)
    if len(dims) != tt.rank:  # rank given without dimensions: unknown
        return dtype, None
    return dtype, dims


def _numel(shape: list[int | None] | None) -> int | None:
    if shape is None or any(d is None for d in shape):
        return None
    return math.prod(shape)  # type: ignore[arg-type]


def _declared_bytes(value_type: Any) -> int:
    if value_type.WhichOneof("type") != "tensorType":
        return 0
    bits = _MIL_DTYPES.get(value_type.tensorType.dataType, ("", 0))[1]
    n = _numel(_tensor_info(value_type)[1])
    if n is None:
        return 0
    return (n * bits + 7) // 8


class _BlobReader:
    """Reads blob headers of the weight files (MIL blob storage) to get stored sizes."""

    def __init__(self, model_dir: Path | None, origin: Path) -> None:
        self.model_dir = model_dir
        self.origin = origin
        self.missing: set[str] = set()
        self._handles: dict[str, Any] = {}

    def size(self, file_name: str, offset: int, declared: int) -> int:
        if self.model_dir is None:
            self.missing.add(file_name)
            return declared
        rel = file_name.replace("@model_path/", "", 1)
        p = self.model_dir / rel
        key = str(p)
        if key not in self._handles:
            if not p.is_file():
                raise UserError(f"corrupt Core ML package: the weight file {rel} is missing", file=self.origin)
            self._handles[key] = (p.open("rb"), p.stat().st_size)
        fh, fsize = self._handles[key]
        if offset + 24 > fsize:
            raise UserError(
                f"corrupt Core ML package: {rel} is truncated (a weight at offset {offset} is past its end)",
                file=self.origin,
            )
        fh.seek(offset)
        sentinel, _dtype, size_in_bytes, data_offset = struct.unpack("<IIQQ", fh.read(24))
        if sentinel != _BLOB_SENTINEL:
            raise UserError(f"corrupt Core ML package: {rel} has no weight blob at offset {offset}", file=self.origin)
        if data_offset + size_in_bytes > fsize:
            raise UserError(
                f"corrupt Core ML package: {rel} is truncated (a weight at offset {offset} is past its end)",
                file=self.origin,
            )
        return int(size_in_bytes)

    def close(self) -> None:
        for fh, _ in self._handles.values():
            fh.close()


def _value_bytes(value: Any, blobs: _BlobReader) -> int:
    declared = _declared_bytes(value.type)
    if value.WhichOneof("value") == "blobFileValue":
        return blobs.size(value.blobFileValue.fileName, int(value.blobFileValue.offset), declared)
    return declared


def _immediate(value: Any) -> list[Any] | None:
    """Python values of an immediate tensor value, or None."""
    if value.WhichOneof("value") != "immediateValue":
        return None
    iv = value.immediateValue
    if iv.WhichOneof("value") != "tensor":
        return None
    t = iv.tensor
    which = t.WhichOneof("value")
    if which in ("floats", "ints", "bools", "strings", "longInts", "doubles"):
        return list(getattr(t, which).values)
    return None


class _Program:
    """Index of one ML program function: ops in order, producers, var types."""

    def __init__(self, function: Any, opset: str) -> None:
        self.var_types: dict[str, Any] = {}
        self.producer: dict[str, Any] = {}
        self.ops: list[tuple[Any, int]] = []  # (op, depth)
        self.input_names = {nv.name for nv in function.inputs}
        for nv in function.inputs:
            self.var_types[nv.name] = nv.type
        block = function.block_specializations[opset]
        self.output_names = set(block.outputs)
        self._walk(block, 0)

    def _walk(self, block: Any, depth: int) -> None:
        for nv in block.inputs:
            self.var_types[nv.name] = nv.type
        for op in block.operations:
            for out in op.outputs:
                self.var_types[out.name] = out.type
                self.producer[out.name] = op
            self.ops.append((op, depth))
            for sub in op.blocks:
                self._walk(sub, depth + 1)

    def arg_type(self, arg: Any) -> Any | None:
        if arg.WhichOneof("binding") == "name":
            return self.var_types.get(arg.name)
        return arg.value.type

    def input_shape(self, op: Any, key: str, index: int = 0) -> list[int | None] | None:
        if key not in op.inputs or len(op.inputs[key].arguments) <= index:
            return None
        t = self.arg_type(op.inputs[key].arguments[index])
        return _tensor_info(t)[1] if t is not None else None

    def const_value(self, op: Any, key: str) -> list[Any] | None:
        if key not in op.inputs or not op.inputs[key].arguments:
            return None
        arg = op.inputs[key].arguments[0]
        if arg.WhichOneof("binding") == "value":
            return _immediate(arg.value)
        prod = self.producer.get(arg.name)
        if prod is None or _short_type(prod.type) != "const" or "val" not in prod.attributes:
            return None
        return _immediate(prod.attributes["val"])


def _op_name(op: Any) -> str:
    if "name" in op.attributes:
        vals = _immediate(op.attributes["name"])
        if vals:
            return str(vals[0])
    return op.outputs[0].name if op.outputs else _short_type(op.type)


def _macs(op_type: str, op: Any, prog: _Program, out_shape: list[int | None] | None) -> int | None:
    out_n = _numel(out_shape)
    if op_type == "conv":
        w = prog.input_shape(op, "weight")
        if out_n is None or w is None or len(w) < 2 or _numel(w[1:]) is None:
            return None
        return out_n * _numel(w[1:])  # type: ignore[operator]
    if op_type == "conv_transpose":
        x = prog.input_shape(op, "x")
        w = prog.input_shape(op, "weight")
        if x is None or w is None or len(w) < 2 or _numel(x) is None or _numel(w[1:]) is None:
            return None
        return _numel(x) * _numel(w[1:])  # type: ignore[operator]
    if op_type == "linear":
        w = prog.input_shape(op, "weight")
        if out_n is None or not w or w[-1] is None:
            return None
        return out_n * w[-1]
    if op_type == "matmul":
        x = prog.input_shape(op, "x")
        if out_n is None or not x:
            return None
        tx = prog.const_value(op, "transpose_x")
        k = x[-2] if (tx and tx[0] and len(x) >= 2) else x[-1]
        return None if k is None else out_n * k
    if op_type == "einsum":
        eq = prog.const_value(op, "equation")
        if not eq or "values" not in op.inputs:
            return None
        equation = str(eq[0]).replace(" ", "")
        if "..." in equation or "->" not in equation:
            return None
        lhs = equation.split("->")[0].split(",")
        args = op.inputs["values"].arguments
        if len(lhs) != len(args):
            return None
        sizes: dict[str, int] = {}
        for letters, arg in zip(lhs, args):
            t = prog.arg_type(arg)
            shape = _tensor_info(t)[1] if t is not None else None
            if shape is None or len(shape) != len(letters):
                return None
            for letter, dim in zip(letters, shape):
                if dim is None:
                    return None
                sizes[letter] = max(sizes.get(letter, 1), dim)
        return math.prod(sizes.values())
    return None


class _WeightAccounting:
    """Attributes stored weight data to the first compute op that uses it."""

    def __init__(self, prog: _Program, blobs: _BlobReader) -> None:
        self.prog = prog
        self.blobs = blobs
        self.claimed: set[str] = set()

    def for_op(self, op: Any) -> tuple[int, int, str | None]:
        """(params, stored bytes, storage description) of the weights op uses first."""
        params = 0
        stored = 0
        storage: list[str] = []
        for _key, argument in sorted(op.inputs.items()):
            for arg in argument.arguments:
                if arg.WhichOneof("binding") != "name":
                    continue
                prod = self.prog.producer.get(arg.name)
                if prod is None or not _is_data_op(prod.type):
                    continue
                if _short_type(prod.type) == "const":
                    if not self._is_weight_const(prod):
                        continue
                    dtype, shape = _tensor_info(prod.outputs[0].type)
                    if arg.name in self.claimed:
                        continue
                    self.claimed.add(arg.name)
                    params += _numel(shape) or 0
                    stored += _value_bytes(prod.attributes["val"], self.blobs)
                    storage.append(str(dtype))
                else:
                    if arg.name in self.claimed:
                        continue
                    self.claimed.add(arg.name)
                    _dtype, shape = _tensor_info(self.prog.var_types[arg.name])
                    params += _numel(shape) or 0
                    b, desc = self._constexpr_storage(prod)
                    stored += b
                    storage.append(desc)
        desc = ", ".join(dict.fromkeys(storage)) if storage else None
        return params, stored, desc

    @staticmethod
    def _is_weight_const(op: Any) -> bool:
        if "val" not in op.attributes or not op.outputs:
            return False
        dtype, shape = _tensor_info(op.outputs[0].type)
        return dtype is not None and dtype not in _INDEX_DTYPES and shape is not None and len(shape) >= 1

    def _constexpr_storage(self, op: Any, seen: set[int] | None = None) -> tuple[int, str]:
        """Stored bytes of a constexpr op's data (attributes, inline and const inputs, chained constexprs)."""
        seen = seen if seen is not None else set()
        if id(op) in seen:
            return 0, ""
        seen.add(id(op))
        total = 0
        parts: list[str] = []
        for key, value in sorted(op.attributes.items()):  # iOS16 constexpr ops keep their data in attributes
            if key in _CONSTEXPR_METADATA:
                continue
            total += _value_bytes(value, self.blobs)
            parts.append(f"{_tensor_info(value.type)[0]} {key}")
        for key, argument in sorted(op.inputs.items()):  # iOS18 constexpr ops take inputs
            if key in _CONSTEXPR_METADATA:
                continue
            for arg in argument.arguments:
                if arg.WhichOneof("binding") == "value":
                    total += _value_bytes(arg.value, self.blobs)
                    parts.append(f"{_tensor_info(arg.value.type)[0]} {key}")
                    continue
                prod = self.prog.producer.get(arg.name)
                if prod is None or arg.name in self.claimed:
                    continue
                self.claimed.add(arg.name)
                if _short_type(prod.type) == "const" and "val" in prod.attributes:
                    total += _value_bytes(prod.attributes["val"], self.blobs)
                    parts.append(f"{_tensor_info(prod.outputs[0].type)[0]} {key}")
                elif _is_data_op(prod.type):
                    b, d = self._constexpr_storage(prod, seen)
                    total += b
                    parts.append(f"{key}={d}")
        kind = _short_type(op.type).removeprefix("constexpr_")
        return total, f"{kind}({', '.join(parts)})"


def _analyse_program(spec: Any, blobs: _BlobReader, notes: list[str]) -> dict[str, Any]:
    program = spec.mlProgram
    functions = list(program.functions.keys())
    if not functions:
        raise UserError("corrupt Core ML model: the ML program has no functions", file=blobs.origin)
    fname = spec.description.defaultFunctionName or ("main" if "main" in program.functions else functions[0])
    if fname not in program.functions:
        fname = functions[0]
    function = program.functions[fname]
    opset = function.opset
    if opset not in function.block_specializations:
        if not function.block_specializations:
            raise UserError(f"corrupt Core ML model: function {fname} has no body", file=blobs.origin)
        opset = next(iter(function.block_specializations.keys()))
    others = [f for f in functions if f != fname]
    if others:
        notes.append(
            f"the package has {len(functions)} functions; only '{fname}' is analysed "
            f"(not: {', '.join(others)})"
        )

    prog = _Program(function, opset)
    weights = _WeightAccounting(prog, blobs)

    op_counts: Counter[str] = Counter()
    weight_ops: Counter[str] = Counter()
    const_count = 0
    dtype_counts: Counter[str] = Counter()
    layers: list[LayerInfo] = []
    unknown_mac_ops: Counter[str] = Counter()
    heavy_uncounted: Counter[str] = Counter()

    for op, depth in prog.ops:
        op_type = _short_type(op.type)
        if op_type == "const":
            const_count += 1
            continue
        if op_type.startswith("constexpr_"):
            weight_ops[op_type] += 1
            continue
        op_counts[op_type] += 1
        out_dtype, out_shape = _tensor_info(op.outputs[0].type) if op.outputs else (None, None)
        macs = _macs(op_type, op, prog, out_shape) if op_type in MAC_OPS else None
        if op_type in MAC_OPS and macs is None:
            unknown_mac_ops[op_type] += 1
        if op_type in _UNCOUNTED_HEAVY_OPS:
            heavy_uncounted[op_type] += 1
        params, stored, storage = weights.for_op(op)
        layers.append(
            LayerInfo(
                name=_op_name(op),
                op_type=op_type,
                output_dtype=out_dtype,
                output_shape=out_shape,
                macs=macs,
                params=params,
                weight_bytes=stored,
                weight_storage=storage,
                depth=depth,
                attributes=_placement_attributes(op_type, op, prog),
            )
        )
        if op_type == "cast" and _is_boundary_cast(op, prog):
            continue
        for out in op.outputs:
            dt = _tensor_info(out.type)[0]
            if dt in _FLOAT_DTYPES:
                dtype_counts[dt] += 1
                break

    floats = set(dtype_counts)
    if not floats:
        precision: Precision = "UNKNOWN"
        notes.append("no compute op has a floating-point output: precision cannot be told")
    elif floats == {"fp32"}:
        precision = "FLOAT32"
    elif floats == {"fp16"}:
        precision = "FLOAT16"
    else:
        precision = "MIXED"
        notes.append(
            "mixed precision: compute ops by output dtype: "
            + ", ".join(f"{k} {v}" for k, v in sorted(dtype_counts.items()))
        )
    if unknown_mac_ops:
        notes.append(
            "MACs are not counted for ops with unknown shapes ("
            + ", ".join(f"{v} {k}" for k, v in sorted(unknown_mac_ops.items()))
            + "): the MAC total is a lower bound"
        )
    if heavy_uncounted:
        notes.append(
            "MACs of " + ", ".join(f"{v} {k}" for k, v in sorted(heavy_uncounted.items()))
            + " ops are not counted"
        )
    if any(layer.macs for layer in layers if layer.depth > 0):
        notes.append(
            "MACs inside nested blocks are counted once per block: a cond runs one of its branches, "
            "a while_loop runs its body as many times as it loops"
        )
    if blobs.missing:
        notes.append("weights stored outside the .mlmodel file are counted at their declared size")

    macs_total = sum(layer.macs for layer in layers if layer.macs is not None)
    return {
        "function": fname,
        "functions": functions,
        "opset": opset,
        "opset_os": _OPSET_OS.get(opset),
        "precision": precision,
        "dtype_counts": dict(sorted(dtype_counts.items())),
        "op_counts": dict(op_counts.most_common()),
        "const_count": const_count,
        "weight_ops": dict(weight_ops.most_common()),
        "layers": layers,
        "totals": Totals(
            compute_ops=len(layers),
            const_ops=const_count,
            weight_ops=sum(weight_ops.values()),
            params=sum(layer.params or 0 for layer in layers),
            weight_bytes=sum(layer.weight_bytes or 0 for layer in layers),
            macs=macs_total,
            flops=2 * macs_total,
            macs_complete=not unknown_mac_ops,
        ),
    }


# Inputs whose constant values decide Neural Engine eligibility (see placement rules).
_PLACEMENT_INPUTS = {
    "conv": ("dilations", "strides", "groups"),
    "conv_transpose": ("dilations", "strides", "groups"),
    "max_pool": ("kernel_sizes", "strides"),
    "avg_pool": ("kernel_sizes", "strides"),
    "l2_pool": ("kernel_sizes", "strides"),
    "upsample_nearest_neighbor": ("scale_factor_height", "scale_factor_width"),
    "upsample_bilinear": ("scale_factor_height", "scale_factor_width"),
}
_SHAPE_INPUTS = {"reshape": "shape", "tile": "reps", "expand_dims": "axes", "slice_by_index": "begin"}


def _placement_attributes(op_type: str, op: Any, prog: _Program) -> dict[str, Any]:
    """The few constant parameters the placement rules need, read from the op's inputs."""
    attributes: dict[str, Any] = {}
    for key in _PLACEMENT_INPUTS.get(op_type, ()):
        value = prog.const_value(op, key)
        if value is not None:
            attributes[key] = value
    shape_input = _SHAPE_INPUTS.get(op_type)
    if shape_input and shape_input in op.inputs and prog.const_value(op, shape_input) is None:
        attributes["dynamic_shape"] = True
    return attributes


def _is_boundary_cast(op: Any, prog: _Program) -> bool:
    """A cast coremltools inserts at the program edge (fp32 input -> fp16, fp16 -> fp32 output)."""
    xs = op.inputs["x"].arguments if "x" in op.inputs else []
    if any(a.WhichOneof("binding") == "name" and a.name in prog.input_names for a in xs):
        return True
    return any(out.name in prog.output_names for out in op.outputs)


# --------------------------------------------------------------------------- neural networks


def _nn_weight_params(message: Any) -> Iterable[Any]:
    """WeightParams messages inside a neural-network layer (any depth)."""
    from google.protobuf.message import Message

    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        items = [value] if isinstance(value, Message) else list(value)
        for item in items:
            if field.message_type.name == "WeightParams":
                yield item
            else:
                yield from _nn_weight_params(item)


def _analyse_neural_network(spec: Any, model_type: str, notes: list[str]) -> dict[str, Any]:
    nn = getattr(spec, model_type)
    op_counts: Counter[str] = Counter()
    layers: list[LayerInfo] = []
    total_bytes = 0
    for layer in nn.layers:
        kind = layer.WhichOneof("layer") or "unknown"
        op_counts[kind] += 1
        stored = 0
        params_layer = getattr(layer, kind) if kind != "unknown" else None
        if params_layer is not None:
            for w in _nn_weight_params(params_layer):
                stored += 4 * len(w.floatValue) + len(w.float16Value) + len(w.rawValue) + len(w.int8RawValue)
        total_bytes += stored
        layers.append(LayerInfo(name=layer.name, op_type=kind, params=None, weight_bytes=stored))
    notes.append(
        "neural-network model: per-layer dtypes, shapes, parameters and MACs are not analysed; "
        "only layer types and stored weight bytes are counted"
    )
    notes.append("neural-network model: the compute precision is chosen at run time, not stored in the model")
    return {
        "precision": "UNKNOWN",
        "op_counts": dict(op_counts.most_common()),
        "const_count": 0,
        "layers": layers,
        "totals": Totals(
            compute_ops=len(layers), const_ops=0, weight_ops=0, params=None,
            weight_bytes=total_bytes, macs=None, flops=None, macs_complete=False,
        ),
    }


# --------------------------------------------------------------------------- entry point


def analyse_package(path: str | Path) -> ProgramAnalysis:
    """Analyse a saved Core ML model (``.mlpackage`` directory or ``.mlmodel`` file).

    Raises ``UserError`` (one line, ``file=path``) when the path does not exist, is not a
    Core ML model, or is corrupt.
    """
    path = Path(path)
    spec, spec_file, package_root = _load_spec(path)
    model_type = spec.WhichOneof("Type")
    notes: list[str] = []
    model_dir = spec_file.parent if package_root is not None else None
    blobs = _BlobReader(model_dir, path)
    try:
        if model_type == "mlProgram":
            details = _analyse_program(spec, blobs, notes)
        elif model_type in _NEURAL_NETWORK_TYPES:
            details = _analyse_neural_network(spec, model_type, notes)
        else:
            notes.append(f"{model_type} model: only its inputs and outputs are described")
            details = {
                "precision": "UNKNOWN",
                "op_counts": {},
                "const_count": 0,
                "layers": [],
                "totals": Totals(
                    compute_ops=0, const_ops=0, weight_ops=0, params=None, weight_bytes=None,
                    macs=None, flops=None, macs_complete=False,
                ),
            }
    except UserError:
        raise
    except Exception as exc:  # a spec that parses but does not hold together
        raise UserError(f"cannot analyse the model spec: {type(exc).__name__}: {exc}", file=path) from None
    finally:
        blobs.close()

    try:
        inputs = [_describe_feature(f) for f in spec.description.input]
        outputs = [_describe_feature(f) for f in spec.description.output]
    except Exception as exc:
        raise UserError(f"cannot read the model's inputs and outputs: {exc}", file=path) from None

    return ProgramAnalysis(
        path=str(path),
        model_type=model_type,
        spec_version=int(spec.specificationVersion),
        min_os=_SPEC_VERSION_OS.get(int(spec.specificationVersion)),
        package_size_bytes=_disk_size(path),
        inputs=inputs,
        outputs=outputs,
        notes=notes,
        **details,
    )
