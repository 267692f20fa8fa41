"""A comparison as Markdown: verdict first, then variants grouped regressed / improved / unchanged /
new / gone — ready for a pull-request comment or `$GITHUB_STEP_SUMMARY`."""

from __future__ import annotations

from mlbench.compare.comparison import (
    Comparison,
    Interleaved,
    MetricDelta,
    RunRef,
    VariantComparison,
    describe_change,
)
from mlbench.metrics import estimate_mark, format_value, headline
from mlbench.report.text import md_cell, md_code, md_inline

TITLES = {"regressed": "Regressed", "improved": "Improved", "unchanged": "Unchanged", "new": "New", "gone": "Gone"}


def _ref(label: str, ref: RunRef) -> str:
    commit = f", commit {md_code(ref.git_commit[:10])}" if ref.git_commit else ""
    return (f"- **{label}**: run {md_code(ref.run_id)} of {md_code(ref.pipeline)} ({md_cell(ref.created)}{commit}; "
            f"{md_cell(ref.machine)}) from {md_code(ref.label)}")


def _value(d: MetricDelta, side: str) -> str:
    value = d.base if side == "base" else d.head
    source = d.base_source if side == "base" else d.head_source
    return estimate_mark(source) + format_value(value, d.unit)


def _noise(d: MetricDelta) -> str:
    if d.noise is None:
        return ""
    if d.noise.p_value is None:
        return "no test"
    return f"p={d.noise.p_value:.2g}"


def _summary_row(v: VariantComparison) -> str:
    by_metric = {d.metric: d for d in v.deltas}
    cells = [f"{v.base_status or '–'} → {v.head_status or '–'}"]
    for name in headline():
        d = by_metric.get(name)
        if d is None or (d.base is None and d.head is None):
            cells.append("–")
            continue
        text = f"{_value(d, 'base')} → {_value(d, 'head')}"
        if d.base is not None and d.head is not None:
            text += f" ({describe_change(d)}"
            text += f", {_noise(d)})" if _noise(d) else ")"
        cells.append(text)
    return "| " + " | ".join([md_code(v.variant_id), *(md_cell(c) for c in cells)]) + " |"


def _interleaved(info: Interleaved) -> str:
    from mlbench.machine_load import describe

    load = f" Load meanwhile: {describe(info.load)}." if info.load else ""
    ran = sorted(set(info.rounds_run.values()))
    rounds = f"{info.rounds} rounds"
    if info.min_rounds is not None and info.min_rounds < info.rounds:
        span = f"{ran[0]}" if len(ran) == 1 else f"{ran[0]}–{ran[-1]}"
        rounds = (f"up to {info.rounds} rounds, stopping (after at least {info.min_rounds}) once more rounds could "
                  f"not change a latency rule's verdict" + (f"; ran {span}" if ran else ""))
    copies = (f"; each side's model loaded {info.instances} times, each copy in memory of its own, the copies "
              "taking the rounds in turn" if info.instances > 1 else "")
    return (f"Measured interleaved on one machine: {rounds}; each side {info.calls} timed calls per round after "
            f"{info.warmup} untimed, in the order {info.order}{copies}; figures pool every round, changes are the "
            f"Hodges–Lehmann estimate of the per-round ratios.{load}")


def render_comparison_markdown(comparison: Comparison) -> str:
    c = comparison
    counts = ", ".join(f"{n} {g}" for g, n in c.counts.items() if n)
    verdict = ("**Regression**: " + ", ".join(md_code(v.variant_id) for v in c.variants if v.group == "regressed")
               if c.regressed else "**No regression**")
    command = "ab" if c.interleaved is not None else "compare"
    unsure = [(v, why) for v in c.variants for why in v.inconclusive]
    if unsure:  # never a pass: said beside the verdict
        on = ("on unreliable figures" if all("figure is" in why for _v, why in unsure)
              else "on figures that cannot be compared")
        counts += f"; {len(unsure)} {'rule' if len(unsure) == 1 else 'rules'} inconclusive {on}"
    lines = [f"## mlbench {command}: {md_cell(c.base.pipeline)}", "", f"{verdict} ({counts}).", "",
             _ref("Base", c.base), _ref("Head", c.head), "",
             "Rules: " + ", ".join(md_code(r) for r in c.rules) + ".",
             f"Noise guard: {md_cell(c.noise_test)}.", ""]
    if c.interleaved is not None:
        lines += [_interleaved(c.interleaved), ""]
    for warning in c.warnings:
        lines.append(f"> warning: {md_inline(warning)}")
    if c.warnings:
        lines.append("")

    for group in ("regressed", "improved"):
        members = [v for v in c.variants if v.group == group]
        if not members:
            continue
        lines += [f"### {TITLES[group]} ({len(members)})", "", "| variant | rule | change | noise test |",
                  "|---|---|---|---|"]
        for v in members:
            for f in v.findings:
                if group == "regressed" and f.kind != "regression":
                    continue
                lines.append(f"| {md_code(v.variant_id)} | {md_code(f.rule)} | {md_cell(f.message)} | "
                             f"{md_cell(f.noise or '–')} |")
        lines.append("")

    header = ["variant", "status", *headline()]
    table_head = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    unchanged = [v for v in c.variants if v.group == "unchanged"]
    if unchanged:
        lines += [f"### Unchanged ({len(unchanged)})", "", "<details><summary>figures</summary>", "", *table_head]
        lines += [_summary_row(v) for v in unchanged]
        lines += ["", "</details>", ""]
    for group in ("new", "gone"):
        members = [v for v in c.variants if v.group == group]
        if members:
            lines += [f"### {TITLES[group]} ({len(members)})", ""]
            lines += [f"- {md_code(v.variant_id)} ({v.head_status or v.base_status})" for v in members]
            lines.append("")
    if c.interleaved is not None and c.interleaved.skipped:
        lines += [f"### Not timed ({len(c.interleaved.skipped)})", ""]
        lines += [f"- {md_code(vid)}: {md_cell(why)}" for vid, why in c.interleaved.skipped.items()]
        lines.append("")
    if unsure:
        lines += [f"### Inconclusive ({len(unsure)})", "",
                  "Not judged, neither a pass nor a regression: a side's figure was graded unreliable "
                  "(docs/running.md, Stability), or the sides timed it with different thread counts:", ""]
        lines += [f"- {md_code(v.variant_id)}: {md_inline(why)}" for v, why in unsure]
        lines.append("")
    held = [(v, h) for v in c.variants for h in v.held_back]
    if held:
        lines += ["### Within noise (not counted)", "",
                  "These crossed a threshold, but not by more than the noise (the samples' test, or the figure's "
                  "noise floor) allows:", ""]
        lines += [f"- {md_code(v.variant_id)}: {md_cell(h)}" for v, h in held]
    return "\n".join(lines).rstrip() + "\n"
