"""Compare two runs: per variant, how each figure moved, and which gate rules the move breaks.

Pure: two `RunReport`s and a list of rules in, a `Comparison` out. Nothing is read or printed here.

Rules (pytest-benchmark style, `METRIC:THRESHOLD`):

    latency.median:+10%        regressed when HEAD is more than 10% above BASE
    load_time:+25%
    placement.neural_engine:-5pp   regressed when the fraction falls by more than 5 percentage points
    placement.switches:+2      regressed when it rises by more than 2 (in the metric's own unit)
    verify.max_rel:>1e-2       regressed when HEAD's value is above 1e-2, whatever BASE was
    status:failed              regressed when a variant fails in HEAD but did not in BASE
                               (also status:skipped, status:gone)

A latency rule counts a change only when the threshold is crossed *and* the noise test on the raw
samples (`mlbench.compare.noise`) says the two runs differ *and*, for median and p90 rules, the bootstrap
interval of the ratio lies wholly past the threshold (a real 30% slowdown clears it; a 12% swing of
a busy machine between runs does not). A change in the other direction past the same threshold is
an improvement, under the same tests.

A rule on a figure that either run graded `unreliable` (`mlbench.stability`, recorded with the figure), or that
the two runs timed with different thread counts because one run's pool stalled (`mlbench.compare.trust`), is
inconclusive: neither a pass nor a regression, listed apart with the reason, and it never fails the gate.
Figures without a recorded grade (records written before grading, or built by hand) are judged as before.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from mlbench.compare.noise import DEFAULT_ALPHA, TEST_NAME, NoiseTest, mann_whitney_u, ratio_interval
from mlbench.compare.paired import TEST_NAME as PAIRED_TEST
from mlbench.compare.paired import PairedChange
from mlbench.compare.rules import (  # noqa: F401  (re-exported: the rules are part of compare's API)
    CORE_DEFAULT_RULES,
    STATUS_VALUES,
    Rule,
    RuleError,
    default_rules,
    parse_rule,
    parse_rules,
)
from mlbench.compare.trust import measured_spread, unreliable_sides
from mlbench.machine import machine_key, machine_words
from mlbench.machine_load import load_warning
from mlbench.metrics import compared_by_default, estimate_mark, format_value, info
from mlbench.records import RunRecord, RunReport

Group = Literal["regressed", "improved", "unchanged", "new", "gone"]
GROUPS: tuple[Group, ...] = ("regressed", "improved", "unchanged", "new", "gone")


# ---------------------------------------------------------------------------------------------
# The comparison model


class RunRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    created: str
    pipeline: str
    pipeline_sha256: str
    machine: str = Field(description="OS, architecture and CPU, in words.")
    git_commit: str | None = None
    label: str = Field(description="Where it came from: a file path or a history reference.")


class MetricDelta(BaseModel):
    """One figure in both runs and how it moved."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    unit: str
    base: float | None
    head: float | None
    base_source: str | None
    head_source: str | None
    ratio: float | None = Field(description="head / base, when both are there and base is not 0.")
    points: float | None = Field(default=None, description="For fractions: (head - base) × 100.")
    change: float | None = Field(description="head - base, in the metric's unit.")
    noise: NoiseTest | None = None
    note: str | None = Field(default=None, description="Why it is not compared, or a caveat (e.g. sources differ).")


