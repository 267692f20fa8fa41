"""A saved package's program and seeded inputs of its declared shapes, for commands that run a package
without a pipeline (`mlbench inspect --verify`, `--against`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["readable_program", "seeded_feeds"]


def readable_program(path: Path) -> Any:
    """The package's program, or one UserError line when the interpreter cannot read it."""
    from mlbench.backends.coreml.emulate import load_program
    from mlbench.errors import UserError

    try:
        return load_program(path)
    except Exception as exc:  # noqa: BLE001 - a package the interpreter cannot read is the user's to know
        raise UserError(f"the interpreter cannot read this package: {exc}", file=path) from None


def seeded_feeds(program: Any, seed: int, path: Path) -> dict[str, Any]:
    """Seeded inputs of the program's declared shapes and types (standard normal floats, small integers)."""
    import numpy as np

    from mlbench.errors import UserError

    generator = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, info in program.inputs:
        if info.kind == "state":
            continue
        if info.shape is None or None in info.shape:
            raise UserError(f"input '{name}' has a flexible shape; seeded inputs need fixed shapes", file=path)
        shape = tuple(int(d) for d in info.shape if d is not None)
        dtype = {"fp32": np.float32, "fp16": np.float16, "fp64": np.float64}.get(info.dtype or "")
        feeds[name] = (generator.standard_normal(shape).astype(dtype) if dtype is not None
                       else generator.integers(0, 10, size=shape).astype(np.int32))
    return feeds
