"""A generative model's section of the Markdown report: one row per variant and prompt length, with prefill
over the prompt, decode per token, tokens per second against eager's, the key/value cache's bytes, how far
greedy generation stayed from eager float32's, and any per-chip estimates, each figure marked by its source.
"""

from __future__ import annotations

from mlbench.config.generate import PROMPT_AXIS
from mlbench.generate.metrics import (
    DECODE,
    ESTIMATED_DECODE,
    ESTIMATED_PREFILL,
    KV_CACHE,
    LOGITS_MAX_REL,
    PREFILL,
    TOKEN_AGREEMENT,
    TOKENS_PER_S,
)
from mlbench.metrics import format_ms, source_mark
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric, RunRecord
from mlbench.report.markdown.layout import Column, render_table
from mlbench.report.text import md_code
from mlbench.stability import suffix
from mlbench.units import human_bytes

HEADING = "#### Generation"


def fmt_metric(metric: Metric | None, fmt=format_ms) -> str:
    """A figure with its source's mark (`≈`, `†`, `‡`) and its stability's (`⚠`, `?`: the model table's note says
    why), or – when absent (as the model table writes them)."""
    if metric is None or metric.value is None:
        return "–"
    return source_mark(metric.source) + fmt(metric.value) + suffix(metric.stability)  # ⚠ unreliable, ? noisy


def generative(records: list[RunRecord]) -> list[RunRecord]:
    """The records of generative variants (they carry the prompt axis) that ran."""
    return [r for r in records if PROMPT_AXIS in r.axes and r.status == "ok"]


def base_label(record: RunRecord) -> str:
    """The variant label without its prompt length: what one export, measured at each prompt, shares."""
    return "/".join([record.backend, *(v for k, v in record.axes.items() if k != PROMPT_AXIS)])


def _chips(records: list[RunRecord], prefix: str) -> list[str]:
    return list(dict.fromkeys(n.removeprefix(prefix) for r in records for n in r.metrics if n.startswith(prefix)))


def _vs_eager(record: RunRecord, eager: dict[str, RunRecord]) -> str:
    base = eager.get(record.axes[PROMPT_AXIS])
    mine, theirs = record.metrics.get(DECODE), base.metrics.get(DECODE) if base is not None else None
    if mine is None or theirs is None or not mine.value or theirs.value is None:
        return "–"
    return f"{theirs.value / mine.value:.2f}×"


def _fraction(value: float) -> str:
    return f"{value * 100:.0f}%"


def generation_section(records: list[RunRecord]) -> list[str]:
    """The section, or nothing when the model is not generative (or none of its generative variants ran)."""
    rows = generative(records)
    if not rows:
        return []
    eager = {r.axes[PROMPT_AXIS]: r for r in rows if base_label(r) == REFERENCE}
    cells: dict[str, list[str]] = {}
    prefill_chips, decode_chips = _chips(rows, ESTIMATED_PREFILL), _chips(rows, ESTIMATED_DECODE)
    for r in rows:
        m = r.metrics.get
        for name, value in (
            ("variant", md_code(base_label(r))), ("prompt", r.axes[PROMPT_AXIS].removeprefix("p")),
            ("prefill", fmt_metric(m(PREFILL))), ("decode", fmt_metric(m(DECODE))),
            ("tokens", fmt_metric(m(TOKENS_PER_S), lambda v: f"{v:.0f}")), ("vs", _vs_eager(r, eager)),
            ("kv", fmt_metric(m(KV_CACHE), lambda v: human_bytes(int(v)))),
            ("agreement", fmt_metric(m(TOKEN_AGREEMENT), _fraction) if m(TOKEN_AGREEMENT) else
             ("reference" if base_label(r) == REFERENCE else "–")),
            ("logits", fmt_metric(m(LOGITS_MAX_REL), lambda v: f"{v:.2e}")),
            *((f"p.{c}", fmt_metric(m(ESTIMATED_PREFILL + c))) for c in prefill_chips),
            *((f"d.{c}", fmt_metric(m(ESTIMATED_DECODE + c))) for c in decode_chips),
        ):
            cells.setdefault(name, []).append(value)
    columns = [
        Column("Variant", cells["variant"], priority=0), Column("Prompt", cells["prompt"], right=True, priority=1),
        Column("Prefill ms", cells["prefill"], right=True, priority=2),
        Column("Decode ms/token", cells["decode"], right=True, priority=2),
        Column("Tokens/s", cells["tokens"], right=True, priority=4),
        Column("vs eager", cells["vs"], right=True, priority=5),
        Column("KV cache", cells["kv"], right=True, priority=3),
        Column("Tokens = eager", cells["agreement"], right=True, priority=3),
        Column("Logits max_rel", cells["logits"], right=True, priority=6),
        *(Column(f"≈prefill ms {c}", cells[f"p.{c}"], right=True, priority=7) for c in prefill_chips),
        *(Column(f"≈decode ms {c}", cells[f"d.{c}"], right=True, priority=7) for c in decode_chips),
    ]
    legend = ("_Prefill_: the prompt to the first token's logits (median of the timed calls); _decode_: ms per "
              "generated token (median of the timed steps), _tokens/s_ its inverse, _vs eager_ eager "
              f"{REFERENCE}'s decode ÷ this one at the same prompt; _KV cache_: the key/value cache's bytes at the "
              "context; _tokens = eager_: share of greedy tokens equal to eager float32's, decoding eager's tokens; "
              "_logits max_rel_: the worst step's.")
    return [HEADING, "", *render_table(columns, max_columns=9), legend, ""]
