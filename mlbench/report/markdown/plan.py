"""A plan diff as Markdown for a pull-request comment: the counts first, then what was added, removed and
changed (each change with its fields), long lists folded into <details>."""

from __future__ import annotations

import json
from typing import Any

from mlbench.plan_diff import Delta, PlanDiff

FOLD_AFTER = 12
"""Lists longer than this go into a collapsed <details> block."""
VALUE_WIDTH = 60


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    text = text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"
    return f"`{_cell(text)}`"


def _counts(delta: Delta, before: int, after: int) -> str:
    parts = [f"+{len(delta.added)} added", f"−{len(delta.removed)} removed", f"{len(delta.changed)} changed",
             f"{delta.unchanged} unchanged"]
    return f"{before} → {after} ({', '.join(parts)})"


def _folded(title: str, lines: list[str], count: int) -> list[str]:
    if count <= FOLD_AFTER:
        return [f"#### {title} ({count})", "", *lines, ""]
    return [f"<details><summary><b>{title} ({count})</b></summary>", "", *lines, "", "</details>", ""]


def _section(noun: str, delta: Delta) -> list[str]:
    lines: list[str] = []
    if delta.added:
        lines += _folded(f"Added {noun}", [f"- `{_cell(i)}`" for i in delta.added], len(delta.added))
    if delta.removed:
        lines += _folded(f"Removed {noun}", [f"- `{_cell(i)}`" for i in delta.removed], len(delta.removed))
    if delta.changed:
        rows = ["| " + noun[:-1] + " | field | base | head |", "|---|---|---|---|"]
        for change in delta.changed:
            first = True
            for name, (before, after) in change.fields.items():
                rows.append(f"| {f'`{_cell(change.id)}`' if first else ''} | `{_cell(name)}` | {_value(before)} "
                            f"| {_value(after)} |")
                first = False
        lines += _folded(f"Changed {noun}", rows, len(delta.changed))
    return lines


def render_plan_diff_markdown(diff: PlanDiff) -> str:
    lines = [f"## mlbench plan: `{_cell(diff.head_label)}`", "",
             f"Base `{_cell(diff.base_label)}` → head `{_cell(diff.head_label)}`.", ""]
    if diff.empty:
        lines += [f"No change to the matrix: {len(diff.head.variants)} variants, {len(diff.head.artifacts)} artifacts "
                  "to build.", ""]
        return "\n".join(lines).rstrip() + "\n"
    lines += [
        "| | base → head |", "|---|---|",
        f"| variants | {_counts(diff.variants, len(diff.base.variants), len(diff.head.variants))} |",
        f"| artifacts to build | {_counts(diff.artifacts, len(diff.base.artifacts), len(diff.head.artifacts))} |",
        "",
    ]
    lines += _section("artifacts", diff.artifacts)
    lines += _section("variants", diff.variants)
    if diff.settings:
        lines += ["#### Pipeline settings", "", "| setting | base | head |", "|---|---|---|"]
        lines += [f"| `{_cell(k)}` | {_value(b)} | {_value(h)} |" for k, (b, h) in diff.settings.items()]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
