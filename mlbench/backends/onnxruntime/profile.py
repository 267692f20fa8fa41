"""ONNX Runtime's profiling output → placement (which provider ran each node) and per-operator time.

With ``SessionOptions.enable_profiling`` a session writes a Chrome-trace JSON list of events when
``end_profiling()`` is called (onnxruntime/core/common/profiler.cc). The ones used here:

* ``cat == "Session"``, ``name == "model_run"``: one per ``run()``, with ``ts`` and ``dur`` in µs;
* ``cat == "Node"``, ``name == "<node name>_kernel_time"``: one per node per run, with ``dur`` in µs
  and ``args.provider`` (the execution provider that ran it), ``args.op_name`` (its op type),
  ``args.output_type_shape`` and ``args.thread_scheduling_stats`` (``""`` when the session has no
  intra-op thread pool, else a main thread plus one ``sub_threads`` entry per pool thread).

Nodes are those of the graph ONNX Runtime actually ran: after its optimizations (fusions such as
Conv+Relu, layout changes such as NCHWc with their Reorder nodes), and with each provider's fused
partitions as single nodes. A node event is assigned to the run whose ``model_run`` span holds it,
so warmup runs are dropped by index, not guessed.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from mlbench.backends.onnxruntime.target import provider_device
from mlbench.records import OpPlacement, Placement

KERNEL_SUFFIX = "_kernel_time"
METHOD = "onnxruntime profiling"


class ProfileError(ValueError):
    """The profile does not hold what placement needs (no runs, or no node events in them)."""


@dataclass
class NodeProfile:
    """One node of the executed graph, averaged over the profiled runs."""

    name: str
    op_type: str
    provider: str
    time_ms: float  # mean per run
    output_dtype: str | None = None

    @property
    def device(self) -> str:
        return provider_device(self.provider)


@dataclass
class Profile:
    nodes: list[NodeProfile]  # in execution order
    runs: int  # profiled runs the figures average over
    skipped_runs: int  # runs recorded but thrown away (warmup)
    threads: int | None  # intra-op pool size seen by the profiler (1 = no pool)
    run_ms: list[float] = field(default_factory=list)  # each kept run's model_run duration

    @property
    def total_ms(self) -> float:
        return sum(n.time_ms for n in self.nodes)


def load_events(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        events = json.load(handle)
    if not isinstance(events, list):
        raise ProfileError(f"{path}: not an onnxruntime profile (expected a JSON list of events)")
    return events


def _threads(stats: Any) -> int | None:
    if stats == "":
        return 1
    if isinstance(stats, dict) and isinstance(stats.get("sub_threads"), dict):
        return 1 + len(stats["sub_threads"])
    return None


def _output_dtype(args: dict[str, Any]) -> str | None:
    shapes = args.get("output_type_shape")
    if isinstance(shapes, list) and shapes and isinstance(shapes[0], dict) and shapes[0]:
        return next(iter(shapes[0]))
    return None


def parse_profile(events: list[dict[str, Any]], *, skip_runs: int = 0) -> Profile:
    """Nodes of the runs after the first ``skip_runs``, each with its provider and mean time."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    if len(runs) <= skip_runs:
        raise ProfileError(f"the profile holds {len(runs)} runs; {skip_runs} warmup runs leave none")
    starts = [r["ts"] for r in runs]
    kept = range(skip_runs, len(runs))
    order: list[str] = []
    info: dict[str, dict[str, Any]] = {}
    totals: dict[str, float] = {}
    threads: int | None = None
    for event in sorted((e for e in events if e.get("cat") == "Node"), key=lambda e: e["ts"]):
        name = event.get("name", "")
        if not name.endswith(KERNEL_SUFFIX):
            continue  # fence events of older versions carry no kernel time
        run = bisect_right(starts, event["ts"]) - 1
        if run < 0 or event["ts"] > runs[run]["ts"] + runs[run]["dur"]:
            continue  # outside any run (e.g. a node run while the session initialised)
        if run < skip_runs:
            continue
        args = event.get("args", {})
        node = name[: -len(KERNEL_SUFFIX)]
        if node not in info:
            order.append(node)
            info[node] = {"op_type": args.get("op_name", "?"), "provider": args.get("provider", "?"),
                          "dtype": _output_dtype(args)}
            totals[node] = 0.0
        totals[node] += float(event.get("dur", 0))
        seen = _threads(args.get("thread_scheduling_stats"))
        if seen is not None:
            threads = max(threads or 0, seen)
    if not order:
        raise ProfileError("the profiled runs hold no node events")
    count = len(kept)
    nodes = [NodeProfile(name=n, op_type=info[n]["op_type"], provider=info[n]["provider"],
                         time_ms=totals[n] / count / 1000.0, output_dtype=info[n]["dtype"]) for n in order]
    return Profile(nodes=nodes, runs=count, skipped_runs=skip_runs, threads=threads,
                   run_ms=[runs[i]["dur"] / 1000.0 for i in kept])


