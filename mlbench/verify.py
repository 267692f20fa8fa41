"""Compare a backend's outputs with the eager float32 reference, over every output.

Two figures judge a variant and both must pass (docs/pipeline.md, `verify`):

- max_rel divides each output's absolute error by max(its scale, 1) where scale is the largest
  |reference| value: relative for large outputs, absolute for small ones (logits near zero would
  make a plain relative error explode). Blind where the scale is at most the tolerance: there even
  an all-zero export is within it.
- the signal-to-noise ratio of each output, 10·log10(Σref² / Σ(ref − actual)²), at least the
  pipeline's floor for the precision (`verify.min_snr_db`). It does not depend on the scale: an
  all-zero export is 0 dB whether the outputs are 1e3 or 1e-5.

For outputs shaped like class scores, a row whose arg-max moved fails the variant when the
reference's margin between the two classes is over DECISIVE_MARGIN times the noise the floor allows:
a flip that noise within the floor could not cause.

The floor never asks more than the reference can give: when a float32 export fails only on SNR, the
caller's `reference_precision_db` (eager float32 against the same model in float64) is asked, and if
the reference itself is below the floor plus REFERENCE_MARGIN_DB (outputs below float32's normal
range do this) the floor is lowered to what the reference achieves less the margin, and the record's
note says so. A float16 export keeps its floor: float16 cannot hold what float32 barely can.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from mlbench.overflow import float16_overflow
from mlbench.records import OutputError, Verification

DECISIVE_MARGIN = 6.0
"""A moved arg-max fails when the reference's margin is over this many times the row's RMS × 10^(−floor/20)."""


REFERENCE_MARGIN_DB = 6.0
"""A float32 export's floor, when capped, is the reference's own SNR against float64 less this: an export
with the reference's own error, independent of it, is 3 dB below it; one that sums in another order or
fuses ops may round more, so twice the noise amplitude (6 dB) is allowed."""


class OutputMismatch(Exception):
    """The backend returned a different number or shape of outputs than the eager model."""


def compare_outputs(
    reference: Sequence[tuple[str, np.ndarray]],
    actual: Sequence[np.ndarray],
    *,
    tolerance: float,
    min_snr_db: float,
    reference_name: str,
) -> Verification:
    """One input set, judged as `compare_samples` judges several."""
    return compare_samples([(reference, actual)], tolerance=tolerance, min_snr_db=min_snr_db,
                           reference_name=reference_name)


def _max_errors(
    reference: Sequence[tuple[str, np.ndarray]],
    actual: Sequence[np.ndarray],
    *,
    tolerance: float,
    reference_name: str,
) -> Verification:
    """max_abs and max_rel of one input set; `passed` here says only whether max_rel is within the tolerance."""
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
    return Verification(reference=reference_name, max_abs=max_abs, max_rel=max_rel, tolerance=tolerance,
                        passed=max_rel <= tolerance, outputs=errors)


def snr_db(reference: np.ndarray, actual: np.ndarray) -> float | None:
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


def _moved_decisively(reference: np.ndarray, actual: np.ndarray, min_snr_db: float) -> int:
    """Rows of class scores (2-D, checked by `_top1`) whose arg-max moved although the reference's
    margin is over DECISIVE_MARGIN × the noise the floor allows."""
    ref = np.asarray(reference, dtype=np.float64)
    allowed = np.sqrt(np.mean(ref**2, axis=1)) * 10 ** (-min_snr_db / 20)
    rows = np.arange(ref.shape[0])
    expected, chosen = np.argmax(ref, axis=1), np.argmax(np.asarray(actual).reshape(ref.shape), axis=1)
    margin = ref[rows, expected] - ref[rows, chosen]
    return int(np.sum((expected != chosen) & (margin > DECISIVE_MARGIN * allowed)))


def _db(snr: float | None) -> str:
    return "exact" if snr is None else f"{snr:.1f} dB"


def compare_samples(
    pairs: Sequence[tuple[Sequence[tuple[str, np.ndarray]], Sequence[np.ndarray]]],
    *,
    tolerance: float,
    min_snr_db: float,
    reference_name: str,
    source: str = "measured",
    method: str | None = None,
    reference_precision_db: Callable[[], float | None] | None = None,
) -> Verification:
    """Verification over several seeded input sets: the worst sample's errors, the worst output's
    signal-to-noise ratio and top-1 agreement over all of them; passed when max_rel is within the
    tolerance, every output with any signal is at least `min_snr_db` and no class decision moved
    decisively (the module's docstring). `reference_precision_db` (float32 exports only): the
    reference's own SNR against float64, asked only when the SNR floor fails, to cap the floor."""
    verification = _judge(pairs, tolerance=tolerance, min_snr_db=min_snr_db, reference_name=reference_name,
                          source=source, method=method)
    snr_failed = any(" SNR " in failure for failure in verification.failures)
    if not snr_failed or reference_precision_db is None:
        return verification
    own = reference_precision_db()
    if own is None or own - REFERENCE_MARGIN_DB >= min_snr_db:
        return verification
    cap = float(math.floor(own - REFERENCE_MARGIN_DB))
    capped = _judge(pairs, tolerance=tolerance, min_snr_db=cap, reference_name=reference_name, source=source,
                    method=method)
    why = _cap_note(pairs, own, cap)
    return capped.model_copy(update={"note": "; ".join(n for n in (why, capped.note) if n)})


def _cap_note(pairs: Sequence, own: float, cap: float) -> str:
    largest = max((float(np.max(np.abs(np.asarray(r, dtype=np.float64)))) for ref, _got in pairs for _n, r in ref
                   if np.size(r)), default=0.0)
    precision = (f"the reference's own precision (eager float32 is {own:.1f} dB from the same model in float64, "
                 f"less {REFERENCE_MARGIN_DB:g} dB)")
    if 0.0 < largest < float(np.finfo(np.float32).tiny):
        return f"reference outputs are subnormal (max {largest:.1g}): float32 floor lowered to {cap:g} dB, {precision}"
    return f"float32 floor lowered to {cap:g} dB, {precision}"


def _judge(
    pairs: Sequence[tuple[Sequence[tuple[str, np.ndarray]], Sequence[np.ndarray]]],
    *,
    tolerance: float,
    min_snr_db: float,
    reference_name: str,
    source: str,
    method: str | None,
) -> Verification:
    checks = [_max_errors(ref, got, tolerance=tolerance, reference_name=reference_name) for ref, got in pairs]
    worst = max(checks, key=lambda v: v.max_rel)
    snrs: list[float] = []
    top1: dict[str, list[float]] = {}
    scale: dict[str, float] = {}  # largest |reference| per non-empty output over every sample
    judged: dict[str, list[float]] = {}  # SNRs per output over the samples where it has signal (not exact)
    moved: dict[str, int] = {}  # rows whose class moved decisively, per output
    rows: dict[str, int] = {}
    for ref, got in pairs:
        for (name, r), g in zip(ref, got):
            snr = snr_db(r, g)
            if snr is not None:
                snrs.append(snr)
            if not np.size(r):
                continue
            size = float(np.max(np.abs(np.asarray(r, dtype=np.float64))))
            scale[name] = max(scale.get(name, 0.0), size)
            if size > 0 and snr is not None:
                judged.setdefault(name, []).append(snr)
            agreement = _top1(r, g)
            if agreement is not None:
                top1.setdefault(name, []).append(agreement)
                moved[name] = moved.get(name, 0) + _moved_decisively(r, g, min_snr_db)
                rows[name] = rows.get(name, 0) + np.shape(r)[0]
    agreements = [float(np.mean(values)) for values in top1.values()]
    failures = [] if worst.passed else [f"max_rel {worst.max_rel:.3g} exceeds the tolerance {tolerance:.3g}"]
    for name, values in judged.items():
        if min(values) < min_snr_db:
            failures.append(f"output '{name}' SNR {_db(min(values))} is below the floor {min_snr_db:g} dB")
    for name, flips in moved.items():
        if flips:
            failures.append(f"output '{name}' top-1 class moved in {flips} of {rows[name]} rows where the "
                            f"reference's margin is over {DECISIVE_MARGIN:g}× the noise {min_snr_db:g} dB allows")
    return worst.model_copy(update={
        "source": source, "samples": len(pairs), "snr_db": min(snrs) if snrs else None,
        "top1_agreement": min(agreements) if agreements else None, "method": method,
        "min_snr_db": min_snr_db, "passed": not failures, "failures": failures,
        "note": _weak_note(scale, judged, tolerance, min_snr_db), "overflow": float16_overflow(pairs),
    })


def _weak_note(scale: dict[str, float], judged: dict[str, list[float]], tolerance: float,
               min_snr_db: float) -> str | None:
    """Say when max_rel cannot see a wrong export of some output (an all-zero one would be within the
    tolerance), so that only the SNR judges it; or, for outputs that are all 0, that nothing can."""
    silent = [name for name, size in scale.items() if size == 0]
    weak = [name for name, size in scale.items() if size > 0 and size / max(size, 1.0) <= tolerance]
    if not scale:
        return "there are no non-empty outputs: nothing was compared"
    if not silent and not weak:
        return None
    if len(silent) == len(scale):
        return ("the reference outputs are all 0: neither max_rel nor SNR can tell a wrong export from a right one; "
                "random weights often do this (see pipelines/models/random_weights.py)")
    parts = []
    if weak:
        subject = "outputs are" if len(weak) == len(scale) else (
            f"output '{weak[0]}' is" if len(weak) == 1 else f"outputs {', '.join(repr(n) for n in weak)} are")
        worst = min([snr for n in weak for snr in judged.get(n, [])], default=None)
        parts.append(f"{subject} at most {max(scale[n] for n in weak):.2g}: relative error over max(scale, 1) "
                     f"cannot see a wrong export; SNR {_db(worst)} (floor {min_snr_db:g} dB)")
    if silent:
        parts.append(f"{', '.join(repr(n) for n in silent)} all 0 in the reference: nothing can check "
                     f"{'it' if len(silent) == 1 else 'them'}")
    return "; ".join(parts)
