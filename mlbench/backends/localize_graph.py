"""Per-node error of a runtime's graph against its reference graph, from the values each run exposed: the
part of localization that every graph runtime shares (ONNX Runtime's extra outputs, LiteRT's preserved
tensors). The runtime gives its nodes in execution order, every value by name for each sample, which
variant value stands for which reference value, and where each node came from.

Shares are not measured here: a runtime runs its graph whole, so one node cannot be computed the
variant's way inside the reference's run (Core ML's interpreter can: ``backends/coreml/localize``). A runtime
that can cut its graph measures them apart (``backends/onnxruntime/localize_shares``,
``backends/litert/localize_shares``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mlbench.localization import ErrorLocalization, ErrorSum, ModuleError, OpError, OpOrigin, first_jump, growth_db

__all__ = ["NO_SHARES", "Node", "localize_nodes"]

NO_SHARES = ("shares are not measured: the runtime runs the graph whole, so one node cannot be computed the "
             "variant's way inside the reference's run")


@dataclass
class Node:
    name: str  # the node's first output: its name in the table
    op_type: str
    inputs: list[str]  # value names it reads (constants included)
    outputs: list[str]


Values = dict[str, np.ndarray]


def localize_nodes(nodes: list[Node], runs: Iterable[tuple[Values, Values]], *, pairs: dict[str, str | None],
                   origins: dict[str, OpOrigin], constants: set[str], outputs: list[str], variant_id: str,
                   backend: str, reference_label: str, source: Literal["measured", "emulated", "reference"],
                   why_unpaired: str, started: float | None = None) -> ErrorLocalization:
    """The localization of the variant's ``nodes`` over ``runs`` ((variant values, reference values) per
    sample); ``pairs`` maps a variant value to the reference value it stands for (None: none)."""
    started = time.perf_counter() if started is None else started
    sums: dict[str, ErrorSum] = {}
    output_sums: dict[str, ErrorSum] = {}
    samples = 0
    for got, want in runs:
        samples += 1
        for name, ref_name in pairs.items():
            a, r = got.get(name), want.get(ref_name) if ref_name else None
            if a is not None and r is not None and a.size == r.size:
                sums.setdefault(name, ErrorSum()).add(a, r)
        for name in outputs:
            ref_name = pairs.get(name)
            if name in got and ref_name in want:
                output_sums.setdefault(name, ErrorSum()).add(got[name], want[ref_name])
    snr: dict[str, float | None] = {name: found.snr_db for name, found in sums.items()}  # inputs: quantized, or exact
    ops: list[OpError] = []
    for index, node in enumerate(nodes):
        ref_name = pairs.get(node.name)
        origin = origins.get(node.name)
        if node.name not in sums:
            why = why_unpaired if ref_name is None else "its output is not a tensor of the reference's size"
            ops.append(OpError(index=index, name=node.name, op_type=node.op_type, pairing="unpaired",
                               why_unpaired=why, origin=origin))
            continue
        value = sums[node.name].snr_db
        for output in node.outputs:
            if output in sums:
                snr[output] = sums[output].snr_db
        inputs = [snr.get(i) for i in node.inputs if i not in constants and (i in snr or pairs.get(i))]
        ops.append(OpError(index=index, name=node.name, op_type=node.op_type, reference=ref_name,
                           pairing="name" if ref_name == node.name else "cast", origin=origin,
                           rel_error=sums[node.name].rel_error, snr_db=value, growth_db=growth_db(list(inputs), value)))
    finite = all(s.finite for s in output_sums.values())
    output_snr = min((s.snr_db for s in output_sums.values() if s.snr_db is not None), default=None)
    output_snr = output_snr if finite else -math.inf
    return ErrorLocalization(variant=variant_id, backend=backend, reference=reference_label, source=source,
                             samples=samples, seconds=time.perf_counter() - started, output_snr_db=output_snr,
                             first_jump=first_jump(ops, output_snr), ops=ops, modules=module_errors(ops),
                             notes=[NO_SHARES])


def module_errors(ops: list[OpError]) -> list[ModuleError]:
    """Per module: its ops and the SNR of its last one, worst first."""
    last: dict[str, OpError] = {}
    count: dict[str, int] = {}
    for op in ops:
        if op.origin is not None and op.pairing != "unpaired":
            last[op.origin.module] = op
            count[op.origin.module] = count.get(op.origin.module, 0) + 1
    modules = [ModuleError(module=m or "(model)", where=op.origin.where if op.origin else None, ops=count[m],
                           snr_db=op.snr_db) for m, op in last.items()]
    return sorted(modules, key=lambda m: math.inf if m.snr_db is None else m.snr_db)
