"""Loading a saved ML program (``.mlpackage`` or ``.mlmodel``) into plain Python objects.

Walks the protobuf spec directly (coremltools' generated classes only): every op keeps its type
(opset prefix removed), its inputs (names of variables, or literal values), its declared outputs
(name, dtype, shape), its attributes and its nested blocks. Values are decoded to numpy arrays;
weights stored in blob files are read from the package's own ``weights/`` folder.

Why not coremltools' milproto frontend (``milproto/load.py``)? It rebuilds a MIL ``Program`` through
the op builder, which re-runs type inference and validation for every op; that couples the
interpreter to coremltools' op classes (and their bugs) and would fail on a program it cannot
re-validate. Walking the spec reads what ships, nothing more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlbench.backends.coreml.emulate.blobs import SUB_BYTE_BITS, BlobFile, CorruptPackage, unpack_bits

__all__ = ["Arg", "Block", "Op", "Program", "TypeInfo", "function_names", "load_program", "normalise_op_type",
           "spec_file"]

# MIL DataType enum (coremltools/proto/MIL_pb2.py) -> name.
MIL_DTYPES: dict[int, str] = {
    1: "bool", 2: "string", 10: "fp16", 11: "fp32", 12: "fp64", 13: "bf16",
    21: "int8", 22: "int16", 23: "int32", 24: "int64", 25: "int4",
    31: "uint8", 32: "uint16", 33: "uint32", 34: "uint64", 35: "uint4", 36: "uint2", 37: "uint1",
    38: "uint6", 39: "uint3", 40: "fp8e4m3fn", 41: "fp8e5m2",
}
NUMPY_DTYPES: dict[str, Any] = {
    "bool": np.bool_, "fp16": np.float16, "fp32": np.float32, "fp64": np.float64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "int4": np.int8, "uint1": np.uint8, "uint2": np.uint8, "uint3": np.uint8, "uint4": np.uint8,
    "uint6": np.uint8,
}


def normalise_op_type(op_type: str) -> str:
    """``ios17.conv`` -> ``conv``: the op's name without its opset prefix."""
    return op_type.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class TypeInfo:
    kind: str  # tensor, list, tuple, dict, state
    dtype: str | None = None  # MIL dtype name for tensors (fp32, fp16, int32, bool, string...)
    shape: tuple[int | None, ...] | None = None  # None: unknown rank; None dims: unknown size


@dataclass
class Arg:
    """One binding of an op input: the name of a variable, or a literal value."""

    name: str | None = None
    value: Any = None


@dataclass
class Op:
    type: str  # normalised (no opset prefix)
    raw_type: str
    inputs: dict[str, list[Arg]]
    outputs: list[tuple[str, TypeInfo]]
    attributes: dict[str, Any] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    name: str = ""


@dataclass
class Block:
    inputs: list[tuple[str, TypeInfo]]
    outputs: list[str]
    ops: list[Op]


@dataclass
class Program:
    path: Path
    main: Block
    inputs: list[tuple[str, TypeInfo]]  # the main function's inputs, in order
    output_names: list[str]  # the model's declared output names, in order
    spec_version: int
    opset: str
    function: str = "main"  # the function of a multifunction program this one runs

    @property
    def input_names(self) -> list[str]:
        """The inputs a call passes (state inputs are held by a state object, not passed)."""
        return [name for name, info in self.inputs if info.kind != "state"]

    @property
    def states(self) -> list[tuple[str, TypeInfo]]:
        """The state inputs (``ct.StateType``: iOS18 stateful programs), in order."""
        return [(name, info) for name, info in self.inputs if info.kind == "state"]

    def op_types(self) -> list[str]:
        """Every op type (normalised) in program order, nested blocks included."""
        types: list[str] = []

        def walk(block: Block) -> None:
            for op in block.ops:
                types.append(op.type)
                for inner in op.blocks:
                    walk(inner)

        walk(self.main)
        return types


def _type_info(value_type: Any) -> TypeInfo:
    which = value_type.WhichOneof("type")
    if which == "tensorType":
        t = value_type.tensorType
        dims: list[int | None] = []
        for dim in t.dimensions:
            dims.append(int(dim.constant.size) if dim.WhichOneof("dimension") == "constant" else None)
        rank = int(t.rank)
        shape = tuple(dims) if len(dims) == rank else None
        return TypeInfo("tensor", MIL_DTYPES.get(int(t.dataType), f"unknown({t.dataType})"), shape)
    if which == "stateType":
        inner = _type_info(value_type.stateType.wrappedType)
        return TypeInfo("state", inner.dtype, inner.shape)
    return TypeInfo({"listType": "list", "tupleType": "tuple", "dictionaryType": "dict"}.get(which, str(which)))


