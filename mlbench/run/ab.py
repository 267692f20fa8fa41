"""`mlbench ab`: two pipelines' matching variants measured alternately on one machine (Chromium's
Pinpoint, the Rust compiler's perf runs), so drift — another job starting, a thermal step, a
noisy neighbour — hits both sides alike.

Variants are matched by id; each side's artifact is exported as usual (through the cache) and loaded
through the backend's `call_timer` as several copies (`instances`), each built afresh into memory of
its own and built alternately with the other side's, so that where a copy lands in memory biases
neither side. Then, per variant, rounds alternate the order of the sides (A B, B A, A B, ...) and each
side's copies take the rounds in turn: in each round each side makes `warmup` untimed and `calls`
timed calls. After `min_rounds`, and every CHECK_EVERY rounds after, the rounds stop once no relative
latency rule's verdict could change (`paired.settled`); else they run to `rounds`. The verdict
(`mlbench.compare.comparison.compare` with paired changes) judges the per-round ratios head / base,
so it is the same rules, Markdown and JSON as `mlbench compare`.

Before the rounds, each side's first copy takes the thread-pool stall check `mlbench run` takes before its
timed calls (`mlbench.thread_check`): where either side's pool is stalled (its threads waiting for cores other
processes hold), every copy of both sides is switched to one thread for the rounds, so that the pair compares
the models, not a stalled pool against a well one; the checks go in each record's `details.ab_thread_check`.
ExecuTorch's pool is process-wide and a switch reloads the method on it (`backends/executorch/threads.py`),
which every copy of both sides holds at once here: its timers offer no switch, and are timed as configured.

Unlike `mlbench run`, everything here happens in this process (no supervised children, no
limits): the sides alternate blocks of calls back to back, which a pipe round trip per block would
disturb. docs/compare-and-ci.md says so to users.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlbench import __version__
from mlbench.backends.base import CallTimer, VariantSkipped
from mlbench.compare.comparison import Comparison, Interleaved, compare
from mlbench.compare.noise import DEFAULT_ALPHA
from mlbench.compare.paired import (
    CHECK_EVERY,
    DEFAULT_CALLS,
    DEFAULT_INSTANCES,
    DEFAULT_MIN_ROUNDS,
    DEFAULT_ROUNDS,
    DEFAULT_WARMUP,
    PairedChange,
    paired_change,
    settled,
)
from mlbench.compare.rules import Rule, default_rules, parse_rules
from mlbench.config.pipeline_file import Pipeline
from mlbench.errors import located_error
from mlbench.machine import snapshot
from mlbench.machine_load import load_between, sample
from mlbench.matrix import Plan, Variant, expand
from mlbench.records import Metric, PipelineInfo, RunRecord, RunReport
from mlbench.run.tasks import WorkContext, utc_now
from mlbench.store.cache import ArtifactCache
from mlbench.thread_check import ThreadCheck
from mlbench.timing import percentile, quiet_heap, summarise

ORDER = "A B, B A, A B, B A, ... (A: base, B: head)"


@dataclass(frozen=True)
class AbSettings:
    rounds: int = DEFAULT_ROUNDS  # at most
    calls: int = DEFAULT_CALLS  # timed calls per side per round
    warmup: int = DEFAULT_WARMUP  # untimed calls before each side's timed calls, every round
    min_rounds: int = DEFAULT_MIN_ROUNDS  # before the first look at whether the rules' verdicts are settled
    instances: int = DEFAULT_INSTANCES  # copies of each side's model, each in its own memory, taking rounds in turn

    @property
    def first_look(self) -> int:
        return min(self.min_rounds, self.rounds)


@dataclass
class _Side:
    label: str
    pipeline: Pipeline
    ctx: WorkContext
    records: dict[str, RunRecord] = field(default_factory=dict)

    @classmethod
    def of(cls, label: str, pipeline: Pipeline) -> _Side:
        cache = ArtifactCache(pipeline.cache_dir)
        return cls(label, pipeline, WorkContext(pipeline.config, pipeline.base_dir, cache))

    def timer(self, variant: Variant) -> CallTimer:
        """One copy of the variant, built, exported and loaded into memory of its own."""
        backend = self.ctx.backend(variant)
        why_not = (backend.untimeable(variant) if variant.prompt is None else
                   "mlbench ab interleaves calls of one forward pass; a generative variant (prefill, then decode steps) "
                   "is measured by mlbench run")
        if why_not is not None:  # before building or exporting anything
            raise VariantSkipped(why_not)
        self.ctx.forget_model()
        try:
            model = self.ctx.model(variant.model)
            with self.ctx.timed("export"):
                exported = backend.export(model, variant)
            return backend.call_timer(model, exported, variant)
        finally:
            self.ctx.forget_model()  # the timer holds what it needs

    def report(self, run_id: str, created: str, machine: dict[str, Any], settings: AbSettings) -> RunReport:
        records = list(self.records.values())
        return RunReport(
            mlbench_version=__version__, run_id=run_id, created=created, finished=utc_now(),
            pipeline=PipelineInfo(name=self.pipeline.config.name, path=str(self.pipeline.path),
                                  sha256=self.pipeline.sha256),
            machine=machine, settings={"ab": {"rounds": settings.rounds, "min_rounds": settings.first_look,
                                              "calls": settings.calls, "warmup": settings.warmup,
                                              "instances": settings.instances}, "seed": self.pipeline.config.seed},
            records=records, stage_seconds={k: round(v, 6) for k, v in self.ctx.stage_seconds.items()},
            summary={s: sum(r.status == s for r in records) for s in ("ok", "failed", "skipped")},
        )


def _record(variant: Variant, status: str, started: str, t0: float, **fields: Any) -> RunRecord:
    return RunRecord(variant_id=variant.id, model=variant.model, backend=variant.backend, axes=dict(variant.axes),
                     artifact_id=variant.artifact_id, status=status, started=started,
                     seconds=round(time.perf_counter() - t0, 6), **fields)


def _stats(block: list[float]) -> dict[str, float]:
    ordered = sorted(block)
    return {"latency.median": statistics.median(ordered), "latency.best": ordered[0],
            "latency.p90": percentile(ordered, 0.9)}


Blocks = tuple[list[list[float]], list[list[float]]]


def interleave(a: Sequence[CallTimer], b: Sequence[CallTimer], settings: AbSettings,
               done: Callable[[Blocks], bool] | None = None) -> Blocks:
    """Each side's timed blocks, one per round, with the sides' order alternating round by round and
    each side's copies taking the rounds in turn (round r: copy r mod copies).

    After `settings.min_rounds` rounds, and every CHECK_EVERY rounds after, `done(blocks)` may stop
    the rounds before `settings.rounds`."""
    blocks: Blocks = ([], [])
    with quiet_heap():
        for r in range(settings.rounds):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                copies = (a, b)[side]
                timer = copies[r % len(copies)]
                blocks[side].append(timer.time(settings.calls, settings.warmup))
            run = r + 1
            if (done is not None and run < settings.rounds and run >= settings.first_look
                    and (run - settings.first_look) % CHECK_EVERY == 0 and done(blocks)):
                break
    return blocks


def _paired_changes(blocks: Blocks, alpha: float) -> dict[str, PairedChange]:
    stats = [[_stats(block) for block in side_blocks] for side_blocks in blocks]
    return {name: paired_change([s[name] for s in stats[0]], [s[name] for s in stats[1]], alpha)
            for name in stats[0][0]}


def settled_for(rules: list[Rule], alpha: float) -> Callable[[Blocks], bool]:
    """Stop the rounds once no relative rule on a paired metric could change its verdict with more."""
    watched = [r for r in rules if r.kind == "relative"]

    def done(blocks: Blocks) -> bool:
        changes = _paired_changes(blocks, alpha)
        return all(settled(changes[r.metric], r.threshold) for r in watched if r.metric in changes)

    return done


Checks = tuple[ThreadCheck | None, ThreadCheck | None]


def check_pools(a: Sequence[CallTimer], b: Sequence[CallTimer]) -> Checks:
    """Each side's stall check on its first copy (base, head); where either side's pool is stalled, every copy
    of both sides is switched to one thread for the rounds (both sides alike)."""
    checks = (a[0].check_threads() if a else None, b[0].check_threads() if b else None)
    if any(check is not None and check.stalled for check in checks):
        for timer in (*a, *b):
            timer.use_threads(1)
    return checks


def one_thread(checks: Checks) -> bool:
    return any(check is not None and check.stalled for check in checks)


def _thread_details(checks: Checks) -> dict[str, Any]:
    if all(check is None for check in checks):
        return {}
    details: dict[str, Any] = {"ab_thread_check": {label: check.details() if check is not None else None
                                                   for label, check in zip(("base", "head"), checks)}}
    if one_thread(checks):
        stalled = next(check for check in checks if check is not None and check.stalled)
        details["ab_threads"] = (f"both sides measured with 1 thread: {stalled.configured} threads read "
                                 f"{stalled.configured_ms:.3g} ms against {stalled.one_thread_ms:.3g} ms with 1 in a "
                                 "burst before the rounds (a stalled thread pool: the other threads wait for cores "
                                 "other processes hold)")
    return details


def _timed_record(variant: Variant, blocks: list[list[float]], settings: AbSettings, started: str,
                  t0: float, checks: Checks = (None, None)) -> RunRecord:
    pooled = [s for block in blocks for s in block]
    latency = summarise(pooled, warmup=settings.warmup, threads=1 if one_thread(checks) else None,
                        total_s=sum(pooled) / 1e3, stopped_by="repeats")
    metrics = {name: Metric.measured(value, "ms") for name, value in
               (("latency.median", latency.median), ("latency.best", latency.best), ("latency.p90", latency.p90))}
    return _record(variant, "ok", started, t0, metrics=metrics, latency=latency,
                   details={"ab_rounds": len(blocks), "ab_round_medians": [statistics.median(b) for b in blocks],
                            **_thread_details(checks)})


def run_ab(base: Pipeline, head: Pipeline, rules: list[Rule] | None = None, *, settings: AbSettings | None = None,
           alpha: float = DEFAULT_ALPHA, select: Callable[[str], bool] | None = None,
           on_variant: Callable[[str, str], None] | None = None, base_label: str = "base", head_label: str = "head",
           base_commit: str | None = None, head_commit: str | None = None) -> Comparison:
    """Measure the variants BASE and HEAD share, interleaved, and compare them with paired statistics.

    select(variant_id) picks which shared variants to measure (default: all); on_variant(id, outcome)
    is told each variant's outcome as it finishes.
    """
    settings = settings or AbSettings()
    rules = list(rules) if rules is not None else parse_rules(default_rules())
    sides = (_Side.of("base", base), _Side.of("head", head))
    base_plan = {v.id: v for v in Plan(expand(base.config)).variants}
    head_plan = list(Plan(expand(head.config)).variants)
    head_ids = {v.id for v in head_plan}
    skipped = {vid: "only in BASE: nothing to interleave with" for vid in base_plan if vid not in head_ids}
    paired: dict[str, dict[str, PairedChange]] = {}
    run_id, created = uuid.uuid4().hex[:12], utc_now()
    started_load = sample()
    for head_variant in head_plan:
        vid = head_variant.id
        if vid not in base_plan:
            skipped[vid] = "only in HEAD: nothing to interleave with"
            continue
        if select is not None and not select(vid):
            continue
        outcome = _measure_pair(sides, (base_plan[vid], head_variant), settings, alpha, paired, rules)
        if outcome is not None and all(side.records[vid].status == "skipped" for side in sides):
            skipped[vid] = outcome
        if on_variant is not None:
            threads = sides[1].records[vid].details.get("ab_threads") if vid in sides[1].records else None
            on_variant(vid, outcome or (f"measured; {threads}" if threads else "measured"))
    machine = {**snapshot(), "load": load_between(started_load, sample(), "interleaved rounds")}
    reports = [side.report(f"{run_id}-{side.label}", created, machine, settings) for side in sides]
    rounds_run = {vid: r.details["ab_rounds"] for vid, r in sides[1].records.items() if "ab_rounds" in r.details}
    interleaved = Interleaved(rounds=settings.rounds, min_rounds=settings.first_look, rounds_run=rounds_run,
                              calls=settings.calls, warmup=settings.warmup, instances=settings.instances, order=ORDER,
                              load=machine["load"], skipped=skipped)
    return compare(reports[0], reports[1], rules, alpha=alpha, base_label=base_label, head_label=head_label,
                   base_commit=base_commit, head_commit=head_commit, paired=paired, interleaved=interleaved)


def _measure_pair(sides: tuple[_Side, _Side], variants: tuple[Variant, Variant], settings: AbSettings,
                  alpha: float, paired: dict[str, dict[str, PairedChange]], rules: list[Rule]) -> str | None:
    """Time one variant on both sides; its records go to each side. Returns why it was not timed, if so."""
    started, t0 = utc_now(), time.perf_counter()
    timers: list[list[CallTimer] | None] = [[], []]
    problems: list[tuple[str, str] | None] = [None, None]  # (status, reason) per side
    for k in range(settings.instances):  # the sides' copies built alternately, A B, B A, ...: neither always first
        for i in ((0, 1) if k % 2 == 0 else (1, 0)):
            side, variant, copies = sides[i], variants[i], timers[i]
            if copies is None:
                continue
            try:
                copies.append(side.timer(variant))
            except VariantSkipped as exc:
                problems[i] = ("skipped", str(exc))
            except Exception as exc:  # noqa: BLE001 - a side that cannot run fails its record, not the comparison
                problems[i] = ("failed", located_error(exc, side.pipeline.base_dir))
            if problems[i] is not None:
                for timer in copies:
                    timer.close()
                timers[i] = None
        if any(problems):  # nothing will be timed: build no more copies of the other side
            break
    try:
        a, b = timers
        if a is not None and b is not None:
            try:
                checks = check_pools(a, b)
                blocks = interleave(a, b, settings, settled_for(rules, alpha))
            except Exception as exc:  # noqa: BLE001 - a call that fails mid-round fails both records
                error = f"measure: {located_error(exc, sides[1].pipeline.base_dir)}"
                for side, variant in zip(sides, variants):
                    side.records[variant.id] = _record(variant, "failed", started, t0, error=error)
                return error
            for side, variant, side_blocks in zip(sides, variants, blocks):
                side.records[variant.id] = _timed_record(variant, side_blocks, settings, started, t0, checks)
            paired[variants[1].id] = _paired_changes(blocks, alpha)
            return None
        for i, (side, variant) in enumerate(zip(sides, variants)):
            problem, other = problems[i], problems[1 - i]
            if problem is not None:
                side.records[variant.id] = _record(variant, problem[0], started, t0, error=problem[1])
            else:
                assert other is not None
                side.records[variant.id] = _record(variant, "ok", started, t0, details={
                    "not_timed": f"{sides[1 - i].label.upper()} could not run it ({other[1]}): nothing to "
                                 "interleave with"})
        reasons = {p[1] for p in problems if p is not None}
        return "; ".join(sorted(reasons))
    finally:
        for copies in timers:
            for timer in copies or ():
                timer.close()