class Finding(BaseModel):
    """A rule a variant broke (regression) or beat by the same margin (improvement)."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    metric: str
    kind: Literal["regression", "improvement"]
    message: str
    noise: str | None = Field(default=None, description="The noise test's verdict, for latency rules.")


class VariantComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variant_id: str
    model: str
    group: Group
    base_status: str | None
    head_status: str | None
    deltas: list[MetricDelta]
    findings: list[Finding]
    held_back: list[str] = Field(default_factory=list,
                                 description="Threshold crossings the noise test did not confirm.")
    inconclusive: list[str] = Field(default_factory=list,
                                    description="Rules not judged because a side's figure was graded unreliable, "
                                    "or the sides timed it with different thread counts after a stalled pool "
                                    "(neither a pass nor a regression), each with the reason; left out when none.")

    @model_serializer(mode="wrap")
    def _leave_out_no_inconclusive(self, handler: SerializerFunctionWrapHandler):  # no return annotation: the
        data = handler(self)  # model's own schema stays; comparisons without one keep their JSON as it was
        if isinstance(data, dict) and not data.get("inconclusive", True):
            del data["inconclusive"]
        return data


class Interleaved(BaseModel):
    """How `mlbench ab` measured: both sides alternately on one machine, judged by paired rounds."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(description="The most rounds a variant was given.")
    min_rounds: int | None = Field(default=None, description="Rounds before the first look at whether every "
                                   "latency rule's verdict was settled (then every 20 rounds).")
    rounds_run: dict[str, int] = Field(default_factory=dict, description="Rounds each timed variant ran.")
    calls: int = Field(description="Timed calls per side per round.")
    warmup: int = Field(description="Untimed calls before each side's timed calls, every round.")
    instances: int = Field(default=1, description="Copies of each side's model, each in memory of its own, "
                           "taking the rounds in turn.")
    order: str = Field(description="Which side went first in successive rounds, e.g. 'A B, B A, ...'.")
    load: dict | None = Field(default=None, description="The machine's load while the rounds ran.")
    skipped: dict[str, str] = Field(default_factory=dict, description="Variants not timed, with the reason.")


class Comparison(BaseModel):
    """Two runs, variant by variant; `regressed` decides the exit code of `mlbench compare`."""

    model_config = ConfigDict(extra="forbid")

    base: RunRef
    head: RunRef
    rules: list[str]
    noise_test: str = Field(description="The test that guards latency rules against noise.")
    alpha: float
    variants: list[VariantComparison]
    warnings: list[str]
    regressed: bool
    counts: dict[str, int]
    interleaved: Interleaved | None = Field(
        default=None, description="Set by `mlbench ab`: both sides measured alternately in one run.")



def run_ref(report: RunReport, label: str, git_commit: str | None = None) -> RunRef:
    return RunRef(run_id=report.run_id, created=report.created, pipeline=report.pipeline.name,
                  pipeline_sha256=report.pipeline.sha256, machine=machine_words(report.machine),
                  git_commit=git_commit, label=label)


def _samples(record: RunRecord, metric: str = "latency.median") -> list[float] | None:
    """The raw samples behind `metric`: its own (a generation's prefill and decode steps), else the latency's."""
    own = record.metrics.get(metric)
    if own is not None and own.samples:
        return list(own.samples)
    return list(record.latency.samples) if record.latency is not None else None


def _delta(metric: str, base: RunRecord, head: RunRecord, alpha: float,
           paired: dict[str, PairedChange] | None = None) -> MetricDelta | None:
    b, h = base.metrics.get(metric), head.metrics.get(metric)
    if b is None and h is None:
        return None
    ref = h if h is not None else b
    assert ref is not None
    unit = ref.unit
    note = None
    if b is None or h is None or b.value is None or h.value is None:
        bv = b.value if b is not None else None
        hv = h.value if h is not None else None
        missing = [(side, m) for side, m in (("base", b), ("head", h)) if m is None or m.value is None]
        note = "; ".join(f"{side}: {m.reason if m is not None else 'not reported'}" for side, m in missing)
        return MetricDelta(metric=metric, unit=unit, base=bv, head=hv, base_source=b.source if b else None,
                           head_source=h.source if h else None, ratio=None, change=None, note=note)
    bv, hv = b.value, h.value
    if b.source != h.source:
        note = f"base is {b.source}, head is {h.source}"
    noise = None
    known = info(metric)
    ratio = (hv / bv) if bv else None
    if paired is not None and metric in paired:  # interleaved rounds: the paired estimate and test
        ratio, noise = paired[metric].ratio, paired[metric].noise
    elif known is not None and known.sampled and b.source == "measured" and h.source == "measured":
        bs, hs = _samples(base, metric), _samples(head, metric)
        if bs is None or hs is None:
            noise = NoiseTest(test=TEST_NAME, n_base=len(bs or []), n_head=len(hs or []), u=None, p_value=None,
                              alpha=alpha, significant=False, reason="a run kept no raw samples")
        else:
            noise = mann_whitney_u(bs, hs, alpha)
            statistic = {"latency.median": "median", "latency.p90": "p90"}.get(metric)
            if statistic:
                noise.interval = ratio_interval(bs, hs, statistic, alpha)
    return MetricDelta(
        metric=metric, unit=unit, base=bv, head=hv, base_source=b.source, head_source=h.source,
        ratio=ratio, points=(hv - bv) * 100 if known is not None and known.is_fraction else None,
        change=hv - bv, noise=noise, note=note,
    )


