"""Per-op error of a variant's ML program against its reference program, both run by the interpreter.

Three kinds of run, on the same seeded inputs:

1. both programs side by side, every intermediate kept: each paired op's accumulated error and SNR, and
   what it lost over its inputs;
2. the reference program, with each paired variant op also computed on the reference's inputs (with
   the variant's own weights and storage precision): the error each op makes by itself ("local");
3. the reference program with one op's (or one module's ops') outputs computed as the variant computes
   them, everything else as the reference: that op's share of the final output's error energy. One such
   run per op or module: the `budget` bounds them, the ops and modules with the largest local error first.
   An input the reference has no counterpart for takes the variant's own value from run 1.
"""

from __future__ import annotations

import math
import time
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mlbench.backends.coreml.emulate import Emulator
from mlbench.backends.coreml.emulate.precision import store
from mlbench.backends.coreml.localize.pairing import Pair, Pairing, pair_programs
from mlbench.localization import (
    ErrorLocalization,
    ErrorSum,
    ModuleError,
    OpError,
    OpOrigin,
    first_jump,
    growth_db,
)

__all__ = ["LocalizeOptions", "localize_programs"]


@dataclass
class LocalizeOptions:
    budget: int = 24  # injected runs (3.) at most: half for ops, the rest for modules
    modules: list[str] = field(default_factory=list)  # modules whose share is measured whatever their rank


def _array(value: Any) -> np.ndarray | None:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().to(torch.float64).numpy()
    return None


class _Run:
    """One reference-program run, optionally with some ops computed as the variant computes them."""

    def __init__(self, variant: Emulator, reference: Emulator, pairing: Pairing) -> None:
        self.variant, self.reference, self.pairing = variant, reference, pairing
        self.by_ref_output = {r: pair for pair in pairing.pairs if pair.how in ("name", "structure")
                              for _v, r in pair.outputs if r is not None}
        self.unpaired_inputs = {name for pair in pairing.pairs if pair.how in ("name", "structure")
                                for name in pair.inputs if name not in pairing.values}
        self.own: dict[str, Any] = {}  # the current sample's values of those, from the variant's own run
        self.samples_own: list[dict[str, Any]] = []

    def as_variant(self, pair: Pair, env: dict[str, Any]) -> list[Any] | None:
        """The variant op on the reference's values (stored in the variant's dtypes), or None if it cannot.
        An input without a reference counterpart (an index chain the variant computes its own way) takes the
        variant's own value."""
        local: dict[str, Any] = {}
        for name in pair.inputs:
            ref_name = self.pairing.values.get(name)
            if ref_name is None and name in self.own:
                local[name] = self.own[name]
                continue
            if ref_name is None or ref_name not in env:
                return None
            info = self.variant.types.get(name)
            local[name] = store(env[ref_name], info.dtype if info else None, self.variant.precision)
        try:
            return self.variant.run_step(pair.step, ChainMap(local, self.variant.constants))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a kernel refusing the other program's values: not measured
            return None

    def run(self, feeds: dict[str, np.ndarray], replace: set[int], local: dict[str, ErrorSum] | None = None
            ) -> dict[str, Any]:
        """The reference run's env; ops whose pair index is in ``replace`` computed as the variant's; with
        ``local``, every paired op's own error is added to it (keyed by the variant's output name)."""

        def observe(step: Any, env: dict[str, Any], outputs: list[Any]) -> list[Any] | None:
            pair = self.by_ref_output.get(step.outputs[0][0])
            if pair is None or (local is None and pair.index not in replace):
                return None
            computed = self.as_variant(pair, env)
            if computed is None:
                return None
            by_ref = {r: value for (_v, r), value in zip(pair.outputs, computed) if r is not None}
            if local is not None:
                for (variant_name, ref_name), value in zip(pair.outputs, computed):
                    a, r = _array(value), _array(outputs[[n for n, _ in step.outputs].index(ref_name)]) \
                        if ref_name is not None else None
                    if a is not None and r is not None and a.size == r.size:
                        local.setdefault(variant_name, ErrorSum()).add(a, r)
            if pair.index not in replace:
                return None
            return [by_ref.get(name, value) for (name, _d), value in zip(step.outputs, outputs)]

        return self.reference.run_observed(feeds, observe)


