"""Where a float16 program first passes float16's range: the interpreter run once more, watching
each op's float16 outputs before they are rounded (a value beyond 65504 rounds to inf)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mlbench.backends.coreml.emulate.executor import Emulator, _Step
from mlbench.overflow import FLOAT16_MAX, OpOverflow

__all__ = ["first_float16_overflow"]


class _Watching(Emulator):
    """The prepared program of another emulator, run with a watch on its float16 stores."""

    def __init__(self, prepared: Emulator) -> None:  # shares the prepared state, prepares nothing
        self.__dict__.update(prepared.__dict__)
        self.found: OpOverflow | None = None

    def _store(self, step: _Step, results: list[Any]) -> list[Any]:
        if self.found is None:
            for value, (name, dtype) in zip(results, step.outputs):
                if dtype != "fp16" or not isinstance(value, torch.Tensor) or not value.is_floating_point():
                    continue
                finite = value[torch.isfinite(value)]
                reaches = float(finite.abs().max()) if finite.numel() else 0.0
                if reaches > FLOAT16_MAX:
                    self.found = OpOverflow(step.op.type, step.op.name or name, reaches)
                    break
        return super()._store(step, results)


def first_float16_overflow(emulator: Emulator, inputs: dict[str, np.ndarray]) -> OpOverflow | None:
    """The first op (in program order) whose float16 output passes float16's range for `inputs`;
    None when none does, or when the emulator does not round to float16 (precision `float32`)."""
    if emulator.precision != "declared":
        return None
    watching = _Watching(emulator)
    watching.run(inputs)
    return watching.found
