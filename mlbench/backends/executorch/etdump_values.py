"""Each portable kernel's output, as the ExecuTorch runtime computed it: ETDump's debug buffer, read with the
devtools Inspector and named by the ATen node it was lowered from.

A program loaded with ``enable_etdump=True`` and a ``debug_buffer_size`` logs every kernel's output; the
Inspector pairs those events with the ETRecord's ATen program by debug handle. Its public form of that
pairing, ``calculate_numeric_gap``, also runs the ATen program on the ETRecord's representative inputs,
which mlbench's exports do not store, so this reads the two steps it is made of
(``_resolve_reference_graph``: the ATen graph with the runtime's debug handles propagated back;
``_get_runtime_intermediate_outputs_and_op_names``: the logged outputs by debug handle; executorch 1.5.1).
A delegate call logs only its own outputs (one event for the whole partition): those are left out.

The Inspector refuses an ETDump whose runs logged different values, so each sample is a fresh load.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mlbench.backends.capture import captured, quiet_native_stderr

__all__ = ["MIN_DEBUG_BUFFER", "kernel_outputs"]

MIN_DEBUG_BUFFER = 16 << 20
"""Bytes of the debug buffer at least (it must hold every logged output of one run)."""


def kernel_outputs(pte: Path, etrecord: Path, samples: list[list[Any]],
                   buffer_bytes: int) -> list[dict[str, np.ndarray]]:
    """Per sample: ATen node name -> its kernel's output (floating outputs of portable kernels only)."""
    from executorch.devtools import Inspector
    from executorch.runtime import Runtime

    found: list[dict[str, np.ndarray]] = []
    for inputs in samples:
        with tempfile.TemporaryDirectory(prefix="mlbench-etdump-") as folder:
            etdump, buffer = Path(folder) / "run.etdp", Path(folder) / "debug.bin"
            with quiet_native_stderr():
                program = Runtime.get().load_program(str(pte), enable_etdump=True,
                                                     debug_buffer_size=max(buffer_bytes, MIN_DEBUG_BUFFER))
                method = program.load_method("forward")  # held until the ETDump is written
                method.execute([t.detach().cpu().contiguous() for t in inputs])
                program.write_etdump_result_to_file(str(etdump), str(buffer))
                del method
            with captured([], ["executorch"]):
                inspector = Inspector(etdump_path=str(etdump), etrecord=str(etrecord), debug_buffer_path=str(buffer))
                graph, _ = inspector._resolve_reference_graph(None, False)
                outputs, _ = inspector._get_runtime_intermediate_outputs_and_op_names()
        names = {n.meta.get("debug_handle"): n.name for n in graph.graph.nodes if n.op == "call_function"}
        values: dict[str, np.ndarray] = {}
        for handles, (value, _count) in outputs.items():
            if len(handles) != 1 or handles[0] not in names:
                continue  # a delegate call (its partition's handles) or an op the ATen graph lacks
            array = _floating(value[0] if isinstance(value, (list, tuple)) and value else value)
            if array is not None:
                values[names[handles[0]]] = array
        found.append(values)
    return found


def _floating(value: Any) -> np.ndarray | None:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().double().numpy()
    return None


def program_bytes(program: Any) -> int:
    """Bytes of every node's traced output in an ExportedProgram: what one run's debug buffer must hold."""
    total = 0
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if hasattr(value, "numel") and hasattr(value, "element_size"):
            total += int(value.numel()) * int(value.element_size())
    return 2 * total
