"""Core AI's section of the Markdown report: each asset's summary, once per asset, and the reference
runtime's time per call (labelled as such: never latency)."""

from __future__ import annotations

from mlbench.records import RunRecord
from mlbench.report.text import md_code


def render_assets(records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    from mlbench.backends.coreai.analysis import render_asset_markdown  # no Core AI import

    lines: list[str] = []
    seen: set[str] = set()
    for record in records:
        if record.artifact is None or record.artifact.key in seen:
            continue
        asset = artifacts.get(record.artifact.key, {}).get("coreai_asset")
        if asset is None:
            continue
        seen.add(record.artifact.key)
        title = f"Core AI asset of {record.artifact_id} (artifact {record.artifact.key[:12]})"
        lines.append(render_asset_markdown(asset, title=title, max_ops=12))
    for record in records:
        run = record.details.get("reference_runtime") if record.status == "ok" else None
        if run and run.get("seconds_per_call"):
            seconds = run["seconds_per_call"]
            lines.append(f"Reference runtime, {md_code(record.variant_id)}: {1000 * min(seconds):.1f} ms per call at "
                         f"best over {len(seconds)} call(s) — Core AI's single-threaded CPU reference runtime, "
                         "not device latency.\n")
    if lines:
        lines.insert(0, "Core AI assets: counts and sizes read from each saved asset by Core AI's own summary "
                        "(measured).\n")
    return lines