def describe_change(d: MetricDelta) -> str:
    if d.base is None or d.head is None:
        return "not comparable"
    if d.points is not None:
        return f"{d.points:+.1f} pp"
    if d.ratio is not None and d.unit in ("ms", "s", "bytes"):
        return f"{(d.ratio - 1) * 100:+.1f}%"
    if d.ratio is not None:
        return f"×{d.ratio:.3g}"
    return f"{d.change:+g}"


def _crossing(rule: Rule, d: MetricDelta) -> int:
    """+1: the change breaks the rule; -1: it beats it by the same margin; 0: neither."""
    if d.head is None:
        return 0
    if rule.kind == "above":  # a limit needs only HEAD's value
        bad_now, bad_before = d.head > rule.threshold, d.base is not None and d.base > rule.threshold
        return 1 if bad_now else (-1 if bad_before else 0)
    if rule.kind == "below":
        bad_now, bad_before = d.head < rule.threshold, d.base is not None and d.base < rule.threshold
        return 1 if bad_now else (-1 if bad_before else 0)
    if d.base is None:
        return 0
    if rule.kind == "relative":
        if d.ratio is None:
            return 0
        moved = (d.ratio - 1) * 100 * rule.direction
    elif rule.kind == "points":
        moved = (d.head - d.base) * 100 * rule.direction
    else:
        moved = (d.head - d.base) * rule.direction
    if moved > rule.threshold + 1e-12:
        return 1
    if -moved > rule.threshold + 1e-12:
        return -1
    return 0


def _noise_floor(rule: Rule, d: MetricDelta, spread: float = 0.0) -> str | None:
    """The noise floor, in words, when a change rule's change lies within it (an allocator's noise): the
    catalog's fixed floor, widened to the spreads both runs measured for the figure, summed (`Metric.spread`); None
    when the change is past it, or the metric has no floor."""
    known = info(rule.metric)
    if (known is None or known.noise_floor is None or rule.kind in ("above", "below") or d.base is None
            or d.head is None):
        return None
    relative, absolute = known.noise_floor
    if abs(d.head - d.base) > max(relative * abs(d.base), absolute, spread):
        return None
    fixed = f"{relative * 100:g}%, {format_value(absolute, d.unit)}"
    return (f"max({fixed}, the measured spread {format_value(spread, d.unit)})"
            if spread > max(relative * abs(d.base), absolute) else f"max({fixed})")


def _interval_clears(rule: Rule, crossing: int, interval: tuple[float, float]) -> bool:
    """Does the whole interval of head/base lie past the rule's threshold, on the crossing's side?"""
    low, high = ((value - 1) * 100 * rule.direction for value in interval)
    nearest = min(low, high) if crossing > 0 else -max(low, high)
    return nearest > rule.threshold