class _ValueReader:
    def __init__(self, weights_root: Path | None) -> None:
        self.weights_root = weights_root
        self.files: dict[str, BlobFile] = {}

    def blob(self, file_name: str) -> BlobFile:
        rel = file_name.replace("@model_path/", "", 1)
        if rel not in self.files:
            if self.weights_root is None:
                raise CorruptPackage(f"the program refers to the weight file {rel}, but this is not a package")
            path = self.weights_root / rel
            if not path.is_file():
                raise CorruptPackage(f"the weight file {rel} is missing")
            self.files[rel] = BlobFile(path)
        return self.files[rel]

    def value(self, value: Any) -> Any:
        info = _type_info(value.type)
        which = value.WhichOneof("value")
        if which == "blobFileValue":
            shape = tuple(int(d) for d in (info.shape or ()) if d is not None)
            if info.dtype not in NUMPY_DTYPES or any(d is None for d in (info.shape or ())):
                raise CorruptPackage(f"cannot read a blob of type {info.dtype} {info.shape}")
            return self.blob(value.blobFileValue.fileName).read(
                int(value.blobFileValue.offset), info.dtype, NUMPY_DTYPES[info.dtype], shape
            )
        immediate = value.immediateValue
        kind = immediate.WhichOneof("value")
        if kind == "tensor":
            return _tensor_value(immediate.tensor, info)
        if kind in ("tuple", "list"):
            return [self.value(v) for v in getattr(immediate, kind).values]
        if kind == "dictionary":
            return {self.value(p.key): self.value(p.value) for p in immediate.dictionary.values}
        raise CorruptPackage(f"unknown immediate value kind {kind!r}")


def _tensor_value(tensor: Any, info: TypeInfo) -> Any:
    which = tensor.WhichOneof("value")
    shape = tuple(int(d or 0) for d in (info.shape or ()))
    dtype = info.dtype or "fp32"
    if which == "strings":
        values = list(tensor.strings.values)
        return values[0] if not shape and values else values
    if which == "bytes":
        raw = np.frombuffer(tensor.bytes.values, dtype=np.uint8)
        count = int(np.prod(shape, dtype=np.int64))
        if dtype in SUB_BYTE_BITS:
            nbits, signed = SUB_BYTE_BITS[dtype]
            array = unpack_bits(raw, nbits, count, signed)
        else:
            array = raw.view(NUMPY_DTYPES[dtype])[:count]
        return array.reshape(shape).copy()
    source = {"floats": np.float32, "ints": np.int32, "bools": np.bool_, "longInts": np.int64,
              "doubles": np.float64}[which]
    array = np.asarray(list(getattr(tensor, which).values), dtype=source)
    target = NUMPY_DTYPES.get(dtype, source)
    return array.astype(target).reshape(shape)


def _load_op(spec_op: Any, reader: _ValueReader) -> Op:
    inputs: dict[str, list[Arg]] = {}
    for key, argument in spec_op.inputs.items():
        args = []
        for binding in argument.arguments:
            if binding.WhichOneof("binding") == "name":
                args.append(Arg(name=binding.name))
            else:
                args.append(Arg(value=reader.value(binding.value)))
        inputs[key] = args
    attributes = {key: reader.value(val) for key, val in spec_op.attributes.items()}
    name = attributes.pop("name", "") or ""
    return Op(
        type=normalise_op_type(spec_op.type),
        raw_type=spec_op.type,
        inputs=inputs,
        outputs=[(o.name, _type_info(o.type)) for o in spec_op.outputs],
        attributes=attributes,
        blocks=[_load_block(b, reader) for b in spec_op.blocks],
        name=str(name),
    )


def _load_block(spec_block: Any, reader: _ValueReader) -> Block:
    return Block(
        inputs=[(i.name, _type_info(i.type)) for i in spec_block.inputs],
        outputs=list(spec_block.outputs),
        ops=[_load_op(op, reader) for op in spec_block.operations],
    )


def spec_file(path: Path) -> tuple[Path, Path | None]:
    """(the spec file, the folder its ``@model_path`` weights are relative to)."""
    if path.is_dir():
        manifest = json.loads((path / "Manifest.json").read_text(encoding="utf-8"))
        entry = manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]
        spec_file = path / "Data" / entry["path"]
        return spec_file, spec_file.parent
    return path, None


def load_program(path: str | Path, function: str | None = None) -> Program:
    """Read one function of the ML program saved at ``path``: ``function`` by name, else the default
    function (``main``, or a multifunction package's declared default)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(path)
    from mlbench.backends.apple.coremltools_messages import import_coremltools

    import_coremltools()  # quietly: coremltools prints import-time notices on Linux
    from coremltools.proto import Model_pb2  # deferred: importing coremltools is slow

    spec_path, weights_root = spec_file(path)
    spec = Model_pb2.Model()
    spec.ParseFromString(spec_path.read_bytes())
    return program_from_spec(spec, weights_root, path, function)


def function_names(spec: Any) -> list[str]:
    """The functions of an ML program spec, in the spec's order."""
    return list(spec.mlProgram.functions.keys())


def program_from_spec(spec: Any, weights_root: Path | None, path: Path, name: str | None = None) -> Program:
    """One function (``name``, else the default) of an ML program spec already in memory (``@model_path``
    weights are relative to ``weights_root``); ``path`` names it in messages."""
    if spec.WhichOneof("Type") != "mlProgram":
        raise ValueError(f"{path} is not an ML program (it holds a {spec.WhichOneof('Type')})")
    name = name or spec.description.defaultFunctionName or "main"
    function = spec.mlProgram.functions.get(name)
    if function is None:
        known = ", ".join(function_names(spec)) or "none"
        raise CorruptPackage(f"{path}: the ML program has no function {name!r} (it has {known})")
    described = [f for f in spec.description.functions if f.name == name]
    declared = described[0].output if described else spec.description.output
    opset = function.opset or next(iter(function.block_specializations))
    reader = _ValueReader(weights_root)
    main = _load_block(function.block_specializations[opset], reader)
    return Program(
        path=path,
        main=main,
        inputs=[(i.name, _type_info(i.type)) for i in function.inputs],
        output_names=[o.name for o in declared] or list(main.outputs),
        spec_version=int(spec.specificationVersion),
        opset=opset,
        function=name,
    )
