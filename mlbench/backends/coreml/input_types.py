"""Core ML input types from the pipeline's inputs: flexible shapes and images.

- a dimension with alternatives → ``ct.EnumeratedShapes`` (every enumerated dimension takes its k-th
  value together; the first alternative is the default): one package accepts every listed shape;
- a range → ``ct.RangeDim(min, max, default)``;
- ``kind: image`` → ``ct.ImageType`` (pixels 0-255; coremltools puts scale and bias in the program);
- otherwise a ``ct.TensorType`` of the example's shape (integers as int32, booleans as bool).

The torch.export fallback gets the same freedom from ``mlbench.backends.flexible.dynamic_shapes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mlbench.config.models import ModelInput

_LAYOUTS = {"RGB": "RGB", "BGR": "BGR", "GRAYSCALE": "GRAYSCALE"}


def _dtype(tensor: torch.Tensor) -> Any:
    import numpy as np
    import torch

    if tensor.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        return np.int32
    if tensor.dtype == torch.bool:
        return np.bool_
    return None  # floats: coremltools' default (float32, or float16 for float16 programs at iOS16+)


def coreml_shape(ct: Any, item: ModelInput) -> Any:
    """The shape argument of a TensorType or ImageType for `item`: a tuple, EnumeratedShapes or a Shape."""
    from mlbench.config.models import ShapeRange

    if not item.is_flexible:
        return tuple(item.default_shape)
    if any(isinstance(d, list) for d in item.shape):
        shapes = [tuple(item.concrete_shape(k)) for k in range(item.alternatives)]
        unique = list(dict.fromkeys(shapes))
        if len(unique) == 1:
            return unique[0]
        return ct.EnumeratedShapes(shapes=[list(s) for s in unique], default=list(unique[0]))
    dims = [ct.RangeDim(lower_bound=d.min, upper_bound=d.max, default=d.default) if isinstance(d, ShapeRange) else d
            for d in item.shape]
    return ct.Shape(shape=dims)


def input_type(ct: Any, name: str, tensor: torch.Tensor, item: ModelInput | None) -> Any:
    """The Core ML input type for one input (`item` None: a static tensor of the example's shape)."""
    if item is None:
        return ct.TensorType(name=name, shape=tuple(tensor.shape), dtype=_dtype(tensor))
    shape = coreml_shape(ct, item)
    if item.kind == "image":
        from mlbench.sources.inputs import image_scale_bias

        scale, bias = image_scale_bias(item)
        layout = getattr(ct.colorlayout, _LAYOUTS[item.layout])
        return ct.ImageType(name=name, shape=shape, scale=scale, bias=bias if item.channels > 1 else bias[0],
                            color_layout=layout)
    return ct.TensorType(name=name, shape=shape, dtype=_dtype(tensor))


def input_types(ct: Any, names: list[str], tensors: list[torch.Tensor], items: list[ModelInput] | None) -> list[Any]:
    return [input_type(ct, name, tensor, items[i] if items else None)
            for i, (name, tensor) in enumerate(zip(names, tensors))]


def needs_input_types(items: list[ModelInput] | None) -> bool:
    """True when the inputs say more than the example's shapes: flexible shapes or images."""
    return bool(items) and any(item.is_flexible or item.kind == "image" for item in items or [])
