"""Is a report read back fit to compare? The schema says every figure is a float; this says which floats are
possible. A time, a size or a count is never negative, NaN or infinite; a share lies in [0, 1]; an output
error is never negative or NaN (infinite when an output held NaN); a variant appears once.

`mlbench compare` reads files anyone could have edited: a negative latency once read as "4 improved", a
NaN as "+nan%, unchanged", a variant listed twice was counted twice. Each is refused here, in one line
naming the file and the place (`records[2].latency.samples[7]`), before anything is compared.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from mlbench.errors import UserError
from mlbench.records import RunRecord, RunReport

_NONNEGATIVE = {"ms": "a time", "s": "a time", "bytes": "a size", "count": "a count", "ratio": "a share",
                "rel": "an output error", "abs": "an output error", "cv": "a coefficient of variation"}
_MAY_BE_INFINITE = {"rel", "abs"}  # an output holding NaN is infinitely far from the reference
_FRACTION = {"ratio"}


def _problem(value: float, unit: str) -> str | None:
    """Why `value` in `unit` cannot be a real figure, or None when it can."""
    if math.isnan(value):
        return "not a number"
    kind = _NONNEGATIVE.get(unit)
    if kind is None:  # dB and units a backend names: any number but NaN
        return None
    if value < 0:
        return f"{kind} cannot be negative"
    if math.isinf(value) and unit not in _MAY_BE_INFINITE:
        return f"{kind} cannot be infinite"
    if unit in _FRACTION and value > 1 + 1e-9:  # shares are quotients: allow their last bit
        return f"{kind} lies between 0 and 1"
    return None


def _figures(record: RunRecord) -> Iterable[tuple[str, float | None, str]]:
    """(place within the record, value, unit) of every figure the record carries."""
    for name, metric in record.metrics.items():
        yield f"metrics.{name}", metric.value, metric.unit
    yield "seconds", record.seconds, "s"
    if record.latency is not None:
        lat = record.latency
        for field in ("median", "best", "p90", "mean", "stdev"):
            yield f"latency.{field}", getattr(lat, field), "ms"
        yield "latency.cv", lat.cv, "cv"
        yield "latency.total_s", lat.total_s, "s"
        yield "latency.warmup", lat.warmup, "count"
    if record.verify is not None:
        ver = record.verify
        yield "verify.max_abs", ver.max_abs, "abs"
        yield "verify.max_rel", ver.max_rel, "rel"
        yield "verify.tolerance", ver.tolerance, "rel"
        yield "verify.snr_db", ver.snr_db, "dB"
        yield "verify.top1_agreement", ver.top1_agreement, "ratio"
        for j, out in enumerate(ver.outputs):
            yield f"verify.outputs[{j}].max_abs", out.max_abs, "abs"
            yield f"verify.outputs[{j}].max_rel", out.max_rel, "rel"
    if record.placement is not None:
        pl = record.placement
        for field in ("compute_ops", "constants", "switches", "unknown"):
            yield f"placement.{field}", getattr(pl, field), "count"
        for table in ("by_count", "by_cost"):
            for device, share in (getattr(pl, table) or {}).items():
                yield f"placement.{table}.{device}", share, "ratio"
    if record.artifact is not None:
        yield "artifact.export_seconds", record.artifact.export_seconds, "s"
        yield "artifact.size_bytes", record.artifact.size_bytes, "bytes"


def _first_bad_sample(samples: list[float]) -> int | None:
    """Index of the first sample that is not a finite, non-negative time (one pass: a million in ~0.1 s)."""
    for j, value in enumerate(samples):
        if not 0 <= value < math.inf:  # False for NaN too
            return j
    return None


def check_metric_values(data: object, file: str | Path) -> None:
    """Refuse an inf or nan metric value in a report's raw JSON, before `RunReport` reads it.

    mlbench writes such a figure as absent with its reason; the model turns a bare one into that too, so
    only the raw file can tell that a hand-edited `NaN` stood where a measured time should."""
    records = data.get("records") if isinstance(data, dict) else None
    for i, record in enumerate(records if isinstance(records, list) else []):
        metrics = record.get("metrics") if isinstance(record, dict) else None
        for name, metric in (metrics.items() if isinstance(metrics, dict) else ()):
            value = metric.get("value") if isinstance(metric, dict) else None
            if isinstance(value, float) and not math.isfinite(value):
                why = _problem(value, str(metric.get("unit", "")))
                if why is not None:
                    raise UserError(f"impossible figure {value:g} {metric.get('unit')}: {why} "
                                    f"(variant {record.get('variant_id')!r})", file=file,
                                    where=f"records[{i}].metrics.{name}")


def check_report(report: RunReport, file: str | Path, run: str | None = None) -> None:
    """Raise a one-line `UserError` (file, place) for the first impossible figure or repeated variant.

    `run` names the run when `file` holds several (a history database)."""
    prefix = f"run {run}: " if run else ""
    seen: dict[str, int] = {}

    def refuse(where: str, what: str) -> None:
        raise UserError(what, file=file, where=prefix + where)

    for i, record in enumerate(report.records):
        if record.variant_id in seen:
            refuse(f"records[{i}].variant_id", f"variant {record.variant_id!r} is also records[{seen[record.variant_id]}]; "
                   "a report holds each variant once")
        seen[record.variant_id] = i
        for place, value, unit in _figures(record):
            why = _problem(float(value), unit) if value is not None else None
            if why is not None:
                refuse(f"records[{i}].{place}", f"impossible figure {value:g} {unit}: {why} "
                       f"(variant {record.variant_id!r})")
        if record.latency is not None and (j := _first_bad_sample(record.latency.samples)) is not None:
            value = record.latency.samples[j]
            why = _problem(value, "ms") or "a time cannot be infinite"
            refuse(f"records[{i}].latency.samples[{j}]", f"impossible figure {value:g} ms: {why} "
                   f"(variant {record.variant_id!r})")
    for stage, seconds in report.stage_seconds.items():
        if (why := _problem(seconds, "s")) is not None:
            refuse(f"stage_seconds.{stage}", f"impossible figure {seconds:g} s: {why}")
