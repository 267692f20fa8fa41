"""Weight decompression kernels: the ``constexpr_*`` ops of compressed (iOS16 and iOS18) programs.

iOS16 forms keep their operands as op attributes (the executor passes them as keyword arguments
like inputs); iOS18 forms take them as inputs. Semantics follow coremltools' own definitions
(``ops/defs/iOS16/constexpr_ops.py``, ``ops/defs/iOS18/compression.py``):

* lut_to_dense (iOS16): ``lut[unpack(indices, log2(len(lut)))].reshape(shape)``; indices are packed
  LSB first in bytes.
* lut_to_dense (iOS18): indices are unpacked already (uintN tensor); the LUT has shape
  ``[*blocks, palettes, vector_size]`` and each block of indices reads its own table.
* affine_dequantize: ``scale * (quantized_data - zero_point)``, scale/zero_point along ``axis``.
* blockwise_shift_scale: ``scale * (data - offset)`` with scale/offset repeated over blocks.
* sparse_to_dense: zeros with ``nonzero_data`` at the mask's set bits (row-major).
* lut_to_sparse / sparse_blockwise_shift_scale: the same on sparse data; two outputs (mask, data).
"""

from __future__ import annotations

import math

import torch

from mlbench.backends.coreml.emulate.blobs import unpack_bits
from mlbench.backends.coreml.emulate.registry import KernelError, as_int, as_ints, as_str, kernel


def _float(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def _along_axis(param: torch.Tensor, rank: int, axis: int) -> torch.Tensor:
    """A scalar or vector parameter shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    if param.dim() == rank:
        return param
    if param.numel() == 1:
        return param.reshape([1] * rank)
    shape = [1] * rank
    shape[axis % rank] = -1
    return param.reshape(shape)


def _repeat_blocks(param: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Repeat each block parameter over its block (blocks tile ``shape`` evenly)."""
    for axis, (size, blocks) in enumerate(zip(shape, param.shape)):
        if blocks != size:
            param = param.repeat_interleave(size // blocks, dim=axis)
    return param


def _lut_dense_ios18(indices: torch.Tensor, lut: torch.Tensor, vector_axis) -> torch.Tensor:
    rank = indices.dim()
    palettes, vector = lut.shape[-2], lut.shape[-1]
    blocks = lut.shape[:rank]
    # Each element reads the table of its block: block position = position // (size / blocks).
    block_id = torch.zeros((), dtype=torch.int64)
    for d in range(rank):
        position = torch.arange(indices.shape[d]) // (indices.shape[d] // blocks[d])
        block_id = block_id * blocks[d] + position.reshape([-1 if i == d else 1 for i in range(rank)])
    values = lut.reshape(-1, palettes, vector)[block_id, indices.to(torch.int64)]  # [*shape, vector]
    if vector == 1:
        return values.squeeze(-1)
    axis = as_int(vector_axis) % rank
    values = values.movedim(-1, axis + 1)  # a vector's elements follow its index along vector_axis
    shape = list(indices.shape)
    shape[axis] *= vector
    return values.reshape(shape)


@kernel("constexpr_lut_to_dense")
def constexpr_lut_to_dense(indices, lut, shape=None, vector_axis=None, **_):
    if shape is not None:  # iOS16: packed bytes and a flat LUT
        dims = as_ints(shape)
        nbits = round(math.log2(lut.numel()))
        flat = unpack_bits(indices.numpy(), nbits, math.prod(dims))
        return lut.reshape(-1)[torch.from_numpy(flat).to(torch.int64)].reshape(dims)
    return _lut_dense_ios18(indices, lut, vector_axis)


@kernel("constexpr_affine_dequantize")
def constexpr_affine_dequantize(quantized_data, zero_point, scale, axis=0, **_):
    rank, axis = quantized_data.dim(), as_int(axis)
    data = _float(quantized_data) - _along_axis(_float(zero_point), rank, axis)
    return data * _along_axis(_float(scale), rank, axis)


@kernel("constexpr_blockwise_shift_scale")
def constexpr_blockwise_shift_scale(data, scale, offset=None, **_):
    data = _float(data)
    if offset is not None:
        data = data - _repeat_blocks(_float(offset), data.shape)
    return data * _repeat_blocks(_float(scale), data.shape)


def _sparse_dense(nonzero_data: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=nonzero_data.dtype)
    out[mask != 0] = nonzero_data.reshape(-1)
    return out


@kernel("constexpr_sparse_to_dense")
def constexpr_sparse_to_dense(nonzero_data, mask, shape=None, **_):
    if shape is not None:  # iOS16: a packed bit mask and a shape
        dims = as_ints(shape)
        bits = torch.from_numpy(unpack_bits(mask.numpy(), 1, math.prod(dims))).reshape(dims)
        return _sparse_dense(nonzero_data, bits)
    return _sparse_dense(nonzero_data, mask)


@kernel("constexpr_lut_to_sparse")
def constexpr_lut_to_sparse(indices_mask, indices_nonzero_data, lut, vector_axis=None, **_):
    indices = _sparse_dense(indices_nonzero_data, indices_mask)
    dense = _lut_dense_ios18(indices, lut, vector_axis)
    mask = indices_mask
    if lut.shape[-1] > 1:
        mask = mask.repeat_interleave(lut.shape[-1], dim=as_int(vector_axis) % mask.dim())
    return mask, dense[mask != 0].reshape(-1)


@kernel("constexpr_sparse_blockwise_shift_scale")
def constexpr_sparse_blockwise_shift_scale(data_mask, nonzero_data, scale, offset=None, **_):
    dense = constexpr_blockwise_shift_scale(_sparse_dense(nonzero_data, data_mask), scale, offset)
    return data_mask, dense[data_mask != 0].reshape(-1)


@kernel("constexpr_cast")
def constexpr_cast(source_val, output_dtype="fp32", **_):
    if as_str(output_dtype) not in ("fp32", "fp16"):
        raise KernelError(f"constexpr_cast to {as_str(output_dtype)!r} is not implemented")
    return _float(source_val)


# ------------------------------------------------------------------ activation quantization (iOS17)

_QUANTIZED_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


@kernel("quantize")
def quantize(input, scale, output_dtype, zero_point=None, axis=None, **_):
    """``clip(round(input / scale) + zero_point)`` (iOS17 ``quantize``; round half to even, as numpy)."""
    name = as_str(output_dtype)
    if name not in _QUANTIZED_RANGE:
        raise KernelError(f"quantize to {name!r} is not implemented")
    rank = input.dim()
    along = 0 if axis is None else as_int(axis)
    scale_t = _along_axis(_float(torch.as_tensor(scale)), rank, along)
    quantized = torch.round(_float(input) / scale_t)
    if zero_point is not None:
        quantized = quantized + _along_axis(_float(torch.as_tensor(zero_point)), rank, along)
    low, high = _QUANTIZED_RANGE[name]
    return quantized.clamp(low, high).to(torch.int8 if name == "int8" else torch.uint8)


@kernel("dequantize")
def dequantize(input, scale, zero_point=None, axis=None, **_):
    """``scale * (input - zero_point)`` (iOS17 ``dequantize``), in the scale's float type."""
    rank = input.dim()
    along = 0 if axis is None else as_int(axis)
    value = _float(input)
    if zero_point is not None:
        value = value - _along_axis(_float(torch.as_tensor(zero_point)), rank, along)
    scale_t = torch.as_tensor(scale)
    return (value * _along_axis(_float(scale_t), rank, along)).to(scale_t.dtype)