def _by_type_text(nodes: list[NodeProfile]) -> str:
    counts = Counter(n.op_type for n in nodes)
    return ", ".join(f"{op} ×{k}" for op, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def placement_note(profile: Profile, preferred_provider: str, precision: str) -> str | None:
    """Plain words on what the fractions hide: fallbacks to the CPU provider, float32 nodes in a float16 graph."""
    nodes = profile.nodes
    parts: list[str] = []
    if preferred_provider != "CPUExecutionProvider":
        on_cpu = [n for n in nodes if n.provider == "CPUExecutionProvider"]
        on_preferred = [n for n in nodes if n.provider == preferred_provider]
        if not on_preferred:
            parts.append(f"no node ran on {preferred_provider}; all {len(nodes)} ran on "
                         + ", ".join(sorted({n.provider for n in nodes})))
        elif on_cpu:
            parts.append(f"{len(on_cpu)} of {len(nodes)} nodes fell back from {preferred_provider} to the CPU "
                         f"provider: {_by_type_text(on_cpu)}")
    if precision == "float16":
        in_float32 = [n for n in nodes if n.output_dtype == "float"]
        if in_float32:
            parts.append(f"float16 graph, but {len(in_float32)} of {len(nodes)} executed nodes produce float32 "
                         f"(where a provider has no float16 kernel, ONNX Runtime inserts Casts and runs the node "
                         f"in float32): {_by_type_text(in_float32)}")
    return "; ".join(parts) or None


def build_placement(profile: Profile, *, constants: int, preferred_provider: str, precision: str) -> Placement:
    """Placement (measured) from a parsed profile; ``constants`` counts the graph's initializers and Constant nodes."""
    nodes = profile.nodes
    total = len(nodes)
    count_by: Counter[str] = Counter(n.device for n in nodes)
    time_by: dict[str, float] = {}
    for n in nodes:
        time_by[n.device] = time_by.get(n.device, 0.0) + n.time_ms
    total_ms = profile.total_ms
    switches = sum(1 for a, b in pairwise(nodes) if a.device != b.device)
    return Placement(
        source="measured",
        method=METHOD,
        preferred=provider_device(preferred_provider),
        compute_ops=total,
        constants=constants,
        by_count={d: k / total for d, k in count_by.items()},
        by_cost={d: t / total_ms for d, t in time_by.items()} if total_ms > 0 else None,
        cost_basis="time" if total_ms > 0 else None,
        switches=switches,
        note=placement_note(profile, preferred_provider, precision),
        ops=[OpPlacement(name=n.name, op_type=n.op_type, device=n.device, provider=n.provider, time_ms=n.time_ms)
             for n in nodes],
    )


def op_time_tables(profile: Profile) -> dict[str, Any]:
    """Per-operator time: by op type and by node, slowest first (means per run, in ms)."""
    total = profile.total_ms
    share = (lambda t: t / total) if total > 0 else (lambda t: 0.0)
    by_type: dict[str, dict[str, Any]] = {}
    for n in profile.nodes:
        row = by_type.setdefault(n.op_type, {"op_type": n.op_type, "nodes": 0, "time_ms": 0.0, "providers": {}})
        row["nodes"] += 1
        row["time_ms"] += n.time_ms
        row["providers"][n.provider] = row["providers"].get(n.provider, 0) + 1
    type_rows = sorted(by_type.values(), key=lambda r: (-r["time_ms"], r["op_type"]))
    for row in type_rows:
        row["share"] = share(row["time_ms"])
    node_rows = [{"name": n.name, "op_type": n.op_type, "provider": n.provider, "device": n.device,
                  "output_dtype": n.output_dtype, "time_ms": n.time_ms, "share": share(n.time_ms)}
                 for n in sorted(profile.nodes, key=lambda n: -n.time_ms)]
    return {
        "source": "measured",
        "method": METHOD,
        "runs": profile.runs,
        "warmup_runs": profile.skipped_runs,
        "unit": "ms",
        "total_ms": total,
        "run_ms": profile.run_ms,
        "by_type": type_rows,
        "by_node": node_rows,
    }
