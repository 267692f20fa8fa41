"""Float16 overflow, named: which output passes float16's range in eager float32, and (from Core ML's
interpreter) the op where it first happens.

An export whose values pass 65504 in float16 becomes inf (then often nan) and fails verification with
`max_rel inf`; this says why in words a user can act on:
`float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

FLOAT16_MAX = 65504.0
"""The largest finite float16 value; anything beyond rounds to inf."""


@dataclass(frozen=True)
class OpOverflow:
    """The first op of a float16 program whose float16 output passes FLOAT16_MAX, and how far."""

    op_type: str
    name: str
    reaches: float


def short(value: float) -> str:
    """7.5e4, 1.2e6: two significant digits, no `+` or leading zero in the exponent."""
    mantissa, _, exponent = f"{value:.2g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def output_overflow(
    pairs: Sequence[tuple[Sequence[tuple[str, np.ndarray]], Sequence[np.ndarray]]],
) -> tuple[str, float] | None:
    """(output name, largest |eager value|) of the output that passes float16's range in eager float32
    where the backend gave inf or nan; the largest such output over every sample; None when none does."""
    worst: tuple[str, float] | None = None
    for reference, actual in pairs:
        for (name, ref), got in zip(reference, actual):
            ref64, got64 = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
            finite = np.isfinite(ref64)
            if ref64.size != got64.size or not finite.any() or np.isfinite(got64).all():
                continue
            reaches = float(np.max(np.abs(ref64[finite])))
            if reaches > FLOAT16_MAX and (worst is None or reaches > worst[1]):
                worst = (name, reaches)
    return worst


def float16_overflow(
    pairs: Sequence[tuple[Sequence[tuple[str, np.ndarray]], Sequence[np.ndarray]]],
    op: OpOverflow | None = None,
) -> str | None:
    """The sentence a failed verification gives for a float16 overflow, or None when there is none:
    an output passing float16's range in eager float32 (with the op where it first happens, when the
    interpreter found it), or only the op, for an overflow inside the program that eager never shows."""
    output = output_overflow(pairs)
    at = f"op {op.op_type} '{op.name}'" if op is not None else ""
    if output is not None:
        name, reaches = output
        text = f"float16 overflow: output '{name}' reaches {short(reaches)} in eager float32 (float16 max 65504)"
        return text + (f"; first at {at} ({short(op.reaches)})" if op is not None else "")
    if op is not None:
        return (f"float16 overflow: {at} reaches {short(op.reaches)} in the emulated float16 program "
                "(float16 max 65504)")
    return None
