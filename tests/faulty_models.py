"""Models that misbehave on purpose, for the isolation tests (never in examples/).

`Faulty(fault, after)` computes like a small linear model for its first `after` calls of forward (the
eager reference made while loading), then: `segfault` reads address 0, `exit` calls os._exit(3),
`hang` sleeps for ever, `allocate` allocates 1 GB blocks without bound, `raise` raises a
multi-line error. Calls are counted per process: a fresh child starts again from zero.
"""

from __future__ import annotations

import ctypes
import os
import time

import torch


def _segfault() -> None:
    ctypes.string_at(0)


def _exit() -> None:
    os._exit(3)


def _hang() -> None:
    while True:
        time.sleep(0.05)


def _allocate() -> None:
    blocks = []
    while True:
        blocks.append(torch.empty(2**28))


def _raise() -> None:
    raise ValueError("first line | with a pipe\nsecond line <b>bold</b> `code`")


FAULTS = {"segfault": _segfault, "exit": _exit, "hang": _hang, "allocate": _allocate, "raise": _raise}


class Faulty(torch.nn.Module):
    def __init__(self, fault: str, after: int = 1) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.fault, self.after, self.calls = fault, after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.after:
            FAULTS[self.fault]()
        return self.linear(x)


class ExitOnBuild(torch.nn.Module):
    """Exits its process as soon as it is built (on any device): the export order's model size
    runs it in a child, which dies, never the coordinator."""

    def __init__(self) -> None:
        super().__init__()
        os._exit(3)
