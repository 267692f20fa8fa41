"""Layout kernels that move elements between axes: ``space_to_batch``/``batch_to_space`` (TensorFlow's,
on NCHW), ``sliding_windows`` and ``reverse_sequence``."""

from __future__ import annotations

import torch

from mlbench.backends.coreml.emulate.registry import as_int, as_ints, kernel


@kernel("space_to_batch")
def space_to_batch(x, block_shape, paddings, **_):
    """[n, C, H, W] -> [bh * bw * n, C, H' / bh, W' / bw] after zero padding: output batch
    ``(i * bw + j) * n + b`` holds rows ``i::bh`` and columns ``j::bw`` of image ``b``."""
    bh, bw = as_ints(block_shape)
    (top, bottom), (left, right) = [as_ints(p) for p in paddings] if isinstance(paddings, list) else \
        paddings.reshape(2, 2).tolist()
    x = torch.nn.functional.pad(x, [left, right, top, bottom])
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // bh, bh, w // bw, bw).permute(3, 5, 0, 1, 2, 4)
    return blocks.reshape(bh * bw * n, c, h // bh, w // bw)


@kernel("batch_to_space")
def batch_to_space(x, block_shape, crops, **_):
    """The inverse of ``space_to_batch``, then ``crops`` [[top, bottom], [left, right]] cut off."""
    bh, bw = as_ints(block_shape)
    (top, bottom), (left, right) = [as_ints(p) for p in crops] if isinstance(crops, list) else \
        crops.reshape(2, 2).tolist()
    nb, c, h, w = x.shape
    n = nb // (bh * bw)
    image = x.reshape(bh, bw, n, c, h, w).permute(2, 3, 4, 0, 5, 1).reshape(n, c, h * bh, w * bw)
    return image[:, :, top:h * bh - bottom, left:w * bw - right]


@kernel("sliding_windows")
def sliding_windows(x, axis, size, stride=1, **_):
    """Windows of ``size`` every ``stride`` along ``axis``, the window's elements on a new axis right after it."""
    axis = as_int(axis) % x.dim()
    return x.unfold(axis, as_int(size), as_int(stride)).movedim(-1, axis + 1)


@kernel("reverse_sequence")
def reverse_sequence(x, lengths, seq_axis=0, batch_axis=0, **_):
    """For each index ``b`` along ``batch_axis``, the first ``lengths[b]`` elements along ``seq_axis`` reversed."""
    seq, batch = as_int(seq_axis) % x.dim(), as_int(batch_axis) % x.dim()
    steps = x.shape[seq]
    positions = torch.arange(steps).reshape(1, steps)
    lengths = torch.as_tensor(as_ints(lengths), dtype=torch.int64).reshape(-1, 1)
    source = torch.where(positions < lengths, lengths - 1 - positions, positions)  # [batch, seq]
    moved = x.movedim((batch, seq), (0, 1))
    index = source.reshape(*source.shape, *([1] * (moved.dim() - 2))).expand_as(moved)
    return torch.gather(moved, 1, index).movedim((0, 1), (batch, seq))
