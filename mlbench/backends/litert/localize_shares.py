"""Shares for LiteRT: each op's (or module's) part of the final output's error, measured by running the
float32 model with that op's output computed the variant's way.

The interpreter runs a model whole and takes no value for a tensor an op produces, so the model is cut
(LiteRT's own ``flatbuffer_utils``): the variant's op (or a module's ops) alone make a model of their own,
fed the reference's values of their inputs (quantized with the variant tensor's own scale where it is
quantized; its weights are its own); the reference model, without the ops producing those tensors and taking
them as inputs, runs on the result. The share is that run's output error energy over the variant's, for the
ops and modules that lose the most dB over their inputs (``SHARE_BUDGET`` in all, two interpreters each).
A model with more than one subgraph (control flow) is not cut: its shares stay unmeasured.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlbench.localization import ErrorLocalization

__all__ = ["SHARE_BUDGET", "measure_shares"]

SHARE_BUDGET = 24
Values = dict[str, np.ndarray]
QUANTIZED = (np.int8, np.uint8, np.int16)


def _growth(op: Any) -> float:
    return -math.inf if op.growth_db is None else op.growth_db


def measure_shares(variant: Path, reference: Path, samples: list[list[np.ndarray]], runs: list[tuple[Values, Values]],
                   found: ErrorLocalization, pairs: dict[str, str | None], outputs: list[str],
                   unique_names: Callable[[list[dict]], dict[int, str]], budget: int = SHARE_BUDGET) -> bool:
    """Fill ``found``'s shares; False where the models cannot be cut. ``unique_names`` names tensors as the
    localization's values are named (tensor details -> index: name)."""
    from ai_edge_litert.tools import flatbuffer_utils

    cutter = _Cutter(flatbuffer_utils.read_model(str(variant)), flatbuffer_utils.read_model(str(reference)), pairs,
                     unique_names)
    if not cutter.cuttable:
        return False
    total, finite = 0.0, True
    for got, want in runs:
        for name in outputs:
            a, r = got.get(name), want.get(pairs.get(name) or "")
            if a is not None and r is not None and a.size == r.size:
                finite = finite and bool(np.isfinite(a).all())
                total += float(np.nansum((a.astype(np.float64) - r.astype(np.float64)) ** 2))

    def share(names: set[str]) -> float | None:
        return cutter.share(names, samples, runs, total, finite)

    computes = [op for op in found.ops
                if op.pairing in ("name", "cast") and op.op_type not in ("DEQUANTIZE", "QUANTIZE")]
    for op in sorted((op for op in computes if _growth(op) > 0), key=lambda op: -_growth(op))[: max(1, budget // 2)]:
        op.share = share({op.name})
    members: dict[str, list[Any]] = {}
    for op in computes:
        if op.origin is not None:
            members.setdefault(op.origin.module or "(model)", []).append(op)
    worst = {m: max(_growth(op) for op in ops) for m, ops in members.items()}
    chosen = [m for m in sorted(members, key=lambda m: -worst[m]) if worst[m] > 0][: budget - budget // 2]
    for module in found.modules:
        if module.module in chosen:
            module.share = share({op.name for op in members[module.module]})
    found.modules.sort(key=lambda m: -(m.share if m.share is not None else -1.0))
    return True


class _Cutter:
    def __init__(self, variant: Any, reference: Any, pairs: dict[str, str | None],
                 unique_names: Callable[[list[dict]], dict[int, str]]) -> None:
        self.variant, self.reference, self.pairs = variant, reference, pairs
        self.cuttable = len(variant.subgraphs) == 1 and len(reference.subgraphs) == 1
        if not self.cuttable:
            return
        self.v_index = self._indices(variant, unique_names)
        self.r_index = self._indices(reference, unique_names)

    @staticmethod
    def _indices(model: Any, unique: Any) -> dict[str, int]:
        tensors = model.subgraphs[0].tensors
        details = [{"index": i, "name": (t.name.decode() if isinstance(t.name, bytes) else str(t.name))}
                   for i, t in enumerate(tensors)]
        return {name: index for index, name in unique(details).items()}

    @staticmethod
    def _constant(model: Any, index: int) -> bool:
        tensor = model.subgraphs[0].tensors[index]
        buffer = model.buffers[tensor.buffer] if tensor.buffer < len(model.buffers) else None
        return buffer is not None and ((buffer.data is not None and len(buffer.data) > 0) or bool(buffer.size))

    def share(self, names: set[str], samples: list[list[np.ndarray]], runs: list[tuple[Values, Values]],
              total: float, finite: bool) -> float | None:
        cut = self._cut(names)
        if cut is None:
            return None
        own, inputs, swapped, rest, injected = cut
        ref_outputs = self._names(self.reference, [int(i) for i in self.reference.subgraphs[0].outputs])
        noise = 0.0
        for arrays, (got, want) in zip(samples, runs):
            feeds = []
            for name in inputs:
                stood = self.pairs.get(name)
                feeds.append(want[stood] if stood in want else got[name])
            values = dict(zip(swapped, _run(own, feeds)))
            by_reference = {self.pairs[o]: v for o, v in values.items()}
            result = _run(rest, list(arrays) + [by_reference[name] for name in injected])
            for name, value in zip(ref_outputs, result):
                if name not in want:
                    continue
                a, r = value.astype(np.float64), want[name].astype(np.float64)
                if not np.isfinite(a).all():
                    return 1.0 if not finite else None
                noise += float(np.sum((a - r) ** 2))
        if not finite:
            return 0.0
        return min(noise / total, 1.0) if total > 0 else None

    def _names(self, model: Any, indices: list[int]) -> list[str]:
        table = self.v_index if model is self.variant else self.r_index
        by_index = {i: n for n, i in table.items()}
        return [by_index[i] for i in indices]

    def _cut(self, names: set[str]) -> tuple[bytes, list[str], list[str], bytes, list[str]] | None:
        """(the ops' own model, its inputs, its outputs, the reference taking the values they replace as its
        last inputs, those values' names)."""
        from ai_edge_litert.tools import flatbuffer_utils

        v_graph, r_graph = self.variant.subgraphs[0], self.reference.subgraphs[0]
        targets = {self.v_index[n] for n in names if n in self.v_index}
        ops = [op for op in v_graph.operators
               if op.outputs is not None and len(op.outputs) and int(op.outputs[0]) in targets]
        if not ops:
            return None
        produced = {int(o) for op in ops for o in op.outputs if int(o) >= 0}
        inputs = list(dict.fromkeys(
            int(i) for op in ops for i in op.inputs
            if int(i) >= 0 and int(i) not in produced and not self._constant(self.variant, int(i))))
        r_producer = {int(o): k for k, op in enumerate(r_graph.operators) for o in op.outputs if int(o) >= 0}
        swapped = [o for o in produced if (r := self.pairs.get(self._names(self.variant, [o])[0])) is not None
                   and r in self.r_index and self.r_index[r] in r_producer]
        removed = {r_producer[self.r_index[self.pairs[self._names(self.variant, [o])[0]] or ""]] for o in swapped}
        replaced = {self.r_index[self.pairs[self._names(self.variant, [o])[0]] or ""] for o in swapped}
        removed = {k for k in removed if all(int(o) in replaced for o in r_graph.operators[k].outputs if int(o) >= 0)}
        swapped = [o for o in swapped
                   if r_producer[self.r_index[self.pairs[self._names(self.variant, [o])[0]] or ""]] in removed]
        if not swapped:
            return None
        own = copy.deepcopy(self.variant)
        own.signatureDefs = []
        own.subgraphs[0].operators = ops
        own.subgraphs[0].inputs = np.array(inputs, dtype=np.int32)
        own.subgraphs[0].outputs = np.array(swapped, dtype=np.int32)
        rest = copy.deepcopy(self.reference)
        rest.signatureDefs = []
        graph = rest.subgraphs[0]
        graph.operators = [op for k, op in enumerate(graph.operators) if k not in removed]
        graph.inputs = np.array(list(graph.inputs) + sorted(replaced), dtype=np.int32)
        return (bytes(flatbuffer_utils.convert_object_to_bytearray(own)), self._names(self.variant, inputs),
                self._names(self.variant, swapped), bytes(flatbuffer_utils.convert_object_to_bytearray(rest)),
                self._names(self.reference, sorted(replaced)))


def _run(model: bytes, values: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``model`` (bytes) on ``values`` (its inputs in order; quantized ones take their own scale); its
    outputs in order, dequantized."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from mlbench.backends.capture import quiet_native_stderr
    from mlbench.backends.litert.runtime import to_tensor

    with quiet_native_stderr():
        interp = Interpreter(model_content=model,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), values):  # quantized: rounded and clipped, never wrapped
        interp.set_tensor(detail["index"], to_tensor(np.asarray(value), detail).reshape(detail["shape"]))
    interp.invoke()
    found = []
    for detail in interp.get_output_details():
        value = np.asarray(interp.get_tensor(detail["index"]))
        scale, zero = detail.get("quantization", (0.0, 0))
        if value.dtype in QUANTIZED and scale:
            value = (value.astype(np.float64) - zero) * scale
        found.append(value)
    return found
