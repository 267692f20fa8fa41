"""The figure a row leads with: measured where this machine measured it, else the estimate for the pipeline's
first `estimate_on` chip (marked ≈). A Linux CI job times no Core ML variant; without this its main table
is dashes for exactly the variants a reviewer cares about. And where each variant runs (`target_of`), so
advice ("which variant to ship") never ranks an iPhone estimate against an x86 measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench.records import Metric, RunRecord

ESTIMATED_LATENCY = "latency.estimated."
_NOT_CHIPS = ("prefill.", "decode.")  # a generative model's per-phase estimates: not one call's latency


def chips_of(records: Sequence[RunRecord]) -> list[str]:
    """The chips the records carry a latency estimate for, in the order the backends wrote them (the
    pipeline's `estimate_on` order): the first is the one a table leads with."""
    found: dict[str, None] = {}
    for record in records:
        for name in record.metrics:
            chip = name.removeprefix(ESTIMATED_LATENCY)
            if name.startswith(ESTIMATED_LATENCY) and not chip.startswith(_NOT_CHIPS):
                found.setdefault(chip)
    return list(found)


def lead_latency(record: RunRecord, chip: str | None) -> Metric | None:
    """The measured median, else the estimate on `chip`; None where neither has a value."""
    median = record.metrics.get("latency.median")
    if median is not None and median.value is not None:
        return median
    if chip is not None:
        estimate = record.metrics.get(ESTIMATED_LATENCY + chip)
        if estimate is not None and estimate.value is not None:
            return estimate
    return None


def lead_memory(record: RunRecord) -> Metric | None:
    """`memory.peak` where it was measured, else `memory.estimated`."""
    for name in ("memory.peak", "memory.estimated"):
        metric = record.metrics.get(name)
        if metric is not None and metric.value is not None:
            return metric
    return None
