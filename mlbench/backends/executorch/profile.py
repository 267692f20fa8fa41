"""Per-operator time from ETDump, read with ExecuTorch's Inspector, and the placement of a program.

The profiled program is a separate load with event tracing on (``Runtime.load_program(enable_etdump=True)``):
tracing costs time on every call, so it never shares a program with the latency loop. Of the events of the
`Execute` block, the top-level calls (``DELEGATE_CALL``: one delegate partition; ``OPERATOR_CALL``: one
portable kernel) make the table and sum to the method's own time; the events a delegate logs inside its
call (XNNPACK's operators) are kept apart as `inner` rows. Times are the median over the profiled runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mlbench.backends.capture import captured
from mlbench.backends.executorch.export import DELEGATE_DEVICES, PORTABLE, native_quiet
from mlbench.records import OpPlacement, Placement

METHOD = "Method::execute"
TOP_LEVEL = {"DELEGATE_CALL", "OPERATOR_CALL"}


def _ms(event: Any) -> float | None:
    perf = event.perf_data
    return None if perf is None else float(perf.p50)


def op_time_table(pte: Path, etrecord: Path | None, inputs: list[Any], runs: int) -> dict[str, Any]:
    """Run `pte` `runs` times with event tracing and return the per-operator table."""
    from executorch.runtime import Runtime

    with native_quiet():
        program = Runtime.get().load_program(str(pte), enable_etdump=True, debug_buffer_size=0)
        method = program.load_method("forward")
    for _ in range(runs):
        method.execute(inputs)
    with tempfile.TemporaryDirectory(prefix="mlbench-etdump-") as folder:
        etdump = Path(folder) / "run.etdp"
        program.write_etdump_result_to_file(str(etdump), str(Path(folder) / "debug.bin"))
        from executorch.devtools import Inspector

        sink: list[str] = []
        with captured(sink, ["executorch"]):
            inspector = Inspector(etdump_path=str(etdump),
                                  etrecord=str(etrecord) if etrecord is not None and etrecord.exists() else None)
        return _table(inspector, runs)


def _table(inspector: Any, runs: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    inner: list[dict[str, Any]] = []
    total = None
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            ms = _ms(event)
            if event.name == METHOD:
                total = ms
            elif event.name in TOP_LEVEL:
                backend = event.delegate_backend_name
                device = DELEGATE_DEVICES.get(backend, backend) if backend else PORTABLE
                rows.append({"name": event.name, "op_types": [t.removeprefix("aten.").removesuffix(".default")
                                                               for t in event.op_types or []],
                             "device": device, "time_ms": ms})
            elif event.is_delegated_op:
                inner.append({"name": event.name, "device": DELEGATE_DEVICES.get(event.delegate_backend_name,
                                                                                  event.delegate_backend_name),
                              "time_ms": ms})
    summed = sum(r["time_ms"] or 0.0 for r in rows)
    for row in [*rows, *inner]:
        row["share"] = (row["time_ms"] or 0.0) / summed if summed else 0.0
    by_device: dict[str, float] = {}
    for row in rows:
        by_device[row["device"]] = by_device.get(row["device"], 0.0) + (row["time_ms"] or 0.0)
    return {"method": "ExecuTorch ETDump (Inspector), median of the profiled runs", "runs": runs,
            "total_ms": total, "calls_ms": summed, "by_device_ms": by_device,
            "by_call": sorted(rows, key=lambda r: -(r["time_ms"] or 0.0)),
            "inner": sorted(inner, key=lambda r: -(r["time_ms"] or 0.0))}


def build_placement(summary: dict[str, Any], delegate: str, op_time: dict[str, Any] | None) -> Placement:
    """The partition is a fact of the lowered program (`measured` on any OS); by_cost weighs each device
    by its measured time where ETDump ran."""
    ops = summary["ops"]
    count = len(ops)
    counts: dict[str, int] = {}
    for op in ops:
        counts[op["device"]] = counts.get(op["device"], 0) + 1
    by_count = {device: n / count for device, n in counts.items()}
    by_cost = None
    if op_time and op_time.get("calls_ms"):
        by_cost = {d: ms / op_time["calls_ms"] for d, ms in op_time["by_device_ms"].items()}
    preferred = None if delegate == "portable" else delegate
    left = summary["portable_ops"]
    note = (f"left to portable kernels: {', '.join(left)}" if left and preferred else None)
    return Placement(
        source="measured", method="ExecuTorch partition (lowered graph)" + (" + ETDump time" if by_cost else ""),
        preferred=preferred, compute_ops=count, constants=0, by_count=by_count, by_cost=by_cost,
        cost_basis="time" if by_cost else None, switches=summary["switches"], note=note,
        ops=[OpPlacement(name=op["name"], op_type=op["op_type"], device=op["device"], provider=op["provider"],
                         reason=(f"not taken by the {delegate} partitioner"
                                 if preferred and op["device"] == PORTABLE else None))
             for op in ops])
