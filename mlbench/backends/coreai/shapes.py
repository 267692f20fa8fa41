"""Enumerated input shapes as Core AI keeps them: one statically-shaped function per alternative.

``torch.export`` takes a flexible dimension as a dynamic ``Dim`` (``backends.flexible``); for enumerated
sizes the converted program is then specialized with ``AIProgram.set_static_shape_config("main", {key:
{input: shape}})``, which replaces the dynamic ``main`` by one static graph per alternative, named
``main_<key>`` (``main_s16``, ``main_s32``), sharing the weights: the asset accepts exactly the enumerated
shapes, as a Core ML package with ``EnumeratedShapes`` does. Ranges stay one dynamic function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mlbench.config.models import ModelInput

ENTRYPOINT = "main"


def enumerated(inputs: list[ModelInput] | None) -> dict[str, dict[str, tuple[int, ...]]]:
    """{function key: {input name: static shape}} for inputs with enumerated alternatives; {} without."""
    items = list(inputs or [])
    if not any(isinstance(d, list) and len(set(d)) > 1 for i in items for d in i.shape):
        return {}
    count = max(i.alternatives for i in items)
    return {key(items, k): {i.name: tuple(i.concrete_shape(k)) for i in items if i.is_flexible}
            for k in range(count)}


def key(items: list[ModelInput], alternative: int) -> str:
    """The alternative's function key: ``s`` and its flexible sizes (``s16``, ``s64x80``), as the variant's
    shape label names it."""
    sizes: list[str] = []
    for item in items:
        for dim, size in zip(item.shape, item.concrete_shape(alternative), strict=True):
            if not isinstance(dim, int) and str(size) not in sizes:
                sizes.append(str(size))
    return "s" + "x".join(sizes)


def function_for(inputs: list[ModelInput] | None, shape_label: str | None) -> str:
    """The function a variant runs: ``main``, or ``main_s<label>`` for an enumerated alternative."""
    config = enumerated(inputs)
    if not config:
        return ENTRYPOINT
    wanted = f"s{shape_label}" if shape_label else next(iter(config))
    return f"{ENTRYPOINT}_{wanted if wanted in config else next(iter(config))}"


def specialize(program: Any, inputs: list[ModelInput] | None) -> Any:
    """The program with one static function per enumerated alternative (unchanged without alternatives)."""
    config = enumerated(inputs)
    if config:
        program.set_static_shape_config(ENTRYPOINT, config)
    return program
