"""Records that fit the report schema, so writing a report never raises on one record.

Inf and nan figures are data (records.py keeps them as absent values with their reason). A record that
still would not read back from JSON (a non-finite value where JSON has no place for one, a value
its field refuses) is kept as a failed record whose reason is the schema error: the other records,
the Markdown and the HTML are written all the same.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from pydantic import ValidationError

from mlbench.records import RunRecord, RunReport


def schema_error(record: RunRecord) -> str | None:
    """Where and why `record` does not match the report schema, or None when it does."""
    found = _not_finite(record.model_dump(warnings=False), "")
    if found is not None:
        where, value = found
        kind = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return f"/{where} is {kind}, which a JSON report cannot hold"
    try:
        RunRecord.model_validate_json(record.model_dump_json(warnings=False))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "/".join(str(p) for p in first["loc"])
        return f"/{where}: {first['msg']}"
    return None


def fit_record(record: RunRecord) -> RunRecord:
    """`record` itself when it matches the report schema; otherwise a failed record of the same variant
    whose reason is the schema error (and the error it had before, if any)."""
    problem = schema_error(record)
    if problem is None:
        return record
    error = f"report: this record does not match the report schema at {problem}"
    if record.error:
        error += f" (its own error: {record.error})"
    seconds = record.seconds if isinstance(record.seconds, int | float) and math.isfinite(record.seconds) else 0.0
    return RunRecord(variant_id=str(record.variant_id), model=str(record.model), backend=str(record.backend),
                     axes={str(k): str(v) for k, v in dict(record.axes).items()},
                     artifact_id=str(record.artifact_id), status="failed", error=error, started=str(record.started),
                     seconds=seconds)


def fit_report(report: RunReport) -> RunReport:
    """`report` with each record that breaks the schema failed (see fit_record), its summary recounted."""
    records = [fit_record(r) for r in report.records]
    if all(new is old for new, old in zip(records, report.records)):
        return report
    summary = {s: sum(r.status == s for r in records) for s in ("ok", "failed", "skipped")}
    return report.model_copy(update={"records": records, "summary": summary})


def _not_finite(value: Any, where: str) -> tuple[str, float] | None:
    """The path and value of the first inf or nan float in a dumped record (dicts and lists walked)."""
    if isinstance(value, numbers.Real) and not isinstance(value, int):  # floats and numpy's
        return None if math.isfinite(value) else (where, float(value))
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _not_finite(item, f"{where}/{key}" if where else str(key))
        if found is not None:
            return found
    return None
