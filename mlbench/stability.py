"""How far a timed figure can be trusted: its dispersion, its sample count and the machine's load while it
was taken, graded `stable`, `noisy` or `unreliable` (thresholds: docs/running.md, "Stability").

A median read on a shared runner can be the wait for a parked thread rather than the model. The grade
reads what the samples say of themselves (IQR/median, CV, how many) and what the machine said of itself
(other processes' share of the CPU while the figure was taken, from `mlbench.machine_load`).
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Grade = Literal["stable", "noisy", "unreliable"]

NOISY_IQR = 0.05  # IQR/median above this: noisy
UNRELIABLE_IQR = 0.20  # IQR/median above this: unreliable
NOISY_CV = 0.10  # coefficient of variation above this: noisy
UNRELIABLE_CV = 0.30  # above this: unreliable
MIN_SAMPLES = 10  # fewer timed calls: noisy (too few to judge the spread)
BUSY_SHARE = 0.50  # other processes used more than this share of the machine's CPU: a noisy figure is unreliable


class Stability(BaseModel):
    """One timed figure's dispersion, sample count, load and grade, with the reason in words."""

    model_config = ConfigDict(extra="forbid")

    grade: Grade
    iqr_ratio: float | None = Field(description="Interquartile range / median of the samples.")
    cv: float | None = Field(description="stdev / mean of the samples.")
    samples: int
    other_share: float | None = Field(default=None, description="Other processes' share of the machine's CPU "
                                      "while the figure was taken, where the OS reports it.")
    reasons: list[str] = Field(default_factory=list, description="Why it is not stable, in words.")

    def note(self) -> str:
        return f"{self.grade}: {'; '.join(self.reasons)}" if self.reasons else self.grade


def _quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def grade(samples: list[float], load: dict[str, Any] | None = None) -> Stability:
    """Grade raw samples (ms) taken under `load` (a `machine_load.load_between` dict, or None)."""
    n = len(samples)
    other = (load or {}).get("other_share")
    if n < 2:
        return Stability(grade="unreliable", iqr_ratio=None, cv=None, samples=n, other_share=other,
                         reasons=[f"{n} sample: no spread to judge"])
    median = statistics.median(samples)
    mean = statistics.fmean(samples)
    low, high = _quartiles(samples)
    iqr = (high - low) / median if median > 0 else 0.0
    cv = statistics.stdev(samples) / mean if mean > 0 else 0.0
    reasons: list[str] = []
    level = 0
    if iqr > UNRELIABLE_IQR or cv > UNRELIABLE_CV:
        level = 2
    elif iqr > NOISY_IQR or cv > NOISY_CV:
        level = 1
    if level:
        reasons.append(f"cv {cv:.2f}, IQR/median {iqr:.2f}")
    if n < MIN_SAMPLES:
        level = max(level, 1)
        reasons.append(f"only {n} samples (fewer than {MIN_SAMPLES})")
    if other is not None and other > BUSY_SHARE:
        reasons.append(f"other processes used {other:.0%} of the CPUs")
        if level:
            level = 2
    names: tuple[Grade, ...] = ("stable", "noisy", "unreliable")
    return Stability(grade=names[level], iqr_ratio=round(iqr, 4), cv=round(cv, 4), samples=n, other_share=other,
                     reasons=reasons if level else [])


MARKS: dict[str, str] = {"stable": "", "noisy": "?", "unreliable": "⚠"}
"""How a report marks a figure that is not stable."""


def mark(stability: Stability | None) -> str:
    return MARKS[stability.grade] if stability is not None else ""


def inconclusive(stability: Stability | None) -> bool:
    """An unreliable figure is neither a pass nor a regression in compare and ab."""
    return stability is not None and stability.grade == "unreliable"
