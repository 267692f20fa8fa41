"""Export a PyTorch module to an ExecuTorch program (`.pte`) for one delegate, precision and recipe.

``torch.export.export`` → (quantization) → ``executorch.exir.to_edge_transform_and_lower`` with the
delegate's partitioner → ``to_executorch()``. The artifact is a folder: ``model.pte`` (what a device
loads), ``model.etrecord`` (ExecuTorch's debug record, for the Inspector) and ``program.json``, the
partition read from the lowered graph (which nodes each delegate took, the ops left to portable
kernels, the boundaries, the planned memory). An op the delegate rejects stays on portable kernels: it
is counted, not an error.

Quantization recipes (xnnpack only) follow ExecuTorch's XNNPACK documentation:
- ``int8_dynamic``: PT2E, ``XNNPACKQuantizer().set_global(get_symmetric_quantization_config(
  is_per_channel=True, is_dynamic=True))``, ``prepare_pt2e`` → one calibration call → ``convert_pt2e``;
- ``8da4w``: torchao ``quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,  # type: ignore[attr-defined]
  weight_granularity=PerGroup(group_size)))`` on the ``nn.Linear`` layers whose input width the group divides.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from mlbench.backends.capture import captured, distinct_lines
from mlbench.backends.executorch.cost import node_flops
from mlbench.errors import ReportableError, first_line, one_line

FOLDER = "program"
PTE = "model.pte"
ETRECORD = "model.etrecord"
SUMMARY = "program.json"
EXPORT_PATH = "torch.export → to_edge_transform_and_lower → to_executorch"
MISSING = "executorch is not installed; install it with pip install 'mlbench-ondevice[executorch]'"
PORTABLE = "cpu"
"""Where an op left to ExecuTorch's portable kernels runs, in the Placement vocabulary (the CPU, outside any delegate)."""
DELEGATE_DEVICES = {"XnnpackBackend": "xnnpack", "CoreMLBackend": "coreml"}
"""ExecuTorch backend ids → the device names placement summaries use."""
NOT_COMPUTE = {"getitem", "executorch_call_delegate"}


class ExecutorchExportError(ReportableError):
    """A step of the export failed: the message names the step and its first error line."""


@dataclass
class PteExportResult:
    artifact: Path
    export_path: str
    fallback_reason: str | None
    seconds: float
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def require_executorch() -> None:
    """One line instead of an ImportError where the extra is missing."""
    pytree = logging.getLogger("torch.utils._pytree")  # torchao's import warns there about an Enum registration
    level = pytree.level
    pytree.setLevel(logging.ERROR)
    try:
        import executorch.exir  # noqa: F401
    except ImportError as exc:
        raise ExecutorchExportError(f"{MISSING} ({one_line(str(exc), 120)})") from None
    finally:
        pytree.setLevel(level)


def _half_module(module: Any) -> Any:
    """The module in float16, taking and giving float32 tensors (casts inside the program)."""
    import torch

    class Half(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> Any:
            cast = [a.half() if a.is_floating_point() else a for a in args]
            out = self.inner(*cast)
            if isinstance(out, (tuple, list)):
                return tuple(o.float() if o.is_floating_point() else o for o in out)
            return out.float() if out.is_floating_point() else out

    return Half(copy.deepcopy(module).half()).eval()


def _quantize(module: Any, args: tuple, recipe: dict[str, Any]) -> Any:
    import torch

    if recipe["scheme"] == "int8_dynamic":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                     is_dynamic=True))
        graph = torch.export.export(module, args).module()
        graph = prepare_pt2e(graph, quantizer)
        graph(*args)  # calibration: dynamic activations need no statistics, one call records the observers
        return convert_pt2e(graph)
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    group = recipe.get("group_size") or 32
    quantized = copy.deepcopy(module)
    quantize_(quantized, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,  # type: ignore[attr-defined]
                                                               weight_granularity=PerGroup(group)),
              filter_fn=lambda m, _fqn: isinstance(m, torch.nn.Linear) and m.in_features % group == 0)
    return quantized


def _partitioners(delegate: str, precision: str) -> list[Any]:
    if delegate == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
    if delegate == "coreml":
        import coremltools as ct
        from executorch.backends.apple.coreml.compiler import CoreMLBackend
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner

        specs = CoreMLBackend.generate_compile_specs(
            compute_precision=ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32)
        return [CoreMLPartitioner(compile_specs=specs)]
    return []


HALF_PREFIX = "inner."
"""Module paths inside the float16 wrapper start with this (``_half_module``)."""


def program_before_lowering(module: Any, example_inputs: Sequence[Any], *, delegate: str, precision: str,
                            recipe: dict[str, Any] | None) -> Any:
    """The ExportedProgram ``export_pte`` hands the partitioner (float16 wrapper, quantization recipe,
    ``torch.export``): what localization runs op by op."""
    import torch

    args = tuple(example_inputs)
    module = module.eval()
    if precision == "float16" and delegate != "coreml":
        module = _half_module(module)
    with captured([], ["torch.export", "executorch", "torchao"], stdout=True), torch.no_grad():
        if recipe is not None:
            module = _quantize(module, args, recipe)
        return torch.export.export(module, args)


