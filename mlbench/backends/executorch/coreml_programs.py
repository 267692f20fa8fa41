"""The Core ML programs inside a Core ML-delegated `.pte`, analysed as a Core ML target's package is.

ExecuTorch's ``CoreMLBackend.preprocess`` saves each partition as ``lowered_module/model.mlpackage`` (plus
``metadata.json`` and ``debug_info.json``) and stores that folder, flattened by
``executorchcoreml.flatten_directory_contents``, as the delegate's processed blob. At export the blobs are
unflattened beside the ``.pte`` (``coreml/<n>/``); at measurement each package goes through mlbench's Core ML
analysis (the same code a ``backend: coreml`` variant uses, imported from that backend's folder: a Core ML
program is analysed one way in mlbench), giving:

- ``coreml_delegate.<device>``: the estimated share of the embedded programs' cost on each Core ML device
  (the placement rules at compute units ``all``, ExecuTorch's default), weighted across partitions by FLOPs;
- ``latency.estimated.<chip>`` for the target's ``estimate_on`` chips: the sum over the partitions (each is
  its own Core ML prediction, with its fixed cost). Ops left to portable kernels are not in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlbench.records import Metric

FOLDER = "coreml"
PACKAGE = "lowered_module/model.mlpackage"
COMPUTE_UNITS = "all"  # CoreMLBackend.generate_compile_specs' default compute unit (ct.ComputeUnit.ALL)
PREFIX = "coreml_delegate."
NOT_IN_ESTIMATE = "the Core ML partitions only: ops left to ExecuTorch's portable kernels are not in it"


def save_programs(graph_module: Any, folder: Path) -> list[str]:
    """Unflatten every CoreMLBackend call's processed blob under ``folder/coreml/<n>/``; the packages' paths
    relative to ``folder``, in program order."""
    from executorch.backends.apple.coreml import executorchcoreml

    paths: list[str] = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or "executorch_call_delegate" not in str(node.target):
            continue
        lowered = getattr(graph_module, node.args[0].target)
        if lowered.backend_id != "CoreMLBackend":
            continue
        out = folder / FOLDER / str(len(paths))
        out.mkdir(parents=True, exist_ok=True)
        if not executorchcoreml.unflatten_directory_contents(bytes(lowered.processed_bytes), str(out)):
            raise RuntimeError(f"the Core ML delegate's program {len(paths)} could not be unpacked")
        paths.append(f"{FOLDER}/{len(paths)}/{PACKAGE}")
    return paths


def analyse_programs(folder: Path, packages: list[str], estimate_on: list[str]) -> tuple[dict[str, Metric],
                                                                                         dict[str, Any]]:
    """Metrics (``coreml_delegate.<device>``, ``latency.estimated.<chip>``) and details (per program: its
    placement and totals) of the embedded Core ML programs."""
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.apple.latency import latency_metrics
    from mlbench.backends.apple.placement import estimate_placement

    programs: list[dict[str, Any]] = []
    shares: dict[str, float] = {}
    weights = 0.0
    latency: dict[str, Metric] = {}
    for relative in packages:
        analysis = analyse_package(folder / relative)
        placement = estimate_placement(analysis, COMPUTE_UNITS)
        weight = float(analysis.totals.flops or 0) or 1.0
        weights += weight
        for device, share in (placement.by_cost or placement.by_count).items():
            shares[device] = shares.get(device, 0.0) + weight * share
        estimates, parts = latency_metrics(analysis, placement, estimate_on)
        for name, metric in estimates.items():
            latency[name] = _add(latency.get(name), metric)
        programs.append({"package": relative, "compute_units": COMPUTE_UNITS, "precision": analysis.precision,
                         "compute_ops": analysis.totals.compute_ops, "flops": analysis.totals.flops,
                         "placement": placement.model_dump(mode="json", exclude={"ops"}),
                         "latency_estimate": parts})
    metrics = {PREFIX + device: Metric.estimated(share / weights, "ratio") for device, share in shares.items()}
    metrics.update(latency)
    return metrics, {"programs": programs, "latency_estimate_covers": NOT_IN_ESTIMATE}


def _add(total: Metric | None, metric: Metric) -> Metric:
    if total is None or total.value is None or metric.value is None:
        return metric if total is None else total
    return total.model_copy(update={"value": total.value + metric.value})
