"""Data movement, constants, control flow and data-dependent ops.

* Data movement (reshape, transpose, concat, split, pad, tile, cast, select, scatter...): 0 FLOPs;
  bytes by the module convention (inputs read, outputs written). A reshape that only relabels
  a layout may cost nothing at run time: the bytes are an upper bound.
* gather, gather_nd, gather_along_axis: read the indices and only the gathered elements of x
  (as many as the output holds, at x's stored bytes per element: an embedding table is not read
  whole); slice_by_index, slice_by_size, crop: read only the slice (the output's size).
* shape, fill_like: read metadata only (0 bytes read); fill, range_1d, random_*: read nothing.
* const, constexpr_*: data, not computation: no cost at all. cond, while_loop: 0; the ops in
  their blocks are costed one by one.
* argsort, topk, non_maximum_suppression, non_zero, random_categorical: FLOPs are data dependent: None; bytes counted.
"""

from __future__ import annotations

from mlbench.backends.apple.cost.base import OpCost, OpDescription, read_inputs, register, with_flops, written

MOVEMENT = (
    "reshape", "reshape_like", "transpose", "concat", "split", "stack", "pad", "tile", "cast", "expand_dims",
    "squeeze", "flatten2d", "identity", "reverse", "reverse_sequence", "space_to_depth", "depth_to_space",
    "pixel_shuffle", "pixel_unshuffle", "space_to_batch", "batch_to_space", "sliding_windows", "band_part",
    "select", "one_hot", "scatter", "scatter_nd", "scatter_along_axis", "slice_update", "read_state",
    "write_state", "coreml_update_state", "make_list", "list_read", "list_write", "list_gather",
    "list_scatter", "list_length", "classify",
)
NO_COST = ("const", "_const_symbolic", "cond", "while_loop")
DATA_DEPENDENT = ("argsort", "topk", "non_maximum_suppression", "non_zero", "random_categorical")


@register(*MOVEMENT)
def movement(desc: OpDescription) -> OpCost:
    return with_flops(desc, 0)


@register(*NO_COST)
def no_cost(desc: OpDescription) -> OpCost:
    return OpCost(0, 0, 0)


@register(*DATA_DEPENDENT)
def data_dependent(desc: OpDescription) -> OpCost:
    return with_flops(desc, None)


@register("shape", "fill_like", "fill", "range_1d", "random_bernoulli", "random_normal", "random_uniform")
def generate(desc: OpDescription) -> OpCost:
    return OpCost(0 if desc.op_type in ("shape", "fill_like", "fill", "range_1d") else None, 0, written(desc))


def _added(*parts: int | None) -> int | None:
    return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]


@register("gather", "gather_nd", "gather_along_axis")
def gather(desc: OpDescription) -> OpCost:
    x, out = desc.input("x"), desc.out
    indices = read_inputs(desc, skip=("x",))
    rows: int | None = None
    if x is not None and out is not None and out.numel is not None:
        if not x.const:
            per = None if x.nbytes is None or not x.numel else x.nbytes / x.numel
        else:
            per = None if desc.weight_bytes is None or not x.numel else desc.weight_bytes / x.numel
        rows = None if per is None else round(out.numel * per)
    return OpCost(0, _added(indices, rows), written(desc))


@register("slice_by_index", "slice_by_size", "crop")
def slice_(desc: OpDescription) -> OpCost:
    x, out = desc.input("x"), desc.out
    if x is not None and x.const:  # slicing a weight: at its stored density
        per = None if desc.weight_bytes is None or not x.numel else desc.weight_bytes / x.numel
        read = None if per is None or out is None or out.numel is None else round(out.numel * per)
    else:
        read = _added(written(desc), read_inputs(desc, skip=("x",)))
    return OpCost(0, read, written(desc))
