"""Which PyTorch module and source line each op of a Core ML program came from, kept in the package.

coremltools records where each MIL op came from while converting (``Operation.scopes``:
``TORCHSCRIPT_MODULE_TYPE``/``TORCHSCRIPT_MODULE_NAME`` on the ``torch.jit.trace`` path,
``EXIR_STACK_TRACE``/``EXIR_DEBUG_HANDLE`` on the ``torch.export`` path; ``mil/scope.py``), but
``MLModel.save`` writes no scope into the MIL proto: a saved package names ops only
(``softmax_17_cast_fp16``). So the exporter reads the scopes from the in-memory program right after
conversion and stores, per op name, the module path, its class, the torch op and the calling line in
the package's metadata (``mlbench.op_origins``, compact JSON), where the interpreter finds it later.

- torch.export: every FX node gets ``meta["debug_handle"] = index`` before converting (coremltools
  copies it into ``EXIR_DEBUG_HANDLE``); the node's ``nn_module_stack`` and ``stack_trace`` give the rest.
- torch.jit.trace: the scope holds the TorchScript module hierarchy (``0(Att).q(Linear)``: containers
  such as ModuleList leave their own name out) and the node's kind. The traced graph's nodes, read
  here, carry the same hierarchy with the full scope name (``__module.layers.0.q``) and the Python
  stack: the n-th node of a (hierarchy, kind) is paired with the n-th converted one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlbench.backends.source_frames import (
    module_path,
    op_kind,
    script_frames,
    trace_frames,
    user_frame,
    wrapper_prefix,
)
from mlbench.localization import OpOrigin

__all__ = ["ORIGINS_KEY", "decode_origins", "encode_origins", "export_origins", "mark_export_nodes",
           "package_origins", "program_origins", "trace_node_origins"]

ORIGINS_KEY = "mlbench.op_origins"
_ORIGINS_VERSION = 1


# ------------------------------------------------------------------ torch.export path


def mark_export_nodes(program: Any, prefix: str = "") -> dict[int, OpOrigin]:
    """Give every node of the ExportedProgram's graph a debug handle (coremltools keeps it in each MIL op's
    scope) and return the origin each handle stands for (module paths without the wrapper's ``prefix``)."""
    origins: dict[int, OpOrigin] = {}
    for index, node in enumerate(program.graph.nodes):
        node.meta["debug_handle"] = index
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        path, module_type = ("", None)
        if stack:
            path, cls = list(stack.values())[-1]
            module_type = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
        file, line = user_frame(trace_frames(node.meta.get("stack_trace")))
        op = str(getattr(node.target, "__name__", node.target)).split(".")[0]
        origins[index] = OpOrigin(module=module_path(str(path), prefix), module_type=module_type, op=op_kind(op), file=file, line=line)
    return origins


def export_origins(mlmodel: Any, by_handle: dict[int, OpOrigin]) -> dict[str, OpOrigin]:
    from coremltools.converters.mil.mil.scope import ScopeSource

    found: dict[str, OpOrigin] = {}
    for op in _mil_ops(mlmodel):
        handle = (op.scopes.get(ScopeSource.EXIR_DEBUG_HANDLE) or [None])[0]
        if isinstance(handle, int) and handle in by_handle:
            found[op.name] = by_handle[handle]
    return found


# ------------------------------------------------------------------ torch.jit.trace path


def trace_node_origins(traced: Any, module: Any) -> dict[tuple[str, str], list[OpOrigin]]:
    """(TorchScript module hierarchy, op kind) -> the origins of its nodes, in graph order."""
    types = {name: type(m) for name, m in module.named_modules()}
    prefix = wrapper_prefix(module)
    table: dict[tuple[str, str], list[OpOrigin]] = {}
    for node in traced.inlined_graph.nodes():
        kind = node.kind()
        if not kind.startswith("aten::"):
            continue
        path = node.scopeName().split("/")[-1].removeprefix("__module").lstrip(".")
        cls = types.get(path)
        file, line = user_frame(script_frames(node.sourceRange()))
        origin = OpOrigin(module=module_path(path, prefix), module_type=f"{cls.__module__}.{cls.__qualname__}" if cls else None,
                          op=op_kind(kind), file=file, line=line)
        table.setdefault((node.getModuleHierarchy(), op_kind(kind)), []).append(origin)
    return table


def program_origins(mlmodel: Any, table: dict[tuple[str, str], list[OpOrigin]]) -> dict[str, OpOrigin]:
    """Op name -> origin for the converted trace: its ops' scopes matched to the traced graph's nodes."""
    from coremltools.converters.mil.mil.scope import ScopeSource

    seen: dict[tuple[str, str], list[str]] = {}
    found: dict[str, OpOrigin] = {}
    for op in _mil_ops(mlmodel):
        names = list(op.scopes.get(ScopeSource.TORCHSCRIPT_MODULE_NAME) or [])
        kinds = list(op.scopes.get(ScopeSource.TORCHSCRIPT_MODULE_TYPE) or [])
        if not names or len(names) != len(kinds):
            continue
        hierarchy = ".".join(f"{n}({t})" for n, t in zip(names[:-1], kinds[:-1]))
        key = (hierarchy, op_kind(kinds[-1]))
        candidates = table.get(key)
        if not candidates:
            continue
        order = seen.setdefault(key, [])
        if names[-1] not in order:
            order.append(names[-1])
        position = order.index(names[-1])
        paths = {c.module for c in candidates}
        if position < len(candidates):
            found[op.name] = candidates[position]
        elif len(paths) == 1:  # the module is certain, the line is not
            found[op.name] = candidates[0].model_copy(update={"file": None, "line": None})
    return found


def _mil_ops(mlmodel: Any) -> list[Any]:
    program = getattr(mlmodel, "_mil_program", None)
    if program is None:
        return []
    ops: list[Any] = []

    def walk(block: Any) -> None:
        for op in block.operations:
            ops.append(op)
            for inner in op.blocks:
                walk(inner)

    for function in program.functions.values():
        walk(function)
    return ops


# ------------------------------------------------------------------ storage


def encode_origins(origins: dict[str, OpOrigin]) -> str:
    """Compact JSON: a table of distinct origins and, per op name, its row."""
    rows: list[list[Any]] = []
    index: dict[tuple, int] = {}
    ops: dict[str, int] = {}
    for name, origin in origins.items():
        row = (origin.module, origin.module_type, origin.op, origin.file, origin.line)
        if row not in index:
            index[row] = len(rows)
            rows.append(list(row))
        ops[name] = index[row]
    return json.dumps({"v": _ORIGINS_VERSION, "origins": rows, "ops": ops}, separators=(",", ":"))


def decode_origins(text: str | None) -> dict[str, OpOrigin]:
    """The stored origins; empty for a package without them (or of another version)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
        if data.get("v") != _ORIGINS_VERSION:
            return {}
        rows = [OpOrigin(module=r[0], module_type=r[1], op=r[2], file=r[3], line=r[4]) for r in data["origins"]]
        return {name: rows[i] for name, i in data["ops"].items()}
    except (ValueError, KeyError, IndexError, TypeError):
        return {}


def package_origins(path: str | Path) -> dict[str, OpOrigin]:
    """The origins stored in a saved package's metadata (empty when it has none)."""
    from mlbench.backends.apple.coremltools_messages import import_coremltools
    from mlbench.backends.coreml.emulate.program import spec_file

    import_coremltools()
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    spec.ParseFromString(spec_file(Path(path))[0].read_bytes())
    return decode_origins(spec.description.metadata.userDefined.get(ORIGINS_KEY))