def _outputs(emulator: Emulator, env: dict[str, Any]) -> list[np.ndarray | None]:
    return [_array(env.get(name)) for name in emulator.program.main.outputs]


def localize_programs(variant: Emulator, reference: Emulator, feeds: list[dict[str, np.ndarray]], *,
                      origins: dict[str, OpOrigin], variant_id: str, backend: str, reference_label: str,
                      options: LocalizeOptions | None = None) -> ErrorLocalization:
    """The localization of ``variant`` against ``reference`` over ``feeds`` (input dicts)."""
    started = time.perf_counter()
    options = options or LocalizeOptions()
    pairing = pair_programs(variant, reference)
    runner = _Run(variant, reference, pairing)
    accumulated: dict[str, ErrorSum] = {}
    local: dict[str, ErrorSum] = {}
    output_sums = [ErrorSum() for _ in variant.program.main.outputs]
    reference_outputs: list[list[np.ndarray | None]] = []
    own: list[dict[str, Any]] = []  # per sample: the variant's values of inputs the reference lacks
    for sample in feeds:
        env_v = variant.run_observed(sample, lambda *_: None)
        own.append({name: env_v[name] for name in runner.unpaired_inputs if name in env_v})
        runner.own = own[-1]
        env_r = runner.run(sample, set(), local)
        for pair in pairing.pairs:
            for variant_name, ref_name in pair.outputs:
                a, r = _array(env_v.get(variant_name)), _array(env_r.get(ref_name)) if ref_name else None
                if a is not None and r is not None and a.size == r.size:
                    accumulated.setdefault(variant_name, ErrorSum()).add(a, r)
        ref_out = _outputs(reference, env_r)
        reference_outputs.append(ref_out)
        for sums, a, r in zip(output_sums, _outputs(variant, env_v), ref_out):
            if a is not None and r is not None and a.size == r.size:
                sums.add(a, r)
        del env_r, env_v
    ops = _op_errors(pairing, accumulated, origins)
    output_snrs = [s.snr_db for s in output_sums]
    output_snr = min((v for v in output_snrs if v is not None), default=None)
    total_noise = sum(s.noise for s in output_sums)
    finite = all(s.finite for s in output_sums)
    notes: list[str] = []
    runner.samples_own = own
    _measure_shares(runner, feeds, reference_outputs, ops, pairing, local, origins, total_noise, finite, options)
    modules = _module_shares(runner, feeds, reference_outputs, ops, pairing, local, origins, total_noise, finite,
                             options)
    unpaired = sum(1 for op in ops if op.pairing == "unpaired")
    if unpaired:
        notes.append(f"{unpaired} of {len(ops)} ops could not be paired with a reference op (each says why)")
    if pairing.unmatched_reference:
        notes.append(f"{pairing.unmatched_reference} reference ops have no variant op (fused or removed)")
    if not origins:
        notes.append("the package records no op origins (exported before mlbench kept them, or not by mlbench): "
                     "ops are named as the program names them")
    return ErrorLocalization(
        variant=variant_id, backend=backend, reference=reference_label, source="emulated", samples=len(feeds),
        seconds=time.perf_counter() - started, output_snr_db=output_snr if finite else -math.inf,
        first_jump=first_jump(ops, output_snr if finite else -math.inf), ops=ops, modules=modules, notes=notes)


