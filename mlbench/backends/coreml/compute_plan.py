"""Measured Core ML placement from `MLComputePlan` (macOS 14.4+, coremltools ≥ 8.1).

The plan needs a compiled `.mlmodelc` (an `.mlpackage` path aborts the whole process,
apple/coremltools#2757), so the plan is read in a child process: a crash there costs one variant's
placement, never the sweep. The child reads the compiled model the measurement already made (or
compiles the package itself, for `mlbench inspect`) and writes its operations as one JSON document
to a file of its own (compile_model lets the compiler print on stdout, so stdout carries nothing
the parent reads); the parent maps them onto the static analysis. Written against coremltools' documented API; it cannot run on
Linux, so everything around it (parsing, mapping, summaries) is tested there.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlbench.records import OpPlacement, Placement

PLAN_TIMEOUT_S = 600


def compute_plan_available() -> str | None:
    """None when this machine can build compute plans, else the reason it cannot."""
    if sys.platform != "darwin":
        return "compute plans need macOS 14.4 or later"
    version = tuple(int(p) for p in (platform.mac_ver()[0] or "0").split(".")[:2] if p.isdigit())
    if version < (14, 4):
        return f"compute plans need macOS 14.4 or later (this is macOS {platform.mac_ver()[0]})"
    return None


def plan_operations(model: Path, compute_units: str) -> list[dict[str, Any]]:  # pragma: no cover - macOS only
    """The compute plan of `model` (a compiled `.mlmodelc`, or a package to compile), read in a child process."""
    with tempfile.TemporaryDirectory(prefix="mlbench-plan-") as tmp:
        out = Path(tmp) / "plan.json"
        result = subprocess.run(
            [sys.executable, "-m", "mlbench.backends.coreml.compute_plan", str(model), compute_units, tmp, str(out)],
            capture_output=True, text=True, timeout=PLAN_TIMEOUT_S, check=False,
        )
        return read_plan(out, result.returncode, result.stderr)


def read_plan(out: Path, returncode: int, stderr: str) -> list[dict[str, Any]]:
    """The operations the child wrote to `out`; a failure as one line (the child's last stderr line)."""
    if returncode != 0 or not out.is_file():
        lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
        how = f"exit {returncode}" if returncode >= 0 else f"killed by signal {-returncode}"
        raise RuntimeError(f"compute plan failed ({how}): {lines[-1] if lines else 'no message'}")
    document = json.loads(out.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or not isinstance(document.get("operations"), list):
        raise RuntimeError("compute plan failed: the child wrote no operations")
    return document["operations"]


def placement_from_plan(ops: list[dict[str, Any]], compute_units: str, precision: str) -> Placement:
    """The compute plan's operations as a Placement: constants apart, names normalised."""
    from mlbench.backends.apple.placement import ANE, PREFERRED, is_data_op, normalise_op_type, summarise

    placed: list[OpPlacement] = []
    constants = 0
    for op in ops:
        op_type = normalise_op_type(op["operator"])
        if is_data_op(op_type):
            constants += 1
            continue
        device, supported = op.get("preferred"), op.get("supported")
        reason = None
        if PREFERRED[compute_units] == ANE and device not in (None, ANE):
            reason = ("not supported on the Neural Engine" if supported is not None and ANE not in supported
                      else f"Core ML preferred the {device.replace('_', ' ')} (the Neural Engine supports it)")
        placed.append(OpPlacement(name=op.get("output") or op_type, op_type=op_type, device=device,
                                  supported=supported, cost=op.get("cost"), reason=reason))
    note = None
    unknown = sum(op.device is None for op in placed)
    if PREFERRED[compute_units] == ANE:
        off = [op for op in placed if op.device not in (None, ANE)]  # no device named: unknown, not "off"
        if precision == "FLOAT32" and len(off) == len(placed):
            note = ("No operation reached the Neural Engine because the program is float32: Core ML runs only "
                    "float16 programs there. Export with `precision: float16` to use it.")
        elif off:
            kinds: dict[str, int] = {}
            for placed_op in off:
                kind = f"{placed_op.op_type} ({placed_op.reason})"
                kinds[kind] = kinds.get(kind, 0) + 1
            note = (f"{len(off)} of {len(placed)} compute operations run off the Neural Engine: "
                    + "; ".join(f"{k} ×{n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:6]) + ".")
    if unknown:
        note = ((note + " ") if note else "") + (
            f"Core ML named no device for {unknown} operation{'s' if unknown != 1 else ''} (e.g. casts at the "
            "boundary): counted apart as unknown.")
    has_cost = any(op.cost is not None for op in placed)
    return summarise(placed, source="measured", method="MLComputePlan", preferred=PREFERRED[compute_units],
                     constants=constants, note=note, cost_basis="estimated_cost" if has_cost else None)


def _device_name(device: Any) -> str | None:  # pragma: no cover - macOS only
    from coremltools.models.compute_device import MLCPUComputeDevice, MLGPUComputeDevice, MLNeuralEngineComputeDevice

    for cls, name in ((MLNeuralEngineComputeDevice, "neural_engine"), (MLGPUComputeDevice, "gpu"),
                      (MLCPUComputeDevice, "cpu")):
        if isinstance(device, cls):
            return name
    return None


def _walk(plan: Any, block: Any) -> Any:  # pragma: no cover - macOS only
    for operation in block.operations:
        usage = plan.get_compute_device_usage_for_mlprogram_operation(operation)
        cost = plan.get_estimated_cost_for_mlprogram_operation(operation)
        yield {
            "operator": operation.operator_name,
            "output": operation.outputs[0].name if operation.outputs else None,
            "preferred": _device_name(usage.preferred_compute_device) if usage else None,
            "supported": [_device_name(d) for d in usage.supported_compute_devices] if usage else None,
            "cost": cost.weight if cost is not None else None,
        }
        for nested in operation.blocks:
            yield from _walk(plan, nested)


def write_plan(model: str, compute_units: str, workdir: str, out: str) -> None:
    """In the child: read the compute plan of `model` and write {"operations": [...]} to `out` (atomically)."""
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan
    from coremltools.models.utils import compile_model

    compiled = model if model.rstrip("/").endswith(".mlmodelc") else compile_model(
        model, str(Path(workdir) / "model.mlmodelc"))
    plan = MLComputePlan.load_from_path(compiled, compute_units=getattr(ct.ComputeUnit, compute_units.upper()))
    program = plan.model_structure.program
    if program is None:
        raise SystemExit("not an ML program: compute plans of neural-network models are not read")
    function = program.functions.get("main") or next(iter(program.functions.values()))
    operations = list(_walk(plan, function.block))
    partial = Path(f"{out}.partial")
    partial.write_text(json.dumps({"operations": operations}), encoding="utf-8")
    partial.replace(out)


if __name__ == "__main__":  # pragma: no cover - the child process
    write_plan(*sys.argv[1:5])
