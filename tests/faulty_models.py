"""Models that misbehave on purpose, for the isolation tests (never in examples/).

`Faulty(fault, after)` computes like a small linear model for its first `after` calls of forward (the
eager reference made while loading), then: `segfault` reads address 0, `exit` calls os._exit(3),
`hang` sleeps for ever, `allocate` allocates 1 GB blocks without bound, `raise` raises a
multi-line error, `spin` spins in C code holding the GIL (a regular expression that backtracks for
ever), `spawn` starts `sleep 3000` and hangs, `junk` writes junk to every socket and pipe of its
process and to stdout, then computes on, `hang_once` hangs only while `path` does not exist (and
creates it). Calls are counted per process: a fresh child starts again from zero. `spin`, `spawn`
and `hang_once` first write the process's pid (and the grandchild's) to `path`.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
import subprocess
import time
from pathlib import Path

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


def _spin(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    re.match(r"(a+)+$", "a" * 64 + "b")  # years of backtracking in C, the GIL held throughout


def _spawn(path: str) -> None:
    grandchild = subprocess.Popen(["sleep", "3000"])
    Path(path).write_text(f"{os.getpid()} {grandchild.pid}")
    _hang()


def _junk() -> None:
    os.write(1, b"junk on stdout\n")
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode) or stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"junk" * 4)
        except OSError:
            pass


def _hang_once(path: str) -> None:
    if not Path(path).exists():
        Path(path).write_text(str(os.getpid()))
        _hang()


FAULTS = {"segfault": _segfault, "exit": _exit, "hang": _hang, "allocate": _allocate, "raise": _raise,
          "spin": _spin, "spawn": _spawn, "junk": _junk, "hang_once": _hang_once}


class Faulty(torch.nn.Module):
    def __init__(self, fault: str, after: int = 1, path: str | None = None) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.fault, self.after, self.calls, self.path = fault, after, 0, path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.after:
            fault = FAULTS[self.fault]
            fault(self.path) if self.path is not None else fault()  # type: ignore[call-arg]
        return self.linear(x)


class ExitOnBuild(torch.nn.Module):
    """Exits its process as soon as it is built (on any device): the export order's model size
    runs it in a child, which dies, never the coordinator."""

    def __init__(self) -> None:
        super().__init__()
        os._exit(3)


class HangOnBuild(torch.nn.Module):
    """Hangs in its constructor (on any device): every artifact of it would wait out limits.export_s."""

    def __init__(self) -> None:
        super().__init__()
        _hang()
