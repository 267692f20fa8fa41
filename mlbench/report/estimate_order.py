"""Which variant of a model is faster on each chip, by the estimates, with how far that order can be trusted.

What a team decides from an estimate is an order ("ship the palettized variant on the A17 Pro"), not a
magnitude, so each statement says how often the estimator ordered published pairs of the same kinds alike:
the calibration's order evidence (``benchmarks/calibrate_latency.py``), which each estimate's details carry
as `latency_estimate.<chip>.order_evidence` beside the variant's `kind`. Pure data in, words out: the
Markdown and the HTML reports both show these lines.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from mlbench.metrics import format_ms
from mlbench.records import RunRecord

PREFIX = "latency.estimated."
TOO_CLOSE = 1.10  # estimates within 10% of each other: the calibration counts such published pairs as ties
LIKELY, UNCERTAIN = 0.85, 0.60  # share of calibration pairs of the kind ordered alike
MIN_PAIRS = 3  # fewer pairs of the kind than this: at most "uncertain"
UNITS_AXIS = "compute_units"
UNITS_ORDER = {"all": 0, "cpu_and_ne": 1, "cpu_and_gpu": 2, "cpu_only": 3}

__all__ = ["OrderStatement", "order_statements"]


@dataclass(frozen=True)
class OrderStatement:
    model: str
    chip: str
    faster: str
    slower: str
    faster_ms: float
    slower_ms: float
    confidence: str  # likely | uncertain | doubtful | too close to call | unknown
    evidence: str  # in words

    def text(self) -> str:
        figures = f"≈{format_ms(self.faster_ms)} vs ≈{format_ms(self.slower_ms)} ms"
        if self.confidence == "too close to call":
            return (f"{self.faster} and {self.slower} on {self.chip}: too close to call ({figures}; within "
                    f"{round((TOO_CLOSE - 1) * 100)}%, where the calibration counts published pairs as ties)")
        return f"{self.faster} faster than {self.slower} on {self.chip}: {self.confidence} ({figures}; {self.evidence})"


def pair_kind(a: str, b: str) -> str:
    """The key of a pair of variant kinds in the order evidence ('float16 vs palettized'): order-free."""
    return " vs ".join(sorted((a, b)))


def _estimate(record: RunRecord, chip: str) -> tuple[float, str, dict[str, list[int]]] | None:
    metric = record.metrics.get(PREFIX + chip)
    parts = (record.details.get("latency_estimate") or {}).get(chip)
    if metric is None or metric.value is None or not isinstance(parts, dict) or "kind" not in parts:
        return None
    return float(metric.value), str(parts["kind"]), dict(parts.get("order_evidence") or {})


def _confidence(ratio: float, evidence: list[int] | None) -> tuple[str, str]:
    if ratio < TOO_CLOSE:
        return "too close to call", ""
    if not evidence or evidence[1] == 0:
        return "unknown", "no calibration pair of these kinds whose published figures differ by 10% or more"
    agreed, pairs = evidence
    share = agreed / pairs
    words = f"order held in {agreed} of {pairs} calibration pairs of these kinds"
    if share >= LIKELY and pairs >= MIN_PAIRS:
        return "likely", words
    return ("uncertain" if share >= UNCERTAIN else "doubtful"), words


def _labels(records: Sequence[RunRecord]) -> dict[str, str]:
    """Each variant by the axes that differ among the model's variants (the backend where several ran)."""
    axes = list(dict.fromkeys(k for r in records for k in r.axes))  # the backend's declared order
    varying = [k for k in axes if len({r.axes.get(k) for r in records}) > 1]
    backends = len({r.backend for r in records}) > 1
    out = {}
    for r in records:
        words = [r.backend] if backends else []
        words += [r.axes[k] for k in varying if k in r.axes]
        out[r.variant_id] = "/".join(words) or r.variant_id
    return out


def order_statements(records: Sequence[RunRecord]) -> list[OrderStatement]:
    """Per model, compute units and estimated chip, each variant against the next slower one, fastest first.

    Variants are ordered within one compute-units choice: what a team picks there is the precision and the
    compression, and the calibration's pairs are of that kind (one page, one setting)."""
    by_model: dict[tuple[str, str], list[RunRecord]] = {}
    for r in records:
        if r.status == "ok":
            by_model.setdefault((r.model, r.axes.get(UNITS_AXIS, "")), []).append(r)
    statements = []
    # the default choice first, so a PR comment that keeps a few lines keeps the ones most variants ship with
    first: dict[str, int] = {}
    for r in records:
        first.setdefault(r.model, len(first))  # models in the order the report lists them
    groups = sorted(by_model.items(), key=lambda item: (first[item[0][0]], UNITS_ORDER.get(item[0][1], 9),
                                                       item[0][1]))
    for (model, units), rows in groups:
        labels = _labels(rows)
        chips = sorted({n[len(PREFIX):] for r in rows for n in r.metrics if n.startswith(PREFIX)})
        for chip in chips:
            found = [(e, r) for r in rows if (e := _estimate(r, chip)) is not None]
            found.sort(key=lambda item: item[0][0])
            for (fast, fast_rec), (slow, slow_rec) in itertools.pairwise(found):
                evidence = {**slow[2], **fast[2]}.get(pair_kind(fast[1], slow[1]))
                ratio = slow[0] / fast[0] if fast[0] > 0 else float("inf")
                confidence, words = _confidence(ratio, evidence)
                where = f"{chip} ({units})" if units else chip
                statements.append(OrderStatement(model=model, chip=where, faster=labels[fast_rec.variant_id],
                                                 slower=labels[slow_rec.variant_id], faster_ms=fast[0],
                                                 slower_ms=slow[0], confidence=confidence, evidence=words))
    return statements
