"""Per-op error of an ExecuTorch variant's program against its reference program, both as exported before
lowering (``torch.export``, after the float16 wrapper and the quantization recipe) and run node by node by
PyTorch's own kernels: every intermediate kept, so each op's share can be measured as Core ML's is.

Why the program before lowering: ExecuTorch's runtime logs intermediate outputs in ETDump's debug buffer
for its portable kernels, but a delegate (XNNPACK) logs only its call's outputs, so the ops inside a
partition have no runtime values. Running the program the partitioner took, op by op, gives every op's
value on any delegate; what it leaves out is the delegate kernels' own rounding (`emulated`).

Three kinds of run, on the same seeded inputs (as for Core ML, ``backends/coreml/localize/programs.py``):

1. both programs side by side: each paired op's accumulated error, SNR and what it lost over its inputs;
2. the reference, with each paired variant op also computed on the reference's values (its inputs cast to
   the variant's dtypes, the variant's own weights): the error each op makes by itself ("local");
3. the reference with one op's (or one module's ops') outputs computed the variant's way: its share of
   the final output's error energy, for the ops and modules with the largest local error.

Ops are paired by node name (torch.export names a node after its op: ``linear_1``); a cast or a
(de)quantization the reference lacks stands for its input.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlbench.backends.executorch.export import _op_name
from mlbench.backends.localize_graph import NO_SHARES, Node, localize_nodes
from mlbench.backends.source_frames import module_path, op_kind, trace_frames, user_frame
from mlbench.localization import ErrorLocalization, ErrorSum, ModuleError, OpOrigin

__all__ = ["SHARE_BUDGET", "ExportedRun", "localize_exported", "program_origins"]

SHARE_BUDGET = 24
"""Injected runs (3.) at most: half for ops, the rest for modules (as Core ML's)."""
STANDS_FOR_INPUT = ("_to_copy", "to", "type_as", "clone", "alias", "contiguous")
"""Ops that change a value's dtype or storage only: a variant op of these the reference lacks stands for its input."""
HIDDEN = ("getitem", "choose_qparams", "_assert")
"""Ops whose outputs are not values of the model (a quantization's scale and zero point, a check): left out of
the table, as are ops computing from constants only (a weight's dequantization: the weight is the op's own data)."""


WRAPPER_FILE = (Path(__file__).parent / "export.py").resolve()


def _stands_for_input(name: str) -> bool:
    return name in STANDS_FOR_INPUT or name.startswith(("quantize", "dequantize"))


def _hidden(name: str) -> bool:
    return name.startswith(HIDDEN) or name.startswith("quantize")  # a quantized value is an integer tensor


def _tensor(value: Any) -> Any:
    import torch

    return value if isinstance(value, torch.Tensor) else None


def _array(value: Any) -> np.ndarray | None:
    import torch

    tensor = _tensor(value)
    if tensor is None or type(tensor) not in (torch.Tensor, torch.nn.Parameter) or not tensor.is_floating_point():
        return None  # an integer, or a quantized weight's tensor subclass (its dequantization is an op)
    return tensor.detach().to("cpu").double().numpy()


class ExportedRun:
    """An ExportedProgram run node by node: its parameters and buffers fed to the lifted graph's placeholders."""

    def __init__(self, program: Any) -> None:
        from torch.export.graph_signature import InputKind

        self.program = program
        self.nodes = list(program.graph.nodes)
        self.constants: dict[str, Any] = {}
        self.user_inputs: list[str] = []
        for spec in program.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                self.user_inputs.append(spec.arg.name)
            elif spec.target in program.state_dict:
                self.constants[spec.arg.name] = program.state_dict[spec.target]
            elif spec.target in program.constants:
                self.constants[spec.arg.name] = program.constants[spec.target]
        self.by_name = {n.name: n for n in self.nodes}
        self.output_names = [a.name if hasattr(a, "name") else None
                             for a in next(n for n in self.nodes if n.op == "output").args[0]]

    def computes(self) -> list[Any]:
        return [n for n in self.nodes if n.op == "call_function"]

    def run(self, inputs: list[Any], replace: Callable[[Any, dict[str, Any]], Any] | None = None
            ) -> dict[str, Any]:
        """Every node's value; ``replace(node, env)`` may give a call's value instead of computing it."""
        from torch.fx.node import map_arg

        env: dict[str, Any] = {}
        feeds = dict(zip(self.user_inputs, inputs))
        for node in self.nodes:
            if node.op == "placeholder":
                env[node.name] = self.constants[node.name] if node.name in self.constants else feeds[node.name]
            elif node.op == "get_attr":
                env[node.name] = getattr(self.program.graph_module, str(node.target))
            elif node.op == "call_function":
                value = replace(node, env) if replace is not None else None
                if value is None:
                    args, kwargs = map_arg((node.args, node.kwargs), lambda a: env[a.name])
                    value = node.target(*args, **kwargs)
                env[node.name] = value
        return env

    def outputs(self, env: dict[str, Any]) -> list[np.ndarray | None]:
        return [_array(env.get(name)) if name else None for name in self.output_names]


def program_origins(program: Any, prefix: str = "") -> dict[str, OpOrigin]:
    """Node name -> the module path (without ``prefix``: mlbench's wrappers), class, op and source line
    torch.export recorded for it."""
    found: dict[str, OpOrigin] = {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        path, module_type = "", None
        if stack:
            path, cls = list(stack.values())[-1]
            module_type = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
        file, line = user_frame(trace_frames(node.meta.get("stack_trace")))
        if file is not None and Path(file).resolve() == WRAPPER_FILE:  # the float16 wrapper's casts: not the user's
            file, line = None, None
        found[node.name] = OpOrigin(module=module_path(str(path), prefix), module_type=module_type,
                                    op=op_kind(_op_name(node)), file=file, line=line)
    return found


@dataclass
class _Pairing:
    pairs: dict[str, str | None]  # variant value -> the reference value it is compared with (table)
    stands: dict[str, str | None]  # variant value -> the reference value it stands for (casts followed)
    direct: dict[str, str]  # reference node -> the variant node of the same name (computed the variant's way)


def _pair(variant: ExportedRun, reference: ExportedRun) -> _Pairing:
    pairs: dict[str, str | None] = dict(zip(variant.user_inputs, reference.user_inputs))
    stands = dict(pairs)
    direct: dict[str, str] = {}
    for node in variant.computes():
        name = _op_name(node)
        twin = reference.by_name.get(node.name)
        if twin is not None and twin.op == "call_function" and _op_name(twin) == name:
            stands[node.name] = pairs[node.name] = twin.name
            direct[twin.name] = node.name
            continue
        source = node.args[0] if node.args and hasattr(node.args[0], "name") else None
        stood = stands.get(source.name) if source is not None and _stands_for_input(name) else None
        stands[node.name] = stood
        pairs[node.name] = stood if not _hidden(name) else None
    return _Pairing(pairs, stands, direct)


class _Injector:
    """Reference runs with some nodes computed the variant's way, on the current run's values."""

    def __init__(self, variant: ExportedRun, reference: ExportedRun, pairing: _Pairing) -> None:
        self.variant, self.reference, self.pairing = variant, reference, pairing

    def own(self, variant_node: Any, env: dict[str, Any]) -> Any:
        """The variant node's value computed from the reference run's ``env``: a paired input cast to the
        variant's dtype, a constant the variant's own, an unpaired input computed the variant's way too."""
        from torch.fx.node import map_arg

        memo: dict[str, Any] = {}

        def value(node: Any) -> Any:
            if node.name in memo:
                return memo[node.name]
            stood = self.pairing.stands.get(node.name)
            if node.op == "placeholder" and node.name in self.variant.constants:
                found = self.variant.constants[node.name]
            elif stood is not None and (node.op == "placeholder" or not _stands_for_input(_op_name(node))):
                found = _like(env[stood], node)
            elif node.op == "call_function":
                args, kwargs = map_arg((node.args, node.kwargs), value)
                found = node.target(*args, **kwargs)
            else:
                found = getattr(self.variant.program.graph_module, str(node.target))
            memo[node.name] = found
            return found

        args, kwargs = map_arg((variant_node.args, variant_node.kwargs), value)
        return variant_node.target(*args, **kwargs)

    def run(self, inputs: list[Any], replaced: set[str]) -> dict[str, Any]:
        def replace(node: Any, env: dict[str, Any]) -> Any:
            if node.name not in replaced:
                return None
            return _like(self.own(self.variant.by_name[self.pairing.direct[node.name]], env), node)

        return self.reference.run(inputs, replace)

    def local(self, inputs: list[Any], sums: dict[str, ErrorSum]) -> None:
        """Accumulate each directly paired op's own error (computed on the reference's values)."""

        def observe(node: Any, env: dict[str, Any]) -> Any:
            if node.name in self.pairing.direct:
                from torch.fx.node import map_arg

                args, kwargs = map_arg((node.args, node.kwargs), lambda a: env[a.name])
                expected = node.target(*args, **kwargs)
                mine = _array(self.own(self.variant.by_name[self.pairing.direct[node.name]], env))
                want = _array(expected)
                if mine is not None and want is not None and mine.size == want.size:
                    sums.setdefault(node.name, ErrorSum()).add(mine, want)
                return expected
            return None

        self.reference.run(inputs, observe)


def _like(value: Any, node: Any) -> Any:
    """``value`` in the dtype ``node`` computes (its traced fake value), tuples element by element."""
    expected = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        expected = expected if isinstance(expected, (tuple, list)) else [None] * len(value)
        return type(value)(_cast(v, e) for v, e in zip(value, expected))
    return _cast(value, expected)


def _cast(value: Any, expected: Any) -> Any:
    tensor, dtype = _tensor(value), getattr(expected, "dtype", None)
    if tensor is None or dtype is None or tensor.dtype == dtype or not tensor.is_floating_point():
        return value
    return tensor.to(dtype)


def localize_exported(variant: Any, reference: Any, samples: list[list[Any]], *, variant_id: str,
                      reference_label: str, prefix: str = "", budget: int = SHARE_BUDGET,
                      measured: list[dict[str, np.ndarray]] | None = None) -> ErrorLocalization:
    """Per-op error of the ExportedProgram ``variant`` against ``reference`` over ``samples`` (input lists).
    ``measured`` (per sample, node name -> value) stands for the variant's values where it has a node of the
    same size: the runtime's own outputs (``etdump_values``); shares stay PyTorch's, as they must be computed."""
    started = time.perf_counter()
    variant_run, reference_run = ExportedRun(variant), ExportedRun(reference)
    pairing = _pair(variant_run, reference_run)
    runs, reference_outputs, total_noise, finite = [], [], 0.0, True
    taken: set[str] = set()
    for index, inputs in enumerate(samples):
        got, want = variant_run.run(inputs), reference_run.run(inputs)
        mine = {k: a for k, v in got.items() if (a := _array(v)) is not None}
        for name, value in (measured[index] if measured else {}).items():
            if name in mine and mine[name].size == value.size and name not in variant_run.constants:
                mine[name] = value.reshape(mine[name].shape)
                taken.add(name)
        runs.append((mine, {k: a for k, v in want.items() if (a := _array(v)) is not None}))
        reference_outputs.append(reference_run.outputs(want))
        for a, r in zip(variant_run.outputs(got), reference_outputs[-1]):
            if a is not None and r is not None and a.size == r.size:
                finite = finite and bool(np.isfinite(a).all())
                total_noise += float(np.nansum((a - r) ** 2))
    origins = program_origins(variant, prefix)
    constants = set(variant_run.constants)
    for node in variant_run.computes():
        if all(a.name in constants for a in node.all_input_nodes):
            constants.add(node.name)
    nodes = [Node(n.name, _op_name(n), [a.name for a in n.all_input_nodes], [n.name])
             for n in variant_run.computes() if not _hidden(_op_name(n)) and n.name not in constants]
    found = localize_nodes(nodes, runs, pairs=pairing.pairs, origins=origins, constants=constants,
                           outputs=[n for n in variant_run.output_names if n],
                           variant_id=variant_id, backend="executorch", reference_label=reference_label,
                           source="emulated", started=started,
                           why_unpaired="no reference op has this name, nor does it cast or (de)quantize one")
    found.notes = [n for n in found.notes if n != NO_SHARES]
    if measured is not None:
        shown = [op for op in found.ops if op.rel_error is not None]
        from_runtime = [op for op in shown if op.name in taken]
        if shown and len(from_runtime) == len(shown):
            found.source = "measured"
        found.notes.append(f"{len(from_runtime)} of {len(shown)} ops' values measured (the runtime's own outputs, "
                           "ETDump); shares computed by PyTorch's kernels")
    injector = _Injector(variant_run, reference_run, pairing)
    local: dict[str, ErrorSum] = {}
    for inputs in samples:
        injector.local(inputs, local)

    def share(replaced: set[str]) -> float | None:
        noise = 0.0
        for inputs, want in zip(samples, reference_outputs):
            env = injector.run(inputs, replaced)
            for a, r in zip(reference_run.outputs(env), want):
                if a is None or r is None or a.size != r.size:
                    continue
                if not np.isfinite(a).all():
                    return 1.0 if not finite else None
                noise += float(np.sum((a - r) ** 2))
        if not finite:
            return 0.0
        return min(noise / total_noise, 1.0) if total_noise > 0 else None

    rank = {ref: local[ref].rel_error for ref in pairing.direct if ref in local and local[ref].rel_error > 0}
    by_variant = {v: r for r, v in pairing.direct.items()}
    for op in sorted((op for op in found.ops if by_variant.get(op.name) in rank),
                     key=lambda op: -rank[by_variant[op.name]])[: max(1, budget // 2)]:
        op.share = share({by_variant[op.name]})
    found.modules = _module_shares(found, by_variant, rank, share, budget - budget // 2)
    found.seconds = time.perf_counter() - started
    return found


def _module_shares(found: ErrorLocalization, by_variant: dict[str, str], rank: dict[str, float],
                   share: Callable[[set[str]], float | None], budget: int) -> list[ModuleError]:
    """Shares of the modules with the largest local error (their own ops computed the variant's way)."""
    members: dict[str, list[Any]] = {}
    for op in found.ops:
        if op.origin is not None and by_variant.get(op.name) is not None:
            members.setdefault(op.origin.module, []).append(op)
    worst = {m: max(rank.get(by_variant[op.name], 0.0) for op in ops) for m, ops in members.items()}
    chosen = [m for m in sorted(members, key=lambda m: -worst[m]) if worst[m] > 0][:budget]
    modules = []
    for module in chosen:
        ops = members[module]
        modules.append(ModuleError(module=module or "(model)", where=ops[0].origin.where if ops[0].origin else None,
                                   ops=len(ops), share=share({by_variant[op.name] for op in ops}),
                                   snr_db=ops[-1].snr_db))
    unmeasured = [m for m in found.modules if m.module not in {c or "(model)" for c in chosen}]
    return sorted(modules, key=lambda m: -(m.share or 0.0)) + unmeasured

