"""Pairing the ops of a variant's ML program with its reference program's, surviving what conversion does.

Both programs come from the same model, so most ops share a name once the float16 pass's suffixes are
removed (``linear_0_cast_fp16`` -> ``linear_0``). What a name cannot pair:

- a ``cast`` the reference lacks (float16 casts at the inputs and outputs): its output stands for its
  input's reference value (pairing ``cast``);
- an op renamed by a pass: the one reference op of the same type computing from the same (paired)
  inputs (pairing ``structure``);
- an op fused or rewritten differently in the two programs: left unpaired, saying why. Never guessed.

Constants (weights, folded ``constexpr_*`` decompression) are not paired: they are the ops' own data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mlbench.backends.coreml.emulate import Emulator

__all__ = ["Pair", "Pairing", "pair_programs", "plain_name"]

_CAST_SUFFIX = re.compile(r"_cast_(fp16|fp32|u?int(8|16|32))|_to_(fp16|fp32|u?int(8|16|32))$")


def plain_name(name: str) -> str:
    """The name without the suffixes coremltools' passes add (float16 casts, iOS18's 16-bit index casts)."""
    return _CAST_SUFFIX.sub("", name)


@dataclass
class Pair:
    step: Any  # the variant's _Step
    index: int  # position among the variant's top-level steps
    outputs: list[tuple[str, str | None]]  # (variant output, reference output or None)
    how: str  # name, structure, cast, unpaired
    why: str | None = None
    inputs: list[str] = field(default_factory=list)  # the variant's non-constant input variables

    @property
    def reference(self) -> str | None:
        return next((r for _v, r in self.outputs if r is not None), None)


@dataclass
class Pairing:
    pairs: list[Pair]
    values: dict[str, str]  # variant variable -> reference variable
    reference_steps: dict[str, Any]  # reference output name -> its _Step
    unmatched_reference: int  # reference ops no variant op was paired with


def _inputs(step: Any, constants: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for _key, refs, _as_list in step.args:
        for name, _value in refs:
            if name is not None and name not in constants and name not in names:
                names.append(name)
    return names


def pair_programs(variant: Emulator, reference: Emulator) -> Pairing:
    """Every top-level op of ``variant`` with its reference op (or the reason there is none)."""
    ref_by_output: dict[str, Any] = {}
    for step in reference.steps:
        for name, _dtype in step.outputs:
            ref_by_output[name] = step
    ref_inputs = {id(step): list(_inputs(step, reference.constants)) for step in reference.steps}
    values: dict[str, str] = {n: n for n in variant.program.input_names if n in reference.program.input_names}
    for name, _info in variant.program.states:
        if any(name == other for other, _ in reference.program.states):
            values[name] = name
    taken: set[int] = set()
    pairs: list[Pair] = []
    for index, step in enumerate(variant.steps):
        inputs = _inputs(step, variant.constants)
        mapped = [values[n] for n in inputs] if all(n in values for n in inputs) else None
        pair = (_by_name(step, ref_by_output, taken, mapped, ref_inputs) or _by_cast(step, inputs, values)
                or _by_structure(step, inputs, values, reference.steps, ref_inputs, taken))
        pair.index, pair.inputs = index, inputs
        pairs.append(pair)
        for variant_name, reference_name in pair.outputs:
            if reference_name is not None:
                values[variant_name] = reference_name
        if pair.how in ("name", "structure") and pair.reference is not None:
            taken.add(id(ref_by_output[pair.reference]))
    unmatched = sum(1 for step in reference.steps if id(step) not in taken)
    return Pairing(pairs, values, ref_by_output, unmatched)


def _by_name(step: Any, ref_by_output: dict[str, Any], taken: set[int], mapped: list[str] | None,
             ref_inputs: dict[int, list[str]]) -> Pair | None:
    """The reference op of the same plain name and type; when every input is paired, it must compute from
    the same inputs (generated names such as ``transpose_11`` are numbered per program, so they can meet
    a different op)."""
    first = step.outputs[0][0]
    for candidate in dict.fromkeys([plain_name(first), plain_name(step.op.name or first)]):
        ref = ref_by_output.get(candidate)
        if ref is None or id(ref) in taken or ref.op.type != step.op.type or len(ref.outputs) != len(step.outputs):
            continue
        if mapped is not None and ref_inputs[id(ref)] != mapped:
            continue
        return Pair(step, 0, [(v, r) for (v, _), (r, _) in zip(step.outputs, ref.outputs)], "name")
    return None


def _by_cast(step: Any, inputs: list[str], values: dict[str, str]) -> Pair | None:
    if step.op.type != "cast" or len(inputs) != 1 or inputs[0] not in values:
        return None
    return Pair(step, 0, [(step.outputs[0][0], values[inputs[0]])], "cast")


def _by_structure(step: Any, inputs: list[str], values: dict[str, str], reference_steps: list[Any],
                  ref_inputs: dict[int, list[str]], taken: set[int]) -> Pair:
    unpaired = [n for n in inputs if n not in values]
    outputs: list[tuple[str, str | None]] = [(name, None) for name, _ in step.outputs]
    if unpaired:
        return Pair(step, 0, outputs, "unpaired",
                    f"input '{unpaired[0]}' has no reference counterpart (an op before it was fused or rewritten)")
    mapped = [values[n] for n in inputs]
    candidates = [ref for ref in reference_steps if id(ref) not in taken and ref.op.type == step.op.type
                  and ref_inputs[id(ref)] == mapped and len(ref.outputs) == len(step.outputs)]
    if len(candidates) == 1:
        ref = candidates[0]
        return Pair(step, 0, [(v, r) for (v, _), (r, _) in zip(step.outputs, ref.outputs)], "structure")
    if candidates:
        return Pair(step, 0, outputs, "unpaired",
                    f"{len(candidates)} reference {step.op.type} ops compute from the same inputs")
    return Pair(step, 0, outputs, "unpaired",
                f"no reference {step.op.type} op computes from the same inputs (fused or rewritten by conversion)")
