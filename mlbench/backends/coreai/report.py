"""Core AI's section of the Markdown report: each asset's summary, once per asset, and the reference
runtime's time per call (labelled as such: never latency)."""

from __future__ import annotations

from mlbench.records import RunRecord
from mlbench.report.text import md_code


def render_assets(records: list[RunRecord], artifacts: dict[str, dict]) -> list[str]:
    """One table row per distinct asset (several variants can share one), each asset's full summary folded
    below it, then the reference runtime's time per call where it ran."""
    from mlbench.backends.coreai.analysis import render_asset_markdown, type_bits  # no Core AI import

    assets: list[tuple[RunRecord, str, dict]] = []
    seen: set[str] = set()
    for record in records:
        if record.artifact is None or record.artifact.key in seen:
            continue
        asset = artifacts.get(record.artifact.key, {}).get("coreai_asset")
        if asset is not None:
            seen.add(record.artifact.key)
            assets.append((record, record.artifact.key, asset))
    lines: list[str] = []
    if assets:
        lines += ["Core AI assets, read from each saved asset by Core AI's own summary (measured):", "",
                  "| Asset | Functions (states) | On disk | Stored scalars | Storage types | Ops besides constants |",
                  "|---|---|---:|---:|---|---:|"]
        for record, _, asset in assets:
            types = ", ".join(f"{name} ×{count:,}" for name, count in asset["storage_types"].items()
                              if (type_bits(name) or 0) <= 16 or count > 64)
            lines.append(f"| {md_code(record.artifact_id)} | {functions_cell(asset)} | {asset['package_bytes']:,} B | "
                         f"{asset['weight_bytes']:,} B | {types} | {asset['compute_ops']} |")
        lines.append("")
        for record, key, asset in assets:
            title = f"Core AI asset of {record.artifact_id} (artifact {key[:12]})"
            lines += [f"<details><summary>{title}</summary>", "",
                      render_asset_markdown(asset, title=title, max_ops=12, max_layers=40), "</details>", ""]
    for record in records:
        run = record.details.get("reference_runtime") if record.status == "ok" else None
        by_function = (run or {}).get("seconds_by_function")
        if by_function:  # a generation: prefill once, then each decode step
            times = ", ".join(f"{md_code(name)} {1000 * min(seconds):.1f} ms" + (" per step" if name == "decode" else "")
                              for name, seconds in by_function.items() if seconds)
            lines.append(f"Reference runtime, {md_code(record.variant_id)}: {times} at best — Core AI's single-threaded "
                         "CPU reference runtime, not device latency.\n")
            continue
        if run and run.get("seconds_per_call"):
            seconds = run["seconds_per_call"]
            ops = (run.get("op_time") or {}).get("by_op", [])[:3]
            top = ("; its Profiler's top ops: " + ", ".join(f"{md_code(row['op'].removeprefix('coreai.'))} "
                                                             f"{100 * row['share']:.0f}%" for row in ops)) if ops else ""
            lines.append(f"Reference runtime, {md_code(record.variant_id)}: {1000 * min(seconds):.1f} ms per call at "
                         f"best over {len(seconds)} call(s){top} — Core AI's single-threaded CPU reference runtime, "
                         "not device latency.\n")
    return lines


def functions_cell(asset: dict) -> str:
    """The asset's functions, each with its states in parentheses: `main`, or `decode` (`kv`), `main`."""
    return ", ".join(md_code(f["name"]) + (" (" + ", ".join(md_code(s["name"]) for s in f["states"]) + ")"
                                           if f.get("states") else "") for f in asset.get("functions", []))
