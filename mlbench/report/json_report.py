"""The JSON report: the RunReport, checked against the committed schema before it is written."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from mlbench.records import RunReport


def report_schema() -> dict[str, Any]:
    """JSON schema of the report, generated from the RunReport model."""
    schema = RunReport.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mlbench report"
    return schema


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(report_schema())


class ReportSchemaError(Exception):
    """A report that does not match its schema: a bug in mlbench, never the user's fault."""


def render_json(report: RunReport) -> str:
    data = json.loads(report.model_dump_json())
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path)
        raise ReportSchemaError(f"report does not match its schema at /{where}: {first.message}")
    return json.dumps(data, indent=2) + "\n"
