"""Weight accounting: which stored weight data each compute op is first to use, and how many
bytes it takes as stored (compressed weights at their compressed size, blob-backed values at the
size their blob header records).

See ``records`` for what counts as a weight and as weight bytes as stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.analysis.mil import Program, declared_bytes, is_data_op, numel, short_type, tensor_info

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis.package import BlobReader

# Numeric dtypes that are shapes, indices or axes rather than weights when held in a const.
_INDEX_DTYPES = frozenset({"int32", "int64", "uint32", "uint64", "bool", "string"})
# Inputs/attributes of constexpr ops that are metadata, not stored weight data.
_CONSTEXPR_METADATA = frozenset({"name", "shape", "axis", "output_dtype", "vector_axis"})


def value_bytes(value: Any, blobs: BlobReader) -> int:
    declared = declared_bytes(value.type)
    if value.WhichOneof("value") == "blobFileValue":
        return blobs.size(value.blobFileValue.fileName, int(value.blobFileValue.offset), declared)
    return declared


class WeightAccounting:
    """Attributes stored weight data to the first compute op that uses it."""

    def __init__(self, prog: Program, blobs: BlobReader) -> None:
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
                if prod is None or not is_data_op(prod.type):
                    continue
                if short_type(prod.type) == "const":
                    if not self._is_weight_const(prod):
                        continue
                    dtype, shape = tensor_info(prod.outputs[0].type)
                    if arg.name in self.claimed:
                        continue
                    self.claimed.add(arg.name)
                    params += numel(shape) or 0
                    stored += value_bytes(prod.attributes["val"], self.blobs)
                    storage.append(str(dtype))
                else:
                    if arg.name in self.claimed:
                        continue
                    self.claimed.add(arg.name)
                    _dtype, shape = tensor_info(self.prog.var_types[arg.name])
                    params += numel(shape) or 0
                    b, desc = self._constexpr_storage(prod)
                    stored += b
                    storage.append(desc)
        description = ", ".join(dict.fromkeys(storage)) if storage else None
        return params, stored, description

    @staticmethod
    def _is_weight_const(op: Any) -> bool:
        if "val" not in op.attributes or not op.outputs:
            return False
        dtype, shape = tensor_info(op.outputs[0].type)
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
            total += value_bytes(value, self.blobs)
            parts.append(f"{tensor_info(value.type)[0]} {key}")
        for key, argument in sorted(op.inputs.items()):  # iOS18 constexpr ops take inputs
            if key in _CONSTEXPR_METADATA:
                continue
            for arg in argument.arguments:
                if arg.WhichOneof("binding") == "value":
                    total += value_bytes(arg.value, self.blobs)
                    parts.append(f"{tensor_info(arg.value.type)[0]} {key}")
                    continue
                prod = self.prog.producer.get(arg.name)
                if prod is None or arg.name in self.claimed:
                    continue
                self.claimed.add(arg.name)
                if short_type(prod.type) == "const" and "val" in prod.attributes:
                    total += value_bytes(prod.attributes["val"], self.blobs)
                    parts.append(f"{tensor_info(prod.outputs[0].type)[0]} {key}")
                elif is_data_op(prod.type):
                    b, d = self._constexpr_storage(prod, seen)
                    total += b
                    parts.append(f"{key}={d}")
        kind = short_type(op.type).removeprefix("constexpr_")
        return total, f"{kind}({', '.join(parts)})"


def nn_weight_params(message: Any) -> Iterable[Any]:
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
                yield from nn_weight_params(item)
