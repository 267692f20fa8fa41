"""Shares for ONNX Runtime: each op's (or module's) part of the final output's error, measured by running
the float32 graph with that op's output computed the variant's way.

ONNX Runtime runs a graph whole, so the op is taken out of it: its variant node (or a module's nodes) alone
make a small graph, fed the reference's values of their inputs cast to the variant's types (its own weights
and the values the reference has no counterpart for are the variant's); the reference graph, with the nodes
producing those outputs removed and the outputs made graph inputs, runs on the result. The share is that
run's output error energy over the variant's: as Core ML's, shares need not add to 1 (errors interact).
Two session builds per op or module and sample: the ops and modules that lose the most dB over their
inputs are measured, ``SHARE_BUDGET`` in all.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mlbench.localization import ErrorLocalization

__all__ = ["SHARE_BUDGET", "measure_shares"]

SHARE_BUDGET = 24
"""Injected runs at most: half for ops, the rest for modules (as Core ML's)."""

Values = dict[str, np.ndarray]


def _growth(op: Any) -> float:
    value = op.growth_db
    return -math.inf if value is None else value


def _computes(op: Any) -> bool:
    """A node computing its reference's value: the same name, or renamed to feed a Cast (not a Cast itself)."""
    return op.pairing == "name" or (op.pairing == "cast" and op.op_type != "Cast")


def measure_shares(variant: Any, reference: Any, runs: list[tuple[Values, Values]], feeds: list[Values],
                   found: ErrorLocalization, pairs: dict[str, str | None], budget: int = SHARE_BUDGET) -> None:
    """Fill ``found``'s shares (ops and modules), ``variant`` and ``reference`` being loaded ONNX models."""
    total, finite = 0.0, True
    for got, want in runs:
        for v_out, r_out in zip(variant.graph.output, reference.graph.output):
            a, r = got.get(v_out.name), want.get(r_out.name)
            if a is not None and r is not None and a.size == r.size:
                finite = finite and bool(np.isfinite(a).all())
                total += float(np.nansum((a.astype(np.float64) - r.astype(np.float64)) ** 2))
    injector = _Injector(variant, reference, pairs)
    direct = [op for op in found.ops if _computes(op) and op.growth_db is not None and _growth(op) > 0]
    for op in sorted(direct, key=lambda op: -_growth(op))[: max(1, budget // 2)]:
        op.share = injector.share({op.name}, runs, feeds, total, finite)
    members: dict[str, list[Any]] = {}
    for op in found.ops:
        if op.origin is not None and _computes(op):
            members.setdefault(op.origin.module or "(model)", []).append(op)
    worst = {m: max(_growth(op) for op in ops) for m, ops in members.items()}
    chosen = [m for m in sorted(members, key=lambda m: -worst[m]) if worst[m] > 0][: budget - budget // 2]
    for module in found.modules:
        if module.module in chosen:
            module.share = injector.share({op.name for op in members[module.module]}, runs, feeds, total, finite)
    found.modules.sort(key=lambda m: -(m.share if m.share is not None else -1.0))


class _Injector:
    def __init__(self, variant: Any, reference: Any, pairs: dict[str, str | None]) -> None:
        self.variant, self.reference, self.pairs = variant, reference, pairs
        self.initializers = {i.name: i for i in variant.graph.initializer}

    def share(self, names: set[str], runs: list[tuple[Values, Values]], feeds: list[Values], total: float,
              finite: bool) -> float | None:
        """Output error energy of the reference with the nodes whose first output is in ``names`` computed the
        variant's way, over ``total`` (the variant's); None where it cannot be built."""
        import onnxruntime as ort

        built = self._graphs(names, runs[0])
        if built is None:
            return None
        sub, inputs, swapped, patched = built
        options = ort.SessionOptions()
        options.log_severity_level = 3
        own = ort.InferenceSession(sub.SerializeToString(), options, providers=["CPUExecutionProvider"])
        rest = ort.InferenceSession(patched.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outputs = [o.name for o in self.reference.graph.output]
        noise = 0.0
        for (got, want), feed in zip(runs, feeds):
            sub_feeds = {}
            for name in inputs:
                stood = self.pairs.get(name)
                sub_feeds[name] = want[stood].astype(got[name].dtype) if stood in want else got[name]
            values = own.run(list(swapped), sub_feeds)
            ref_feeds = {**{k: v for k, v in feed.items() if k in {i.name for i in patched.graph.input}},
                         **{swapped[o]: v.astype(want[swapped[o]].dtype) for o, v in zip(swapped, values)}}
            for name, value in zip(outputs, rest.run(outputs, ref_feeds)):
                a, r = np.asarray(value, dtype=np.float64), want[name].astype(np.float64)
                if not np.isfinite(a).all():
                    return 1.0 if not finite else None
                noise += float(np.sum((a - r) ** 2))
        if not finite:
            return 0.0
        return min(noise / total, 1.0) if total > 0 else None

    def _graphs(self, names: set[str], sample: tuple[Values, Values]
                ) -> tuple[Any, list[str], dict[str, str], Any] | None:
        """(the variant nodes' own graph, its inputs, variant output -> reference value it replaces, the
        reference graph taking those values as inputs)."""
        import onnx
        from onnx import helper

        got, want = sample
        nodes = [n for n in self.variant.graph.node if n.output and n.output[0] in names]
        if not nodes or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                            for n in nodes for a in n.attribute):
            return None
        produced = {o for n in nodes for o in n.output if o}
        inputs = list(dict.fromkeys(i for n in nodes for i in n.input
                                    if i and i not in produced and i not in self.initializers))
        if any(i not in got for i in inputs):
            return None
        ref_nodes = list(self.reference.graph.node)
        producer = {o: index for index, n in enumerate(ref_nodes) for o in n.output if o}
        swapped = {o: r for o in produced if (r := self.pairs.get(o)) is not None and r in want and r in producer
                   and o in got}
        removed = {producer[r] for r in swapped.values()}
        # a reference node goes only when every output it has is replaced
        removed = {i for i in removed if all(not o or o in swapped.values() for o in ref_nodes[i].output)}
        swapped = {o: r for o, r in swapped.items() if producer[r] in removed}
        if not swapped:
            return None

        def info(name: str, value: np.ndarray) -> Any:
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))

        used = [self.initializers[i] for n in nodes for i in n.input if i in self.initializers]
        sub_graph = helper.make_graph(nodes, "own", [info(i, got[i]) for i in inputs],
                                      [info(o, got[o]) for o in swapped], list({i.name: i for i in used}.values()))
        sub = helper.make_model(sub_graph, opset_imports=list(self.variant.opset_import))
        sub.ir_version = self.variant.ir_version
        patched = onnx.ModelProto()
        patched.CopyFrom(self.reference)
        del patched.graph.node[:]
        patched.graph.node.extend(n for index, n in enumerate(ref_nodes) if index not in removed)
        patched.graph.input.extend(info(r, want[r]) for r in swapped.values())
        return sub, inputs, swapped, patched
