"""Core ML's section of the Markdown report: each artifact's program analysis, once per artifact."""

from __future__ import annotations

from mlbench.backends.coreml.program_report import render_program_markdown
from mlbench.records import RunRecord
from mlbench.report.text import md_code


def render_programs(records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    """One static-analysis section per distinct artifact (several variants can share one)."""
    from mlbench.backends.apple.analysis import ProgramAnalysis  # pydantic only

    lines: list[str] = []
    seen: set[str] = set()
    for record in records:
        if record.artifact is None or record.artifact.key in seen:
            continue
        program = artifacts.get(record.artifact.key, {}).get("program")
        if program is None:
            continue
        seen.add(record.artifact.key)
        heading = f"Program of {md_code(record.artifact_id)} (artifact {md_code(record.artifact.key[:12])})"
        lines.append(render_program_markdown(ProgramAnalysis.model_validate(program), heading=heading, level=4))
    if lines:
        lines.insert(0, "Counts and sizes below are read from the saved package (measured); "
                        "MACs are estimated from operation shapes.\n")
    return lines