def _check(rule: Rule, d: MetricDelta, findings: list[Finding], held_back: list[str], spread: float = 0.0) -> None:
    crossing = _crossing(rule, d)
    if not crossing:
        return
    floor = _noise_floor(rule, d, spread)
    if floor is not None:
        held_back.append(f"{rule.text}: {format_value(d.base, d.unit)} → {format_value(d.head, d.unit)}, within "
                         f"{rule.metric}'s noise floor ({floor})")
        return
    kind = "regression" if crossing > 0 else "improvement"
    mark = estimate_mark  # estimates say so
    message = (f"{mark(d.base_source)}{format_value(d.base, d.unit)} → {mark(d.head_source)}{format_value(d.head, d.unit)} "
               f"({describe_change(d)})")
    if d.note:
        message += f"; {d.note}"
    verdict = None
    if d.noise is not None:
        verdict = d.noise.describe()
        if d.noise.p_value is not None and not d.noise.significant:
            held_back.append(f"{rule.text}: {message}, but {verdict}")
            return
        if rule.kind == "relative" and d.noise.interval is not None and not _interval_clears(rule, crossing,
                                                                                            d.noise.interval):
            held_back.append(f"{rule.text}: {message}, but the interval does not clear the threshold ({verdict})")
            return
    findings.append(Finding(rule=rule.text, metric=rule.metric, kind=kind, message=message, noise=verdict))


def _judge(rule: Rule, d: MetricDelta, base: RunRecord | None, head: RunRecord, v: dict[str, list],
           paired: dict[str, PairedChange] | None = None) -> None:
    """`_check` the rule (its noise floor widened to the spreads both sides measured, summed), unless a side's
    figure is unreliable (`mlbench.compare.trust`): then it is inconclusive, with the reason."""
    sides = unreliable_sides(rule.metric, base, head, (paired or {}).get(rule.metric),
                             rule.threshold if rule.kind == "relative" else None)
    if not sides:
        _check(rule, d, v["findings"], v["held_back"], measured_spread(rule.metric, base, head))
        return
    change = f"{format_value(d.base, d.unit)} → {format_value(d.head, d.unit)} ({describe_change(d)})"
    v["inconclusive"].append(f"{rule.text}: {change}, inconclusive: {'; '.join(sides)}; measure again on a quieter "
                             "machine, or both sides interleaved with `mlbench ab`")


def _status_finding(rule: Rule, base: RunRecord | None, head: RunRecord | None) -> Finding | None:
    before = base.status if base is not None else None
    after = head.status if head is not None else "gone"
    if after == rule.status and before != rule.status:
        detail = f"{before or 'new'} → {after}"
        if head is not None and head.error:
            detail += f": {head.error}"
        return Finding(rule=rule.text, metric="status", kind="regression", message=detail)
    if before == rule.status and after not in (rule.status, "gone"):
        return Finding(rule=rule.text, metric="status", kind="improvement", message=f"{before} → {after}")
    return None


