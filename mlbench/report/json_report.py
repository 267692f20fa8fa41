"""The JSON report: the RunReport as JSON. Its schema is generated from the same model, so a dump
matches it by construction; the tests validate real reports against it with jsonschema, rather than
every run paying for that (1.4 s on the 5 MB report of pipelines/coreml.yaml's 51 variants)."""

from __future__ import annotations

import json
from typing import Any

from mlbench.records import RunReport


def report_schema() -> dict[str, Any]:
    """JSON schema of the report, generated from the RunReport model."""
    schema = RunReport.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mlbench report"
    return schema


def render_json(report: RunReport) -> str:
    return json.dumps(json.loads(report.model_dump_json()), indent=2) + "\n"
