"""The activation peak of a program with flexible inputs, at the largest shape they allow.

A flexible input leaves the sizes of the values it reaches unknown in the saved program (the spec writes
`unknown` dimensions, with no symbol tying one to an input's range). So the program is run once, in mlbench's
reference interpreter (`emulate`), on zeros of the largest allowed shape: each range at its upper bound, or
each enumerated shape in turn (the largest peak wins); the sizes of the values it computes then feed the same
liveness pass as a fixed program's (`memory.function_values`). An unbounded range has no largest shape: the
estimate is absent, saying which input. Only the `main` function is run (the interpreter's).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from mlbench.backends.apple.analysis.liveness import FunctionPeak, NotEstimable, function_values, opset_of, peak_of
from mlbench.backends.apple.analysis.mil import _MIL_DTYPES, tensor_info

MAX_ENUMERATED = 8
"""At most this many combinations of enumerated shapes are run (the largest by elements first)."""


def candidate_shapes(spec: Any) -> list[dict[str, tuple[int, ...]]]:
    """The input shapes to size the program at: one set with every range at its upper bound, and, for inputs
    with enumerated shapes, each combination of them (largest first). NotEstimable for an unbounded range or a
    flexible image."""
    choices: dict[str, list[tuple[int, ...]]] = {}
    for feature in spec.description.input:
        kind = feature.type.WhichOneof("Type")
        if kind == "imageType":
            image = feature.type.imageType
            if image.WhichOneof("SizeFlexibility") is not None:
                raise NotEstimable(f"input {feature.name} is an image of flexible size: not sized by mlbench")
            continue
        if kind != "multiArrayType":
            continue
        array = feature.type.multiArrayType
        flexibility = array.WhichOneof("ShapeFlexibility")
        if flexibility == "shapeRange":
            bounds = []
            for axis, size in enumerate(array.shapeRange.sizeRanges):
                if size.upperBound < 0:
                    raise NotEstimable(f"input {feature.name}'s dimension {axis} has no upper bound: there is no "
                                       "largest shape to size the program at")
                bounds.append(int(size.upperBound))
            choices[feature.name] = [tuple(bounds)]
        elif flexibility == "enumeratedShapes":
            shapes = [tuple(int(d) for d in s.shape) for s in array.enumeratedShapes.shapes]
            choices[feature.name] = sorted(shapes, key=math.prod, reverse=True)
        else:
            choices[feature.name] = [tuple(int(d) for d in array.shape)]
    names = list(choices)
    combos = list(itertools.product(*(choices[n] for n in names)))
    combos.sort(key=lambda combo: -sum(math.prod(shape) for shape in combo))
    return [dict(zip(names, combo)) for combo in combos[:MAX_ENUMERATED]]


def _value_sizes(emulator: Any, shapes: dict[str, tuple[int, ...]], names: list[str]) -> dict[str, int]:
    """Bytes of each named value the program computes for zeros of `shapes` (at its declared dtype)."""
    import numpy as np

    inputs = {name: np.zeros(shape, dtype=np.float32) for name, shape in shapes.items()}
    computed = emulator.values(inputs, names)
    return {name: array.size for name, array in computed.items()}


def largest_shape_peaks(path: Path, spec: Any) -> tuple[list[FunctionPeak], str]:
    """The `main` function's activation peak at the largest allowed input shape, and that shape in words."""
    from mlbench.backends.coreml.emulate import EmulationError, Emulator, UnsupportedOps, load_program

    function = spec.mlProgram.functions.get("main")
    if function is None:
        raise NotEstimable("a flexible program without a main function")
    try:
        emulator = Emulator(load_program(path))
    except (UnsupportedOps, EmulationError, ValueError) as exc:
        raise NotEstimable(f"flexible shapes are sized by running the program, which failed: {exc}") from None
    types: dict[str, Any] = {nv.name: nv.type for nv in function.inputs}
    block = function.block_specializations[opset_of(function)]
    for op in block.operations:
        for out in op.outputs:
            types[out.name] = out.type
    best: tuple[FunctionPeak, dict[str, tuple[int, ...]]] | None = None
    for shapes in candidate_shapes(spec):
        try:
            elements = _value_sizes(emulator, shapes, list(types))
        except (EmulationError, ValueError, RuntimeError) as exc:
            raise NotEstimable(f"flexible shapes are sized by running the program, which failed: {exc}") from None
        elements.update({name: math.prod(shape) for name, shape in shapes.items()})

        def size(name: str, value_type: Any, elements: dict[str, int] = elements) -> int:
            if value_type.WhichOneof("type") not in ("tensorType", "stateType"):
                return 0  # a list or tuple: its tensors are values of their own
            dtype, _shape = tensor_info(value_type)
            bits = next((b for short, b in _MIL_DTYPES.values() if short == dtype), 0)
            if name not in elements:
                raise NotEstimable(f"the value {name} was not computed at the largest shape")
            return (elements[name] * bits + 7) // 8

        values, op_names = function_values(function, opset_of(function), size)
        peak = peak_of(values, op_names, "main")
        if best is None or peak.bytes > best[0].bytes:
            best = (peak, shapes)
    if best is None:
        raise NotEstimable("the program has no input to size")
    words = ", ".join(f"{name} {list(shape)}" for name, shape in best[1].items())
    return [best[0]], f"the largest allowed input shape ({words})"
