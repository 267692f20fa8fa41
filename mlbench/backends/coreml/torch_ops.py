"""Converters for PyTorch ops that coremltools (9.0) lacks or mis-handles, registered once per process
before the first conversion. Each is small and written as coremltools writes its own
(``converters/mil/frontend/torch/ops.py``); one that coremltools already has is left alone, so a
newer coremltools' own converter wins.

- ``diff`` (``torch.diff``: Hugging Face's mask code calls it on position ids);
- ``new_ones`` (``tensor.new_ones``: the same code builds its boolean masks with it);
- ``int`` / ``bool`` on a one-element constant array: coremltools calls ``int(array)``, which NumPy 2
  refuses for arrays of rank ≥ 1 ("only 0-dimensional arrays can be converted to Python scalars");
  these two are replaced (``override``) by versions that take the element first.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register_extra_torch_ops"]

_REGISTERED = False


def register_extra_torch_ops() -> None:
    """Register the converters below with coremltools' torch frontend (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    import numpy as np
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch import ops as ct_ops
    from coremltools.converters.mil.frontend.torch.torch_op_registry import _TORCH_OPS_REGISTRY, register_torch_op

    def missing(name: str) -> bool:
        return name not in _TORCH_OPS_REGISTRY.name_to_func_mapping

    if missing("diff"):
        @register_torch_op
        def diff(context: Any, node: Any) -> None:
            inputs = ct_ops._get_inputs(context, node, min_expected=1)
            x = inputs[0]
            n = inputs[1].val if len(inputs) > 1 and inputs[1] is not None else 1
            dim = inputs[2].val if len(inputs) > 2 and inputs[2] is not None else -1
            prepend = inputs[3] if len(inputs) > 3 else None
            append = inputs[4] if len(inputs) > 4 else None
            prepend = ct_ops._get_kwinputs(context, node, "prepend", default=[prepend])[0]
            append = ct_ops._get_kwinputs(context, node, "append", default=[append])[0]
            parts = [v for v in (prepend, x, append) if v is not None]
            if len(parts) > 1:
                x = mb.concat(values=parts, axis=dim)
            rank = x.rank
            axis = dim % rank
            for _ in range(int(n)):
                length = x.shape[axis]
                begin_hi, begin_lo = [0] * rank, [0] * rank
                end_hi, end_lo = [0] * rank, [0] * rank
                mask = [True] * rank
                begin_hi[axis], begin_lo[axis] = 1, 0
                end_hi[axis], end_lo[axis] = 0, length - 1
                end_mask_hi = [True] * rank
                end_mask_lo = [True] * rank
                end_mask_lo[axis] = False
                mask[axis] = False
                hi = mb.slice_by_index(x=x, begin=begin_hi, end=end_hi, begin_mask=mask, end_mask=end_mask_hi)
                lo = mb.slice_by_index(x=x, begin=begin_lo, end=end_lo, begin_mask=mask, end_mask=end_mask_lo)
                x = mb.sub(x=hi, y=lo)
            context.add(mb.identity(x=x, name=node.name))

    if missing("new_ones"):
        @register_torch_op
        def new_ones(context: Any, node: Any) -> None:
            inputs = ct_ops._get_inputs(context, node, min_expected=2)
            shape = inputs[1]
            if isinstance(shape, list):
                shape = mb.concat(values=shape, axis=0) if shape else None
            value: Any = 1.0
            dtype = inputs[2] if len(inputs) > 2 else None
            dtype = ct_ops._get_kwinputs(context, node, "dtype", default=[dtype])[0]
            if dtype is not None and getattr(dtype, "val", None) is not None:
                numpy_dtype = ct_ops.NUM_TO_NUMPY_DTYPE.get(dtype.val) if isinstance(dtype.val, (int, np.integer)) \
                    else None
                if numpy_dtype in (bool, np.bool_):
                    value = True
                elif numpy_dtype is not None and np.issubdtype(numpy_dtype, np.integer):
                    value = np.int32(1)
            if shape is None or (getattr(shape, "val", None) is not None and np.size(shape.val) == 0):
                context.add(mb.const(val=value, name=node.name))
            else:
                context.add(mb.fill(shape=shape, value=value, name=node.name))

    def scalar_cast(python_type: type, dtype_name: str) -> Any:
        def convert(context: Any, node: Any) -> None:
            x = ct_ops._get_inputs(context, node, expected=1)[0]
            if x.can_be_folded_to_const() and np.size(x.val) == 1:
                context.add(mb.const(val=python_type(np.asarray(x.val).reshape(())), name=node.name), node.name)
                return
            ct_ops._cast(context, node, python_type, dtype_name)
        return convert

    for python_type, dtype_name in ((int, "int32"), (bool, "bool")):
        converter = scalar_cast(python_type, dtype_name)
        converter.__name__ = f"_{python_type.__name__}"  # coremltools' own names; the alias is the op
        register_torch_op(converter, torch_alias=[python_type.__name__], override=True)
    _REGISTERED = True
