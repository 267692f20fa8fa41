"""State: the iOS18 ops that read and write a stateful program's ``ct.StateType`` inputs (a KV cache).

A state input is bound to a ``StateCell`` (a mutable holder of one tensor) instead of a value; the cells
outlive a call, so consecutive ``Emulator.run(..., state=...)`` calls see each other's writes, as
consecutive predictions with one ``MLState`` do on a Mac. ``make_state(program)`` makes zeroed cells for
the program's declared states; several functions of one multifunction program can share them.

- ``read_state(input)``: a copy of the state's current value;
- ``write_state(input, data)``: the state becomes ``data`` (stored in the state's dtype); no outputs;
- ``coreml_update_state(state, value)``: coremltools' fused form (write, then return the value); the
  saved package lowers it to ``write_state`` + ``read_state``, but a program built in memory has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mlbench.backends.coreml.emulate.precision import from_numpy, store, to_numpy
from mlbench.backends.coreml.emulate.registry import KernelError, kernel

__all__ = ["EmulatedState", "StateCell", "make_state"]


@dataclass
class StateCell:
    """One state's value between calls, kept as the executor keeps its dtype (``precision.store``)."""

    name: str
    dtype: str | None
    shape: tuple[int, ...]
    value: torch.Tensor
    precision: str = "declared"

    def write(self, data: torch.Tensor) -> None:
        if tuple(data.shape) != self.shape:
            raise KernelError(f"state {self.name!r} has shape {list(self.shape)}; "
                              f"a write of shape {list(data.shape)} does not fit")
        self.value = store(data.clone(), self.dtype, self.precision)


class EmulatedState(dict[str, StateCell]):
    """The states of one generation (by name); like ``MLState``, made once and passed to every call."""

    def read(self, name: str) -> np.ndarray:
        cell = self[name]
        return to_numpy(cell.value, cell.dtype)

    def assign(self, name: str, array: np.ndarray) -> None:
        self[name].write(from_numpy(np.asarray(array)))


def make_state(program: Any, precision: str = "declared") -> EmulatedState:
    """Zeroed cells for each state input the program declares."""
    state = EmulatedState()
    for name, info in program.states:
        shape = tuple(int(d) for d in info.shape or ())
        state[name] = StateCell(name, info.dtype, shape, torch.zeros(shape, dtype=torch.float32), precision)
    return state


def _cell(value: Any) -> StateCell:
    if not isinstance(value, StateCell):
        raise KernelError("a state op's input must be a state (a ct.StateType input of the program)")
    return value


@kernel("read_state")
def read_state(input, **_):
    return _cell(input).value.clone()


@kernel("write_state")
def write_state(input, data, **_):
    _cell(input).write(data)
    return ()


@kernel("coreml_update_state")
def coreml_update_state(state, value, **_):
    _cell(state).write(value)
    return _cell(state).value.clone()
