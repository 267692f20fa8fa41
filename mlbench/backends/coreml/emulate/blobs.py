"""Reading weights from an ML program's blob files (``weights/weight.bin``).

MIL blob storage (coremltools' ``libmilstoragepython`` writes it): a 64-byte file header, then per
blob a 64-byte metadata record at the offset the program names —
``uint32 sentinel (0xDEADBEEF), uint32 data type, uint64 size in bytes, uint64 data offset, ...`` —
and the data at its own offset. The program's declared type (dtype and shape) says how to read the
bytes; sub-byte types (uint1/2/3/4/6, int4) are packed least significant bit first.

Reading the bytes here (not through coremltools' native reader) lets a corrupt or truncated file
raise a clear error, and keeps the weights exactly those the package ships.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

__all__ = ["SUB_BYTE_BITS", "BlobFile", "CorruptPackage", "unpack_bits"]

_SENTINEL = 0xDEADBEEF
_METADATA = struct.Struct("<IIQQ")

#: Sub-byte MIL dtypes -> (bits, signed).
SUB_BYTE_BITS: dict[str, tuple[int, bool]] = {
    "uint1": (1, False),
    "uint2": (2, False),
    "uint3": (3, False),
    "uint4": (4, False),
    "uint6": (6, False),
    "int4": (4, True),
}


class CorruptPackage(ValueError):
    """The package's weights cannot be read as the program declares them."""


def unpack_bits(packed: np.ndarray, nbits: int, count: int, signed: bool = False) -> np.ndarray:
    """``count`` integers of ``nbits`` bits each, packed LSB first into ``packed`` (bytes).

    Unsigned values come back as uint8, signed ones (two's complement) as int8.
    """
    bits = np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), bitorder="little")
    needed = nbits * count
    if bits.size < needed:
        raise CorruptPackage(f"{bits.size} bits hold fewer than {count} values of {nbits} bits")
    grid = bits[:needed].reshape(count, nbits).astype(np.int16)
    values = (grid << np.arange(nbits, dtype=np.int16)).sum(axis=1)
    if signed:
        values = np.where(values >= 1 << (nbits - 1), values - (1 << nbits), values)
        return values.astype(np.int8)
    return values.astype(np.uint8)


class BlobFile:
    """One weight file, read whole once (weights are needed whole anyway)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = path.read_bytes()
        except OSError as exc:
            raise CorruptPackage(f"cannot read the weight file {path.name}: {exc.strerror or exc}") from None

    def read(self, offset: int, dtype: str, np_dtype: np.dtype | None, shape: tuple[int, ...]) -> np.ndarray:
        """The array of ``shape`` stored at ``offset`` (a metadata record's offset)."""
        if offset + _METADATA.size > len(self.data):
            raise CorruptPackage(f"{self.path.name} is truncated: no blob record at offset {offset}")
        sentinel, _blob_type, size, data_offset = _METADATA.unpack_from(self.data, offset)
        if sentinel != _SENTINEL:
            raise CorruptPackage(f"{self.path.name} has no blob record at offset {offset}")
        if data_offset + size > len(self.data):
            raise CorruptPackage(f"{self.path.name} is truncated: the blob at offset {offset} ends past the file")
        raw = np.frombuffer(self.data, dtype=np.uint8, count=size, offset=data_offset)
        count = int(np.prod(shape, dtype=np.int64))
        if dtype in SUB_BYTE_BITS:
            nbits, signed = SUB_BYTE_BITS[dtype]
            return unpack_bits(raw, nbits, count, signed).reshape(shape)
        assert np_dtype is not None
        itemsize = np.dtype(np_dtype).itemsize
        if size < count * itemsize:
            raise CorruptPackage(
                f"{self.path.name}: the blob at offset {offset} holds {size} bytes, {count * itemsize} declared"
            )
        return raw[: count * itemsize].view(np_dtype).reshape(shape).copy()
