"""Real input samples from `values: path/to/inputs.npz` (numpy only: validation reads them too).

The array named like the input holds either one sample (the input's shape) or N samples along a
leading axis; every input of a model that gives values must give as many samples.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mlbench.config.models import ModelInput, ModelSpec

_KINDS = {"float32": "f", "float16": "f", "bfloat16": "f", "int64": "iu", "int32": "iu", "bool": "b"}


class ValuesError(ValueError):
    """A `values:` file that does not fit its input: one line."""


def read_values(item: ModelInput, base_dir: Path) -> np.ndarray:
    """The input's samples as an array of shape [N, *shape]. Raises ValuesError (one line)."""
    assert item.values is not None
    path = item.values if item.values.is_absolute() else base_dir / item.values
    name = item.values.name
    if not path.exists():
        raise ValuesError(f"values file not found: {path}")
    if not path.is_file():
        raise ValuesError(f"values file is not a regular file: {path}")
    if not zipfile.is_zipfile(path):  # np.load would call any other bytes "pickled data"
        raise ValuesError(f"{name} is not an .npz archive (numpy.savez writes one)")
    try:
        with np.load(path, allow_pickle=False) as data:
            if item.name not in data.files:
                raise ValuesError(f"{name} has no array '{item.name}' (it has: {', '.join(data.files) or 'none'})")
            array = data[item.name]
    except (OSError, ValueError) as exc:
        if isinstance(exc, ValuesError):
            raise
        raise ValuesError(f"cannot read {name}: {' '.join(str(exc).split())[:160]}") from None
    shape = item.default_shape
    if list(array.shape) == shape:
        array = array[None]
    elif list(array.shape[1:]) != shape or array.shape[0] < 1:
        raise ValuesError(f"'{item.name}' in {name} has shape {list(array.shape)}; expected {shape} or [N, "
                          f"{', '.join(map(str, shape))}]")
    if array.dtype.kind not in _KINDS[item.dtype]:
        raise ValuesError(f"'{item.name}' in {name} holds {array.dtype}; the input is {item.dtype}")
    if item.kind == "image" and (array.min() < 0 or array.max() > 255):
        raise ValuesError(f"'{item.name}' in {name} holds values outside 0-255; an image input takes pixels")
    return array


def check_values(spec: ModelSpec, base_dir: Path) -> list[tuple[int, str]]:
    """(input index, message) for every `values:` problem of a model, sample counts included."""
    problems: list[tuple[int, str]] = []
    counts: dict[int, int] = {}
    for index, item in enumerate(spec.inputs):
        if item.values is None:
            continue
        try:
            counts[index] = len(read_values(item, base_dir))
        except ValuesError as exc:
            problems.append((index, str(exc)))
    if not problems and len(set(counts.values())) > 1:
        first = next(iter(counts))
        for index, count in counts.items():
            if count != counts[first]:
                problems.append((index, f"{count} sample(s) here but {counts[first]} in inputs[{first}]; "
                                 "every input's values need as many"))
    return problems
