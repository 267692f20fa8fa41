"""Compare a backend's outputs with the eager float32 reference, over every output.

max_rel divides each output's absolute error by max(its scale, 1) where scale is the largest
|reference| value: relative for large outputs, absolute for small ones (logits near zero would
make a plain relative error explode).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlbench.overflow import float16_overflow
from mlbench.records import OutputError, Verification

DEGENERATE_SCALE = 1e-6
"""Below this, every reference output is ≈ 0 and any export would pass: say so instead."""


class OutputMismatch(Exception):
    """The backend returned a different number or shape of outputs than the eager model."""


def compare_outputs(
    reference: Sequence[tuple[str, np.ndarray]],
    actual: Sequence[np.ndarray],
    *,
    tolerance: float,
    reference_name: str,
) -> Verification:
    if len(actual) != len(reference):
        raise OutputMismatch(f"expected {len(reference)} outputs, got {len(actual)}")
    errors: list[OutputError] = []
    for (name, ref), got in zip(reference, actual):
        got = np.asarray(got, dtype=np.float64)
        ref64 = np.asarray(ref, dtype=np.float64)
        if got.shape != ref64.shape:
            if got.size == ref64.size:
                got = got.reshape(ref64.shape)
            else:
                raise OutputMismatch(f"output '{name}' has shape {list(got.shape)}, expected {list(ref64.shape)}")
        diff = np.abs(got - ref64)
        max_abs = float(np.nanmax(diff)) if diff.size else 0.0
        if diff.size and np.isnan(diff).any():
            max_abs = float("inf")
        scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
        errors.append(OutputError(name=name, max_abs=max_abs, max_rel=max_abs / max(scale, 1.0),
                                  shape=list(ref64.shape)))
    max_abs = max((e.max_abs for e in errors), default=0.0)
    max_rel = max((e.max_rel for e in errors), default=0.0)
    largest = max((float(np.max(np.abs(ref))) for _, ref in reference if np.size(ref)), default=0.0)
    note = None
    if largest < DEGENERATE_SCALE:
        note = (f"the reference outputs are all ≈ 0 (largest |value| {largest:.2g}): this check cannot tell a "
                "wrong export from a right one; random weights often do this (see examples/random_weights.py)")
    return Verification(reference=reference_name, max_abs=max_abs, max_rel=max_rel, tolerance=tolerance,
                        passed=max_rel <= tolerance, outputs=errors, note=note)


def _snr_db(reference: np.ndarray, actual: np.ndarray) -> float | None:
    """10·log10(Σref² / Σ(ref − actual)²); None when they match exactly (an infinite ratio)."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    noise = float(np.sum((ref - np.asarray(actual, dtype=np.float64).ravel()) ** 2))  # sizes checked already
    if noise == 0.0 or not np.isfinite(noise):
        return None if noise == 0.0 else float("-inf")
    signal = float(np.sum(ref**2))
    return float(10 * np.log10(signal / noise)) if signal > 0 else float("-inf")


def _top1(reference: np.ndarray, actual: np.ndarray) -> float | None:
    """Share of rows whose arg-max agrees, for outputs shaped like class scores (2-D, last dim > 1)."""
    ref = np.asarray(reference)
    if ref.ndim != 2 or ref.shape[-1] < 2:
        return None
    got = np.asarray(actual).reshape(ref.shape)
    return float(np.mean(np.argmax(ref, axis=-1) == np.argmax(got, axis=-1)))


def compare_samples(
    pairs: Sequence[tuple[Sequence[tuple[str, np.ndarray]], Sequence[np.ndarray]]],
    *,
    tolerance: float,
    reference_name: str,
    source: str = "measured",
    method: str | None = None,
) -> Verification:
    """Verification over several seeded input sets: the worst sample's errors, the worst output's
    signal-to-noise ratio and top-1 agreement over all of them."""
    checks = [compare_outputs(ref, got, tolerance=tolerance, reference_name=reference_name) for ref, got in pairs]
    worst = max(checks, key=lambda v: v.max_rel)
    snrs: list[float] = []
    top1: dict[str, list[float]] = {}
    for ref, got in pairs:
        for (name, r), g in zip(ref, got):
            snr = _snr_db(r, g)
            if snr is not None:
                snrs.append(snr)
            agreement = _top1(r, g)
            if agreement is not None:
                top1.setdefault(name, []).append(agreement)
    agreements = [float(np.mean(values)) for values in top1.values()]
    return worst.model_copy(update={
        "source": source, "samples": len(pairs), "snr_db": min(snrs) if snrs else None,
        "top1_agreement": min(agreements) if agreements else None, "method": method,
        "note": next((c.note for c in checks if c.note), None), "overflow": float16_overflow(pairs),
    })