def compare(base: RunReport, head: RunReport, rules: list[Rule] | None = None, *, alpha: float = DEFAULT_ALPHA,
            base_label: str = "base", head_label: str = "head", base_commit: str | None = None,
            head_commit: str | None = None, paired: dict[str, dict[str, PairedChange]] | None = None,
            interleaved: Interleaved | None = None) -> Comparison:
    """Match variants by id and judge every rule; see the module docstring for the rule forms.

    `paired` (variant id → metric → change) replaces the two-sample test and ratio of those metrics
    with paired ones over interleaved rounds; `interleaved` says how those rounds ran (`mlbench ab`).
    """
    rules = list(rules) if rules is not None else parse_rules(default_rules())
    compared = compared_by_default()
    metrics = compared + [r.metric for r in rules if r.kind != "status" and r.metric not in compared]
    base_by_id = {r.variant_id: r for r in base.records}
    head_by_id = {r.variant_id: r for r in head.records}
    for side, report, by_id in (("base", base, base_by_id), ("head", head, head_by_id)):
        if len(by_id) != len(report.records):  # `check_report` names the file and place; this guards the API
            raise ValueError(f"{side} lists a variant more than once; a report holds each variant once")
    order = [r.variant_id for r in head.records] + [v for v in base_by_id if v not in head_by_id]

    variants: list[VariantComparison] = []
    for variant_id in order:
        b, h = base_by_id.get(variant_id), head_by_id.get(variant_id)
        deltas: list[MetricDelta] = []
        findings: list[Finding] = []
        held_back: list[str] = []
        judged: dict[str, list] = {"findings": findings, "held_back": held_back, "inconclusive": []}
        if b is not None and h is not None:
            for metric in metrics:
                d = _delta(metric, b, h, alpha, (paired or {}).get(variant_id))
                if d is not None:
                    deltas.append(d)
            by_metric = {d.metric: d for d in deltas}
            for rule in rules:
                if rule.kind != "status" and rule.metric in by_metric:
                    _judge(rule, by_metric[rule.metric], b, h, judged, (paired or {}).get(variant_id))
        elif h is not None:  # new: limits still apply to its own figures
            for rule in rules:
                if rule.kind in ("above", "below") and rule.metric in h.metrics:
                    d = _delta(rule.metric, h.model_copy(update={"metrics": {}}), h, alpha)
                    if d is not None and d.head is not None:
                        _judge(rule, d, None, h, judged)
        for rule in rules:
            if rule.kind == "status":
                finding = _status_finding(rule, b, h)
                if finding is not None:
                    findings.append(finding)
        if any(f.kind == "regression" for f in findings):
            group: Group = "regressed"
        elif b is None:
            group = "new"
        elif h is None:
            group = "gone"
        elif findings:
            group = "improved"
        else:
            group = "unchanged"
        ref = h if h is not None else b
        assert ref is not None  # every id in order comes from base or head
        variants.append(VariantComparison(
            variant_id=variant_id, model=ref.model, group=group, base_status=b.status if b else None,
            head_status=h.status if h else None, deltas=deltas, findings=findings, held_back=held_back,
            inconclusive=judged["inconclusive"],
        ))

    warnings = []
    if machine_key(base.machine) != machine_key(head.machine):
        warnings.append(f"the runs are from different machines ({machine_words(base.machine)} vs "
                        f"{machine_words(head.machine)}): latency differences may be the machine's")
    if interleaved is not None:
        pass  # two pipeline files measured side by side: that they differ is the point
    elif base.pipeline.name != head.pipeline.name:
        warnings.append(f"the runs are of different pipelines ({base.pipeline.name} vs {head.pipeline.name})")
    elif base.pipeline.sha256 != head.pipeline.sha256:
        warnings.append("the pipeline file changed between the runs")
    if interleaved is None and (loaded := load_warning(base.machine.get("load"), head.machine.get("load"))):
        warnings.append(loaded)
    if head.finished is None or base.finished is None:
        warnings.append("a run was interrupted: its report is partial")
    counts = {g: sum(v.group == g for v in variants) for g in GROUPS}
    noise_test = (f"{TEST_NAME} (two-sided) on the raw latency samples, α={alpha:g}, and a seeded bootstrap "
                  f"{100 * (1 - alpha):g}% interval of the median (or p90) ratio")
    if interleaved is not None:
        noise_test = (f"{PAIRED_TEST} (two-sided) on the log ratios head/base of up to {interleaved.rounds} "
                      f"interleaved rounds, α={alpha:g}, with the Hodges–Lehmann estimate of the ratio and its "
                      f"{100 * (1 - alpha):g}% signed-rank interval")
    return Comparison(
        base=run_ref(base, base_label, base_commit), head=run_ref(head, head_label, head_commit),
        rules=[r.text for r in rules],
        noise_test=noise_test + ": a latency rule counts a change only when the threshold is crossed, the test "
        "finds the two sides differ, and the whole interval lies past the threshold",
        alpha=alpha, variants=variants, warnings=warnings, regressed=counts["regressed"] > 0, counts=counts,
        interleaved=interleaved,
    )
