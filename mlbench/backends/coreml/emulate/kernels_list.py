"""List kernels (``make_list``, ``list_write``...): the tensor lists of loops converted from torch.

A list is a Python list of tensors; every write returns a new list, so SSA values never change.
"""

from __future__ import annotations

import torch

from mlbench.backends.coreml.emulate.registry import as_int, as_ints, kernel


@kernel("make_list")
def make_list(init_length=1, dynamic_length=True, elem_shape=None, dtype="fp32", **_):
    length = as_int(init_length) if init_length is not None else 0
    shape = as_ints(elem_shape) if elem_shape is not None else None
    fill = torch.zeros(shape) if shape is not None else None
    return [fill] * length


@kernel("list_length")
def list_length(ls, **_):
    return torch.tensor(len(ls), dtype=torch.int32)


@kernel("list_write")
def list_write(ls, index, value, **_):
    out = list(ls)
    i = as_int(index)
    if i >= len(out):
        out.extend([None] * (i + 1 - len(out)))
    out[i] = value
    return out


@kernel("list_read")
def list_read(ls, index, **_):
    return ls[as_int(index)]


@kernel("list_gather")
def list_gather(ls, indices, **_):
    written = next((v for v in ls if v is not None), None)
    if written is None:
        raise ValueError("list_gather on a list with no element written")
    # slots never written (a list_write past the end leaves a gap) read as zeros
    return torch.stack([ls[i] if ls[i] is not None else torch.zeros_like(written) for i in as_ints(indices)])


@kernel("list_scatter")
def list_scatter(ls, indices, value, **_):
    out = list(ls)
    for row, i in enumerate(as_ints(indices)):
        if i >= len(out):
            out.extend([None] * (i + 1 - len(out)))
        out[i] = value[row]
    return out
