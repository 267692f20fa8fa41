"""Flexible input dimensions as the PyTorch exporters take them (shared by the Core ML and ONNX exporters).

A dimension with alternatives or a range becomes one dynamic dimension from its smallest to its largest
size; dimensions with the same bounds share one (an input_ids and its attention_mask stay equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mlbench.config.models import ModelInput


def _bounds(items: list[ModelInput]) -> list[dict[int, tuple[int, int]]]:
    """Per input, {axis: (min, max)} of its flexible dimensions."""
    out: list[dict[int, tuple[int, int]]] = []
    for item in items:
        axes: dict[int, tuple[int, int]] = {}
        for axis, dim in enumerate(item.shape):
            if isinstance(dim, int):
                continue
            low, high = (min(dim), max(dim)) if isinstance(dim, list) else (dim.min, dim.max)
            if low != high:
                axes[axis] = (low, high)
        out.append(axes)
    return out


def dynamic_axes(items: list[ModelInput] | None) -> dict[str, dict[int, str]] | None:
    """The TorchScript ONNX exporter's dynamic_axes ({input: {axis: name}}); None when every shape is static."""
    bounds = _bounds(items or [])
    if not any(bounds):
        return None
    names: dict[tuple[int, int], str] = {}
    result: dict[str, dict[int, str]] = {}
    for item, axes in zip(items or [], bounds):
        if axes:
            result[item.name] = {axis: names.setdefault(b, f"d{len(names)}") for axis, b in axes.items()}
    return result


def dynamic_shapes(items: list[ModelInput] | None, module: Any = None) -> tuple[Any, ...] | None:
    """torch.export's dynamic_shapes for the inputs' flexible dimensions (dimensions with the same
    alternatives or range share one Dim), shaped like `module`'s forward parameters (one *args
    parameter takes them all); None when every shape is static."""
    bounds = _bounds(items or [])
    if not any(bounds):
        return None
    import torch

    dims: dict[tuple[int, int], Any] = {}
    specs: list[Any] = []
    for axes in bounds:
        spec = {axis: dims.setdefault(b, torch.export.Dim(f"d{len(dims)}", min=b[0], max=b[1]))
                for axis, b in axes.items()}
        specs.append(spec or None)
    return (tuple(specs),) if _takes_varargs(module) else tuple(specs)


def _takes_varargs(module: Any) -> bool:
    import inspect

    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (AttributeError, TypeError, ValueError):
        return False
    return len(parameters) == 1 and parameters[0].kind is inspect.Parameter.VAR_POSITIONAL