def _op_errors(pairing: Pairing, accumulated: dict[str, ErrorSum], origins: dict[str, OpOrigin]) -> list[OpError]:
    snr: dict[str, float | None] = {}
    ops: list[OpError] = []
    for pair in pairing.pairs:
        name = pair.step.outputs[0][0]
        sums = accumulated.get(name)
        origin = origins.get(pair.step.op.name) or origins.get(name)
        if sums is None or pair.how == "unpaired":
            why = pair.why or ("its output is not a tensor of the reference's size" if pair.how != "unpaired" else None)
            ops.append(OpError(index=pair.index, name=name, op_type=pair.step.op.type, reference=pair.reference,
                               pairing="unpaired", why_unpaired=why, origin=origin))
            continue
        value = sums.snr_db
        for variant_name, _r in pair.outputs:
            if variant_name in accumulated:
                snr[variant_name] = accumulated[variant_name].snr_db
        inputs = [snr.get(n) for n in pair.inputs if n in pairing.values]  # exact (None) unless computed
        ops.append(OpError(index=pair.index, name=name, op_type=pair.step.op.type, reference=pair.reference,
                           pairing=pair.how, origin=origin, rel_error=sums.rel_error, snr_db=value,
                           growth_db=growth_db(list(inputs), value)))
    return ops


def _injected_share(runner: _Run, feeds: list[dict], reference_outputs: list, replace: set[int],
                    total_noise: float, finite: bool) -> float | None:
    noise = 0.0
    for index, (sample, ref_out) in enumerate(zip(feeds, reference_outputs)):
        runner.own = runner.samples_own[index] if index < len(runner.samples_own) else {}
        env = runner.run(sample, replace)
        for a, r in zip(_outputs(runner.reference, env), ref_out):
            if a is None or r is None or a.size != r.size:
                continue
            if not np.isfinite(a).all():
                return 1.0 if not finite else None
            noise += float(np.sum((a - r) ** 2))
    if not finite:
        return 0.0
    return min(noise / total_noise, 1.0) if total_noise > 0 else None


def _local_rank(pair: Pair, local: dict[str, ErrorSum]) -> float:
    sums = local.get(pair.step.outputs[0][0])
    return sums.rel_error if sums is not None else 0.0


def _measure_shares(runner: _Run, feeds: list, reference_outputs: list, ops: list[OpError], pairing: Pairing,
                    local: dict[str, ErrorSum], origins: dict, total_noise: float, finite: bool,
                    options: LocalizeOptions) -> None:
    candidates = [p for p in pairing.pairs if p.how in ("name", "structure") and _local_rank(p, local) > 0]
    candidates.sort(key=lambda p: -_local_rank(p, local))
    for pair in candidates[: max(1, options.budget // 2)]:
        ops[pair.index].share = _injected_share(runner, feeds, reference_outputs, {pair.index}, total_noise, finite)


def _module_shares(runner: _Run, feeds: list, reference_outputs: list, ops: list[OpError], pairing: Pairing,
                   local: dict[str, ErrorSum], origins: dict, total_noise: float, finite: bool,
                   options: LocalizeOptions) -> list[ModuleError]:
    members: dict[str, list[int]] = {}
    for op in ops:
        if op.origin is not None and op.pairing in ("name", "structure"):
            members.setdefault(op.origin.module, []).append(op.index)
    rank = {m: max(_local_rank(pairing.pairs[i], local) for i in idx) for m, idx in members.items()}
    chosen = [m for m in options.modules if m in members]
    chosen += [m for m in sorted(members, key=lambda m: -rank[m]) if m not in chosen and rank[m] > 0]
    chosen = chosen[: max(len([m for m in options.modules if m in members]), options.budget - options.budget // 2)]
    modules: list[ModuleError] = []
    for module in chosen:
        indices = members[module]
        last = ops[indices[-1]]
        first_origin = ops[indices[0]].origin
        share = _injected_share(runner, feeds, reference_outputs, set(indices), total_noise, finite)
        modules.append(ModuleError(module=module or "(model)", where=first_origin.where if first_origin else None,
                                   ops=len(indices), share=share, snr_db=last.snr_db))
    modules.sort(key=lambda m: -(m.share or 0.0))
    return modules
