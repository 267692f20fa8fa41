"""Where a variant loses accuracy, as Markdown: `mlbench explain` prints it, and the run reports fold one
such section per variant that carries a localization (it failed verification or passed close to its
limits; `verify.localize_within`). Pure: reads `ErrorLocalization`, writes lines."""

from __future__ import annotations

import math
from collections.abc import Sequence

import yaml

from mlbench.localization import JUMP_NEAR_OUTPUT_DB, ErrorLocalization, OpError
from mlbench.metrics import source_mark
from mlbench.records import RunRecord
from mlbench.report.text import md_cell, md_code
from mlbench.units import human_bytes

__all__ = ["localization_section", "record_localization", "render_localization"]

TOP_ROWS = 8


def _db(value: float | None) -> str:
    if value is None:
        return "exact"
    if math.isinf(value):
        return "inf" if value > 0 else "−inf (not finite)"
    return f"{value:.1f}"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}" if value >= 0.01 else f"{value:.1e}"


def _op_row(op: OpError) -> str:
    origin = op.origin
    cells = [md_code(origin.label if origin else op.name), md_cell(origin.where or "–") if origin else "–",
             md_cell(op.op_type), md_code(op.name), _db(op.snr_db), _db(op.growth_db), _share(op.share)]
    return "| " + " | ".join(cells) + " |"


def record_localization(record: RunRecord) -> ErrorLocalization | None:
    """The localization a record carries in its details, if any."""
    data = (record.details or {}).get("localization")
    return ErrorLocalization.model_validate(data) if isinstance(data, dict) else None


def _took(found: ErrorLocalization) -> str:
    """`took 3.2 s`, or for one found in the cache `took 3.2 s when computed (cached)`: never passed off as
    computed now."""
    return f"took {found.seconds:.1f} s" + (" when computed (cached)" if found.cached else "")


def render_localization(found: ErrorLocalization, *, rows: int = TOP_ROWS, every_op: bool = False,
                        heading: str = "####") -> list[str]:
    """The localization's Markdown: the first jump and the top contributors first, then modules, eager,
    advice and what could not be paired."""
    mark = source_mark(found.source)
    lines = [f"{heading} Where {md_code(found.variant)} loses accuracy", "",
             f"Compared with {md_cell(found.reference)}; {found.samples} seeded input set(s); {mark}{found.source}; "
             f"{_took(found)}. Output SNR {_db(found.output_snr_db)} dB.", ""]
    if found.first_jump is not None:
        op = found.ops[found.first_jump]
        lines += [f"**First op where the error jumps:** {md_code(op.described)} ({md_cell(op.op_type)} "
                  f"{md_code(op.name)}): SNR {_db(op.snr_db)} dB, {_db(op.growth_db)} dB lost over its inputs.", ""]
    else:
        lines += ["**No op's error jumps:** it grows gradually along the program.", ""]
    header = ["| op | where | type | program name | SNR dB | lost dB | share |", "|---|---|---|---|---:|---:|---:|"]
    top = found.top(rows)
    if top:
        lines += ["**Top ops by contribution** (share: of the output's error energy when only this op computes as "
                  "the variant does):", "", *header, *(_op_row(op) for op in top), ""]
    if found.modules:
        lines += ["**By module:**", "", "| module | where | ops | share | SNR dB | weight bytes saved |",
                  "|---|---|---:|---:|---:|---:|"]
        for module in found.modules[:rows]:
            saved = human_bytes(module.weight_bytes_saved) if module.weight_bytes_saved else "–"
            lines.append(f"| {md_code(module.module)} | {md_cell(module.where or '–')} | {module.ops} | "
                         f"{_share(module.share)} | {_db(module.snr_db)} | {saved} |")
        lines.append("")
    lines += _eager_lines(found, rows)
    lines += _advice_lines(found)
    unpaired = found.unpaired
    if unpaired:
        lines += [f"**Not paired** ({len(unpaired)} ops, never guessed):", ""]
        lines += [f"- {md_code(op.name)} ({md_cell(op.op_type)}): {md_cell(op.why_unpaired or 'no reason')}"
                  for op in unpaired[:rows]]
        lines += ([f"- … and {len(unpaired) - rows} more (`--format json` lists them all)"] if len(unpaired) > rows
                  else []) + [""]
    if every_op:
        lines += ["**Every op** (program order):", "", *header, *(_op_row(op) for op in found.ops), ""]
    lines += [f"_{md_cell(note)}_" for note in found.notes] + ([""] if found.notes else [])
    return lines


def _eager_lines(found: ErrorLocalization, rows: int) -> list[str]:
    if not found.eager:
        return []
    floor = min((m.snr_db for m in found.eager if m.snr_db is not None), default=None)
    near = [m for m in found.eager if m.snr_db is not None and floor is not None
            and m.snr_db <= floor + JUMP_NEAR_OUTPUT_DB]  # where the error is already of the output's order
    worst = sorted(near, key=lambda m: -(m.growth_db or 0.0))[:rows]
    if not worst:
        return []
    lines = ["**Against eager PyTorch** (module outputs, forward hooks; of those within "
             f"{JUMP_NEAR_OUTPUT_DB:g} dB of the worst, the ones that lose the most):", "",
             "| module | SNR dB | lost dB since the module before |", "|---|---:|---:|"]
    lines += [f"| {md_code(m.module)} | {_db(m.snr_db)} | {_db(m.growth_db) if m.growth_db is not None else '–'} |"
              for m in worst]
    return [*lines, ""]


def _advice_lines(found: ErrorLocalization) -> list[str]:
    advice = found.advice
    if advice is None:
        return []
    if not advice.exclude:
        return [f"**Advice:** {md_cell(advice.reason)}.", ""]
    kept = f", keeping {advice.kept_saving:.0%} of the weight saving" if advice.kept_saving is not None else ""
    expected = (f" ≈{_db(advice.expected_snr_db)} dB expected (estimated from the shares; floor "
                f"{advice.min_snr_db:g} dB){kept}" if advice.expected_snr_db is not None else kept)
    block = yaml.safe_dump({"optimizations": advice.override}, sort_keys=False, default_flow_style=None).rstrip()
    entries = {e for recipe in advice.override.values() for e in recipe.get("exclude", [])}
    by_ops = ("" if set(advice.exclude) <= entries else
              " (`exclude` names the ops of a module whose path would also take the modules under it)")
    return [f"**Advice:** leave {', '.join(md_code(m or '(model)') for m in advice.exclude)} uncompressed:{expected}. "
            f"{md_cell(advice.reason)}{by_ops}.", "", "```yaml", *block.splitlines(), "```", "",
            f"Add `{advice.advised_recipe}` to the target's `optimize:` (or write the pipeline with "
            f"`mlbench explain REPORT VARIANT --write-pipeline FILE`) and run it: the report shows both.", ""]


def localization_section(records: Sequence[RunRecord]) -> list[str]:
    """One folded section per record that carries a localization (or says why it could not be had)."""
    lines: list[str] = []
    for record in records:
        found = record_localization(record)
        if found is not None:
            jump = found.ops[found.first_jump].described if found.first_jump is not None else "no single op"
            lines += [f"<details><summary>Where {md_cell(record.variant_id)} loses accuracy: first jump at "
                      f"{md_cell(jump)} ({found.seconds:.1f} s{', cached' if found.cached else ''})</summary>", "",
                      *render_localization(found, heading="#####"), "</details>", ""]
        elif (error := (record.details or {}).get("localization_error")):
            lines += [f"_{md_cell(record.variant_id)}: its error could not be localized: {md_cell(error)}_", ""]
    return lines
