"""A reference interpreter for Core ML ML programs: run a saved ``.mlpackage`` on any OS.

    from mlbench.backends.coreml.emulate import emulate_package, unsupported_ops, UnsupportedOps
    outputs = emulate_package("model.mlpackage", {"image": array})   # {output name: ndarray}

The program is read from the package's spec and its own weight blobs (what ships), then run op by
op with CPU kernels (torch), one per MIL op type (``registry.kernel``). Precision: see
``EMULATION_NOTE`` (quote it in reports) and ``precision.PRECISIONS``.

Modules: ``blobs`` (weight files), ``program`` (spec -> ops), ``registry`` (op type -> kernel),
``kernels_*`` (one family each), ``precision`` (storage rounding), ``executor`` (running).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench.backends.coreml.emulate.blobs import CorruptPackage
from mlbench.backends.coreml.emulate.executor import EmulationError, Emulator, UnsupportedOps, find_unsupported
from mlbench.backends.coreml.emulate.kernels import supported_op_types
from mlbench.backends.coreml.emulate.precision import EMULATION_NOTE, PRECISIONS
from mlbench.backends.coreml.emulate.program import Program, load_program, normalise_op_type

__all__ = [
    "EMULATION_NOTE",
    "PRECISIONS",
    "CorruptPackage",
    "EmulationError",
    "EmulationResult",
    "Emulator",
    "Program",
    "UnsupportedOps",
    "emulate",
    "emulate_package",
    "load_program",
    "normalise_op_type",
    "supported_op_types",
    "unsupported_ops",
]

PackageLike = str | Path | Program | Emulator


@dataclass
class EmulationResult:
    outputs: dict[str, np.ndarray]  # by the program's output names, in declared order
    load_seconds: float  # reading the package, decoding weights, folding constexpr ops
    run_seconds: float  # executing the ops once
    precision: str  # a key of PRECISIONS
    note: str = EMULATION_NOTE


def _program(package: PackageLike) -> Program:
    if isinstance(package, Emulator):
        return package.program
    if isinstance(package, Program):
        return package
    return load_program(package)


def unsupported_ops(package: PackageLike) -> list[str]:
    """The op types (sorted, opset prefixes removed) in the program that have no kernel."""
    return find_unsupported(_program(package))


def emulate(package: PackageLike, inputs: dict[str, np.ndarray], *, precision: str = "declared") -> EmulationResult:
    """Run the program once; outputs plus load and run times. Raises UnsupportedOps before running."""
    started = time.perf_counter()
    if isinstance(package, Emulator) and package.precision == precision:
        emulator = package
    else:
        emulator = Emulator(_program(package), precision)
    loaded = time.perf_counter()
    outputs = emulator.run(inputs)
    return EmulationResult(outputs, loaded - started, time.perf_counter() - loaded, precision)


def emulate_package(package: PackageLike, inputs: dict[str, np.ndarray], *,
                    precision: str = "declared") -> dict[str, np.ndarray]:
    """The program's outputs for ``inputs`` (by input name; cast to the declared input dtypes)."""
    return emulate(package, inputs, precision=precision).outputs
