"""Reading a saved Core ML model from disk: the package manifest or ``.mlmodel`` file, the protobuf
spec, the weight files' blob headers, the size on disk, and the declared inputs and outputs.

It parses the protobuf spec with coremltools' generated classes only (no ``MLModel``, no
compilation, no prediction), so it runs on Linux.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path
from typing import Any

from mlbench.backends.apple.analysis.records import TensorDescription
from mlbench.backends.apple.coremltools_messages import import_coremltools
from mlbench.errors import UserError

# ArrayFeatureType.ArrayDataType (FeatureTypes.proto) -> short name.
_ARRAY_DTYPES = {65568: "fp32", 65552: "fp16", 65600: "fp64", 131104: "int32", 131080: "int8"}

# Specification version -> first OS release that reads it (coremltools/__init__.py).
SPEC_VERSION_OS = {
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
_BLOB_SENTINEL = 0xDEADBEEF
MAX_SPEC_BYTES = 2**31 - 1  # protobuf reads no message over 2 GiB
MAX_MANIFEST_BYTES = 1 << 20


def _regular_file(file: Path, what: str, package: Path, limit: int) -> None:
    """Refuse what is not a regular file (a FIFO would block the read, a device never end) or is too big
    to read whole; checked with lstat, before any open."""
    try:
        st = file.lstat()
    except OSError as exc:
        raise UserError(f"cannot read the {what}: {exc.strerror or exc}", file=package) from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a symlink" if stat.S_ISLNK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise UserError(f"not a Core ML model: the {what} is {kind}", file=package)
    if st.st_size > limit:
        raise UserError(f"the {what} is {st.st_size:,} bytes; at most {limit:,} can be read", file=package)


def _reason(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return reason[:1].lower() + reason[1:]


def _usable_name(name: str, what: str, package: Path) -> None:
    """Refuse a path the package names that no file system could hold (the OS would raise, not answer)."""
    if "\0" in name:
        raise UserError(f"corrupt Core ML package: {what} holds a NUL character; refused", file=package)
    if len(name) > 4096:
        raise UserError(f"corrupt Core ML package: {what} is {len(name):,} characters long; refused", file=package)


def _present(file: Path, what: str, package: Path) -> bool:
    """Whether `file` exists (or is a link), one line instead of an OSError (e.g. a name too long)."""
    try:
        return file.exists() or file.is_symlink()
    except OSError as exc:
        raise UserError(f"corrupt Core ML package: cannot look up {what}: {_reason(exc)}", file=package) from None


def load_spec(path: Path) -> tuple[Any, Path, Path | None]:
    """Parse the spec. Returns (spec, spec file, package root or None for an .mlmodel).

    Reads only regular files inside the package, each checked for size before it is read."""
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. a name too long for the file system
        raise UserError(f"cannot read: {_reason(exc)}", file=path) from None
    if not exists:
        raise UserError("no such file or directory", file=path)
    if path.is_dir():
        manifest_path = path / "Manifest.json"
        if not manifest_path.is_file():
            raise UserError("not a Core ML model: no Manifest.json", file=path)
        _regular_file(manifest_path, "Manifest.json", path, MAX_MANIFEST_BYTES)
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            root_id = manifest["rootModelIdentifier"]
            entry = manifest["itemInfoEntries"][root_id]
            spec_file = path / "Data" / entry["path"]
            if not isinstance(entry["path"], str):
                raise TypeError
        except (ValueError, UnicodeDecodeError) as exc:
            raise UserError(f"corrupt Core ML package: Manifest.json is not valid JSON ({exc})", file=path) from None
        except RecursionError:
            raise UserError("corrupt Core ML package: Manifest.json is nested too deeply to read", file=path) from None
        except (KeyError, TypeError):
            raise UserError(
                "corrupt Core ML package: Manifest.json does not name the root model", file=path
            ) from None
        _usable_name(entry["path"], "Manifest.json's model spec path", path)
        data_dir = (path / "Data").resolve()
        if not spec_file.resolve().is_relative_to(data_dir):
            raise UserError(f"corrupt Core ML package: Manifest.json points outside the package "
                            f"({entry['path']!r}); refused", file=path)
        if not _present(spec_file, "the model spec", path):
            rel = spec_file.relative_to(path) if spec_file.is_relative_to(path) else spec_file
            raise UserError(f"corrupt Core ML package: the model spec {rel} is missing", file=path)
        _regular_file(spec_file, "model spec", path, MAX_SPEC_BYTES)
        package_root: Path | None = path
    else:
        if path.suffix.lower() != ".mlmodel":
            raise UserError(
                "not a Core ML model: expected an .mlpackage directory or an .mlmodel file", file=path
            )
        _regular_file(path, "model file", path, MAX_SPEC_BYTES)
        spec_file = path
        package_root = None

    import_coremltools()  # quietly: coremltools prints import-time notices on Linux
    from coremltools.proto import Model_pb2  # deferred: importing coremltools is slow

    spec = Model_pb2.Model()
    try:
        data = spec_file.read_bytes()
        spec.ParseFromString(data)
    except OSError as exc:
        raise UserError(f"cannot read the model spec: {exc.strerror or exc}", file=path) from None
    except Exception:  # noqa: BLE001 - google.protobuf.message.DecodeError; its text varies with the protobuf backend
        raise UserError("cannot parse the model spec: the protobuf is truncated or corrupt", file=path) from None
    if not data:
        raise UserError("not a Core ML model: the model spec is empty", file=path)
    if spec.WhichOneof("Type") is None:
        raise UserError("not a Core ML model: the spec holds no model", file=path)
    return spec, spec_file, package_root


def disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def describe_feature(feature: Any) -> TensorDescription:
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


class BlobReader:
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
        _usable_name(rel, "a weight file's path", self.origin)
        p = self.model_dir / rel
        key = str(p)
        if key not in self._handles:
            if not p.resolve().is_relative_to(self.model_dir.resolve()):
                raise UserError(f"corrupt Core ML package: the weight file {rel!r} is outside the package; refused",
                                file=self.origin)
            if not _present(p, f"the weight file {rel!r}", self.origin):
                raise UserError(f"corrupt Core ML package: the weight file {rel} is missing", file=self.origin)
            _regular_file(p, f"weight file {rel}", self.origin, 1 << 62)  # read by header, never whole
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