def export_pte(module: Any, example_inputs: Sequence[Any], *, delegate: str, precision: str,
               recipe: dict[str, Any] | None, dest: Path) -> PteExportResult:
    """Write ``dest/program/`` (model.pte, model.etrecord, program.json); raise ExecutorchExportError
    (one line naming the step) when a step fails."""
    require_executorch()
    import torch
    from executorch.exir import to_edge_transform_and_lower

    args = tuple(example_inputs)
    module = module.eval()
    if precision == "float16" and delegate != "coreml":  # Core ML's own compute precision does it there
        module = _half_module(module)
    messages: list[str] = []
    t0 = time.perf_counter()
    step = "quantization"
    try:
        with captured(messages, ["torch.export", "executorch", "coremltools", "torchao"], stdout=True), \
                torch.no_grad():
            if recipe is not None:
                module = _quantize(module, args, recipe)
            step = "torch.export"
            program = torch.export.export(module, args)
            step = "to_edge_transform_and_lower"
            edge = to_edge_transform_and_lower(program, partitioner=_partitioners(delegate, precision),
                                               generate_etrecord=True)
            step = "to_executorch"
            et_program = edge.to_executorch()
    except Exception as exc:  # noqa: BLE001 - every step's failure is the variant's one-line reason
        raise ExecutorchExportError(f"ExecuTorch export failed at {step}: {first_line(exc)}") from None
    folder = dest / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PTE).write_bytes(et_program.buffer)
    try:
        et_program.get_etrecord().save(str(folder / ETRECORD))
    except Exception as exc:  # noqa: BLE001 - the per-op table then has no node names, nothing else is lost
        messages.append(f"no ETRecord: {first_line(exc)}")
    summary = partition_summary(et_program.exported_program().graph_module,
                                et_program.executorch_program.execution_plan[0])
    if delegate == "coreml":
        from mlbench.backends.executorch.coreml_programs import save_programs

        try:
            summary["coreml_programs"] = save_programs(et_program.exported_program().graph_module, folder)
        except Exception as exc:  # noqa: BLE001 - the .pte stands; only the embedded programs' analysis is lost
            messages.append(f"the Core ML delegate's programs were not unpacked: {first_line(exc)}")
    (folder / SUMMARY).write_text(json.dumps(summary, indent=1))
    return PteExportResult(artifact=folder, export_path=EXPORT_PATH, fallback_reason=None,
                           seconds=time.perf_counter() - t0, summary=summary,
                           warnings=distinct_lines(messages, lambda m: one_line(m, 200)))


def _op_name(node: Any) -> str:
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    for prefix in ("aten.", "dim_order_ops."):
        name = name.removeprefix(prefix)
    return name.split(".")[0]  # the op without its overload (cumsum.out, eq.Scalar_out → cumsum, eq)


def _is_compute(node: Any) -> bool:
    """A call that computes: not a delegate's output unpacking, not the memory planner's alloc/view/free."""
    return (node.op == "call_function" and _op_name(node) not in NOT_COMPUTE
            and getattr(node.target, "__module__", "") != "executorch.exir.memory")


def _compute_nodes(graph_module: Any) -> list[Any]:
    return [n for n in graph_module.graph.nodes if _is_compute(n)]


def partition_summary(graph_module: Any, plan: Any) -> dict[str, Any]:
    """The partition, read from the lowered graph in program order: one row per compute node (the nodes
    inside each delegate call expanded from its original graph), the ops left to portable kernels, the
    boundaries, and the planned memory (ExecuTorch's memory planning: the non-constant buffers)."""
    ops: list[dict[str, Any]] = []
    delegates: list[dict[str, Any]] = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if _op_name(node) == "executorch_call_delegate":
            lowered = getattr(graph_module, node.args[0].target)
            device = DELEGATE_DEVICES.get(lowered.backend_id, lowered.backend_id)
            inner = _compute_nodes(lowered.original_module.graph_module)
            delegates.append({"backend": lowered.backend_id, "nodes": len(inner)})
            ops += [{"name": n.name, "op_type": _op_name(n), "device": device, "provider": lowered.backend_id,
                     "flops": node_flops(n, _op_name(n))} for n in inner]
        elif _is_compute(node):
            ops.append({"name": node.name, "op_type": _op_name(node), "device": PORTABLE, "provider": "portable kernel",
                        "flops": node_flops(node, _op_name(node))})
    switches = sum(1 for a, b in pairwise(ops) if a["device"] != b["device"])
    left = sorted({op["op_type"] for op in ops if op["device"] == PORTABLE})
    buffers = [int(size) for size in plan.non_const_buffer_sizes]
    return {"ops": ops, "delegates": delegates, "portable_ops": left, "switches": switches,
            "planned_memory": sum(buffers), "operators": [op.name for op in plan.operators], "flops": flops_shares(ops)}


def flops_shares(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of the FLOPs (Core ML cost model conventions) per device, over the ops whose FLOPs are
    known; how many ops that is."""
    known = [op for op in ops if op["flops"] is not None]
    total = sum(op["flops"] for op in known)
    by_device: dict[str, float] = {}
    for op in known:
        by_device[op["device"]] = by_device.get(op["device"], 0.0) + (op["flops"] / total if total else 0.0)
    return {"total": total, "known_ops": len(known), "ops": len(ops), "by_device": by_device}
