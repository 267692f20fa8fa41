"""Per-operator time from ETDump, read with ExecuTorch's Inspector, and the placement of a program.

The profiled program is a separate load with event tracing on (``Runtime.load_program(enable_etdump=True)``):
tracing costs time on every call, so it never shares a program with the latency loop. Of the events of the
`Execute` block, the top-level calls (``DELEGATE_CALL``: one delegate partition; ``OPERATOR_CALL``: one
portable kernel) make the table and sum to the method's own time; the events a delegate logs inside its
call (XNNPACK's operators) are kept apart as `inner` rows. Times are the median over the profiled runs.

What the table covers, paired run by run (so one noisy run does not skew it): ``coverage`` is the median over
the runs of each run's summed calls over that run's ``Method::execute`` (ETDump's own clock: the method's
dispatch between calls is the rest), ``wall_coverage`` the same over the run's wall time from Python
(``time.perf_counter`` around ``method.execute``; ``wall_ms`` its median). The difference ``outside_ms`` =
``wall_ms - total_ms`` is what ETDump never sees: the Python binding around ``Method::execute`` (inputs
copied in, outputs wrapped) and, on a busy machine, the time the calling thread waits to be scheduled again
(measured 2026-12-01 at load 11 on 2 cores: 20-40 ms outside a 3-6 ms method, with 7-15 ms of process CPU
time in all).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mlbench.backends.capture import captured, quiet_native_stderr
from mlbench.backends.executorch.export import DELEGATE_DEVICES, PORTABLE
from mlbench.records import OpPlacement, Placement

METHOD = "Method::execute"
TOP_LEVEL = {"DELEGATE_CALL", "OPERATOR_CALL"}


def _ms(event: Any) -> float | None:
    perf = event.perf_data
    return None if perf is None else float(perf.p50)


def op_time_table(pte: Path, etrecord: Path | None, inputs: list[Any], runs: int) -> dict[str, Any]:
    """Run `pte` `runs` times with event tracing and return the per-operator table."""
    from executorch.runtime import Runtime

    with quiet_native_stderr():
        program = Runtime.get().load_program(str(pte), enable_etdump=True, debug_buffer_size=0)
        method = program.load_method("forward")
    wall: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        method.execute(inputs)
        wall.append((time.perf_counter() - t0) * 1e3)
    with tempfile.TemporaryDirectory(prefix="mlbench-etdump-") as folder:
        etdump = Path(folder) / "run.etdp"
        program.write_etdump_result_to_file(str(etdump), str(Path(folder) / "debug.bin"))
        from executorch.devtools import Inspector

        sink: list[str] = []
        with captured(sink, ["executorch"]):
            inspector = Inspector(etdump_path=str(etdump),
                                  etrecord=str(etrecord) if etrecord is not None and etrecord.exists() else None)
        return _table(inspector, runs, wall)


def _table(inspector: Any, runs: int, wall: list[float] | None = None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    inner: list[dict[str, Any]] = []
    total = None
    per_run = [0.0] * runs  # each run's summed top-level calls, paired with its method and wall times
    method_runs: list[float] = []
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            ms = _ms(event)
            if event.name == METHOD:
                total = ms
                method_runs = [float(v) for v in (event.perf_data.raw if event.perf_data is not None else [])]
            elif event.name in TOP_LEVEL:
                backend = event.delegate_backend_name
                device = DELEGATE_DEVICES.get(backend, backend) if backend else PORTABLE
                rows.append({"name": event.name, "op_types": [t.removeprefix("aten.").removesuffix(".default")
                                                               for t in event.op_types or []],
                             "device": device, "time_ms": ms})
                raw = list(event.perf_data.raw) if event.perf_data is not None else []
                for index, value in enumerate(raw[:runs]):
                    per_run[index] += float(value)
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
    wall_ms = statistics.median(wall) if wall else None
    return {"method": "ExecuTorch ETDump (Inspector), median of the profiled runs", "runs": runs,
            "total_ms": total, "calls_ms": summed, "wall_ms": wall_ms,
            "outside_ms": None if wall_ms is None or total is None else wall_ms - total,
            "coverage": _paired(per_run, method_runs), "wall_coverage": _paired(per_run, wall or []),
            "by_device_ms": by_device,
            "by_call": sorted(rows, key=lambda r: -(r["time_ms"] or 0.0)),
            "inner": sorted(inner, key=lambda r: -(r["time_ms"] or 0.0))}


def _paired(calls: list[float], whole: list[float]) -> float | None:
    """Median over the runs of calls / whole, run by run."""
    ratios = [c / w for c, w in zip(calls, whole) if w > 0]
    return statistics.median(ratios) if ratios else None


def build_placement(summary: dict[str, Any], delegate: str, op_time: dict[str, Any] | None) -> Placement:
    """The partition is a fact of the lowered program (`measured` on any OS); by_cost weighs each device
    by its measured time where ETDump ran."""
    ops = summary["ops"]
    count = len(ops)
    counts: dict[str, int] = {}
    for op in ops:
        counts[op["device"]] = counts.get(op["device"], 0) + 1
    by_count = {device: n / count for device, n in counts.items()}
    flops = summary.get("flops") or {}
    by_cost = None
    if flops.get("total"):  # the cost model's FLOPs, as a Core ML placement weighs its ops
        by_cost = {device: flops["by_device"].get(device, 0.0) for device in counts}
        by_cost.update({d: share for d, share in flops["by_device"].items() if d not in by_cost})
    timed = bool(op_time and op_time.get("calls_ms"))
    preferred = None if delegate == "portable" else delegate
    left = summary["portable_ops"]
    notes = []
    if left and preferred:
        notes.append(f"left to portable kernels: {', '.join(left)}")
    if by_cost is not None and flops.get("known_ops") != count:
        notes.append(f"cost share by FLOPs over the {flops.get('known_ops')} of {count} ops whose FLOPs the Core ML "
                     "cost model knows (data movement counts none)")
    if timed:
        assert op_time is not None
        notes.append("measured time per device (ETDump): " + ", ".join(
            f"{d} {100 * ms / op_time['calls_ms']:.0f}%" for d, ms in op_time["by_device_ms"].items()))
    total_flops = flops.get("total") or 0
    return Placement(
        source="measured", method="ExecuTorch partition (lowered graph)" + (" + ETDump time" if timed else ""),
        preferred=preferred, compute_ops=count, constants=0, by_count=by_count, by_cost=by_cost,
        cost_basis="flops" if by_cost else None, switches=summary["switches"], note="; ".join(notes) or None,
        ops=[OpPlacement(name=op["name"], op_type=op["op_type"], device=op["device"], provider=op["provider"],
                         cost=(op["flops"] / total_flops if total_flops and op.get("flops") is not None else None),
                         reason=(f"not taken by the {delegate} partitioner"
                                 if preferred and op["device"] == PORTABLE else None))
             for op in ops])
