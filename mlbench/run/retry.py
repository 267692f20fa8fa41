"""Suspect figures measured again at the end of a run, within `latency.retry_s`.

A figure is suspect when its own samples grade it unreliable, or when it is far from what the same
variant of the same pipeline measured on this kind of machine before (the history's median of its last
runs): a 400x outlier can be steady within itself (a stalled thread pool, a neighbour's job) and pass
every dispersion check. The end of the run is when the machine is most likely quieter (the exports are
over). Both measurements are kept in the record (`details.remeasured`) and the report says which it uses:
the one near the history where only one is, else the better graded, else the faster (interference only
ever adds time). A figure still far from its
history after a second measurement that disagrees with the first is graded unreliable; one measured
alike twice is read as a real change (the model or the code changed) and marked noisy at least, saying so:
a gate still judges it (a real 400x regression must fail), and a reader sees it was not a plain figure.

Where the run measured the model's reference variant (eager float32 on the CPU), the suspect is measured
again in rounds alternating with it (reference, suspect, reference, suspect), so that drift between the
measurements hits both alike: the reference's figures go beside the suspect's in `details.remeasured`, and
the suspect's figure over the reference's, then and now, tells whether its first figure was the machine (the
reference moved alike) or the variant (the reference held). A figure far from its history whose reference
is as far from its own is the machine's, graded unreliable: a gate cannot judge it against that history.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbench.plugins.spec import REFERENCE
from mlbench.records import RunRecord
from mlbench.stability import Stability

log = logging.getLogger("mlbench.run")

METRIC = "latency.median"
HISTORY_FACTOR = 3.0
"""A median this many times above (or below) the variant's history median is suspect."""
HISTORY_RUNS = 5
"""The newest runs of the pipeline on this kind of machine whose figures make the history median."""
AGREE_FACTOR = 1.5
"""Two measurements within this factor of each other measured the same thing."""
GRADES = ("stable", "noisy", "unreliable")
REFERENCE_ROUNDS = 2
"""Rounds of reference then suspect when the suspect has a reference variant: two, so that each side is
measured twice with the other between (drift over the rounds hits both), at the cost of four measurements."""


def history_medians(db_path: Path, pipeline: str, machine_key: str) -> dict[str, float]:
    """Per variant id, the median of its measured `latency.median` over the pipeline's newest runs on
    this kind of machine, leaving out figures those runs graded unreliable (a stalled 708 ms figure for a
    0.4 ms model would otherwise make the next right one look 1,700x off); empty when there is no history
    (or it cannot be read: one debug line)."""
    import zlib

    from mlbench.records import RunReport
    from mlbench.store.history import connect, list_runs

    if not db_path.exists():
        return {}
    values: dict[str, list[float]] = {}
    try:
        runs = [r.run_id for r in list_runs(db_path, pipeline=pipeline, machine=machine_key, limit=HISTORY_RUNS)]
        with connect(db_path, create=False) as conn:
            blobs = [row[0] for run_id in runs
                     for row in conn.execute("SELECT report_zlib FROM runs WHERE run_id = ?", (run_id,))]
        for blob in blobs:
            for record in RunReport.model_validate_json(zlib.decompress(blob).decode("utf-8")).records:
                metric = record.metrics.get(METRIC)
                if (record.status == "ok" and metric is not None and metric.source == "measured"
                        and metric.value is not None and metric.value > 0
                        and not (metric.stability is not None and metric.stability.grade == "unreliable")):
                    values.setdefault(record.variant_id, []).append(float(metric.value))
    except Exception as exc:  # noqa: BLE001 - the history only informs; the run stands without it
        log.debug("history not read for re-measurement: %s", exc)
        return {}
    return {variant: statistics.median(found) for variant, found in values.items()}


def _figure(record: RunRecord) -> tuple[float, Stability | None] | None:
    metric = record.metrics.get(METRIC)
    if record.status != "ok" or metric is None or metric.value is None or metric.source != "measured":
        return None
    return metric.value, metric.stability


def _far(value: float, past: float | None) -> float | None:
    """How many times `value` is off its history (≥ HISTORY_FACTOR), else None."""
    if past is None or past <= 0 or value <= 0:
        return None
    ratio = max(value / past, past / value)
    return ratio if ratio >= HISTORY_FACTOR else None


def why_suspect(record: RunRecord, past: float | None) -> str | None:
    """Why `record`'s timed figure should be measured again, in words; None when it need not be."""
    figure = _figure(record)
    if figure is None:
        return None
    value, stability = figure
    if stability is not None and stability.grade == "unreliable":
        return f"graded unreliable ({'; '.join(stability.reasons)})"
    ratio = _far(value, past)
    if ratio is not None:
        return f"{value:.3g} ms is {ratio:.3g}x this variant's history median on this machine ({past:.3g} ms)"
    return None


def _with_grade(record: RunRecord, change: Callable[[Stability], Stability]) -> RunRecord:
    """The record with every timed figure's grade changed alike (they share one grade)."""
    metrics = dict(record.metrics)
    for name, metric in metrics.items():
        if metric.stability is not None and metric.source == "measured":
            metrics[name] = metric.model_copy(update={"stability": change(metric.stability)})
    latency = record.latency
    if latency is not None and latency.stability is not None:
        latency = latency.model_copy(update={"stability": change(latency.stability)})
    return record.model_copy(update={"metrics": metrics, "latency": latency})


def _rank(record: RunRecord) -> tuple[int, float]:
    figure = _figure(record)
    if figure is None:
        return (len(GRADES), float("inf"))
    value, stability = figure
    return (GRADES.index(stability.grade) if stability is not None else 0, value)


def combine(first: RunRecord, second: RunRecord, past: float | None, why: str,
            reference: ReferenceRounds | None = None) -> RunRecord:
    """One record from two measurements of a variant: the one near its history, else the better graded (else the
    faster); two AGREE_FACTOR apart with no history to arbitrate, the faster, graded noisy at least (a machine's
    slow spell can read steady). Both are kept in `details.remeasured`, the grade saying what a reader must know;
    `reference`, where the second was measured alternating with the model's reference variant, adds its figures
    and what they tell."""
    first_figure, second_figure = _figure(first), _figure(second)
    if second_figure is None:  # the second measurement failed: the first stands, marked as it was
        note = f"measured again at the end of the run ({why}), which failed: {second.error or second.status}"
        return _with_grade(first, lambda s: s.adjusted(note)).model_copy(update={"details": {
            **first.details, "remeasured": {"why": why, "second": None, "second_error": second.error, "used": "first",
                                            **({"reference": reference.details(first_figure[0], None)}
                                               if reference is not None and first_figure is not None else {})}}})
    if first_figure is None:
        return second
    near = [_far(figure[0], past) is None for figure in (first_figure, second_figure)]
    unarbitrated = past is None and _apart(first_figure[0], second_figure[0])
    if near[0] != near[1]:  # one agrees with the variant's past: that one is corroborated
        used = "second" if near[1] else "first"
    elif unarbitrated:  # nothing says which is the variant's: interference slows calls, it never speeds them up
        used = "second" if second_figure[0] < first_figure[0] else "first"
    else:
        used = "second" if _rank(second) < _rank(first) else "first"
    chosen_figure, other_figure = (second_figure, first_figure) if used == "second" else (first_figure, second_figure)
    chosen = second if used == "second" else first
    value, other_value = chosen_figure[0], other_figure[0]
    agree = max(value, other_value) / max(min(value, other_value), 1e-12) < AGREE_FACTOR
    note = (f"measured again at the end of the run ({why}): {first_figure[0]:.3g} ms then {second_figure[0]:.3g} ms; "
            f"this report uses the {'first' if used == 'first' else 'second'}")
    ratio = _far(value, past)
    judged = reference.judge(first_figure[0]) if reference is not None else None
    if judged is not None:
        note += f"; {judged.text}"
    if ratio is not None and agree and judged is not None and judged.machine_far_from_history:
        change: Callable[[Stability], Stability] = lambda s: s.adjusted(note).regraded(  # noqa: E731
            "unreliable", f"{ratio:.3g}x this variant's history median ({past:.3g} ms), measured alike twice, and "
            "its reference variant is as far from its own history: the machine, not the variant")
    elif ratio is not None and agree:
        note += f"; measured alike twice, so read as a real change from the history's {past:.3g} ms"
        change = lambda s: s.adjusted(note).regraded(  # noqa: E731
            "noisy", f"{ratio:.3g}x this variant's history median ({past:.3g} ms), measured alike twice: a real "
            "change, or interference that lasted the run")
    elif ratio is not None:
        change = lambda s: s.adjusted(note).regraded(  # noqa: E731
            "unreliable", f"{ratio:.3g}x this variant's history median ({past:.3g} ms), and the two measurements "
            "disagree")
    elif unarbitrated:  # a steady figure in a slow spell of the machine must not read as the variant's own
        change = lambda s: s.adjusted(note).regraded(  # noqa: E731
            "noisy", f"measured twice {max(value, other_value) / max(min(value, other_value), 1e-12):.3g}x apart "
            "with no history to tell which is the variant's: the faster is used")
    else:
        change = lambda s: s.adjusted(note)  # noqa: E731
    remeasured = {"why": why, "used": used, "history_median_ms": past,
                  "first": {"median_ms": first_figure[0], "grade": _grade(first_figure[1])},
                  "second": {"median_ms": second_figure[0], "grade": _grade(second_figure[1])},
                  **({"reference": reference.details(first_figure[0], judged)} if reference is not None else {})}
    # the artifact came to this run with the first measurement (built or found in the cache): the second only
    # found it where the first left it
    return _with_grade(chosen, change).model_copy(update={"details": {**chosen.details, "remeasured": remeasured},
                                                          "artifact": first.artifact})


def _grade(stability: Stability | None) -> str | None:
    return stability.grade if stability is not None else None


def not_remeasured(record: RunRecord, past: float | None, why: str, because: str) -> RunRecord:
    """A suspect figure there was no time (or leave) to measure again: one far from its history is graded
    unreliable, never shown as a plain figure."""
    figure = _figure(record)
    ratio = _far(figure[0], past) if figure is not None else None
    if ratio is None:
        return record
    return _with_grade(record, lambda s: s.regraded(
        "unreliable", f"{ratio:.3g}x this variant's history median ({past:.3g} ms), not measured again: {because}"))


def reference_for(record: RunRecord, records: dict[str, RunRecord]) -> str | None:
    """The id of `record`'s model's reference variant (`REFERENCE`) with a measured figure in `records`; None where
    the run has none, or `record` is that variant."""
    for vid, other in records.items():
        if (other.model == record.model and other.variant_id != record.variant_id and _figure(other) is not None
                and "/".join([other.backend, *other.axes.values()]) == REFERENCE):
            return vid
    return None


@dataclass(frozen=True)
class Judged:
    verdict: str
    """`machine`: the reference moved alike; `variant`: it held while the suspect moved; `steady`: the suspect
    measured alike again."""
    text: str
    machine_far_from_history: bool = False
    """The suspect, measured alike again, is far from its history, and its reference as far from its own."""


@dataclass
class ReferenceRounds:
    """The reference variant's and the suspect's figures from rounds measured alternately (reference first)."""

    variant: str
    first_ms: float
    """The reference's figure from the run itself, beside which the suspect's first figure was taken."""
    history_ms: float | None = None
    suspect_history_ms: float | None = None
    pairs: list[tuple[float, float]] = field(default_factory=list)
    """(reference, suspect) medians of each round both measured."""
    failures: list[str] = field(default_factory=list)

    def judge(self, suspect_first_ms: float) -> Judged | None:
        """Whether the suspect's first figure was the machine's or the variant's, from how far the suspect moved
        between its first figure and the rounds, against how far its reference moved (None: no round had both)."""
        if not self.pairs:
            return None
        reference_now = statistics.median(r for r, _ in self.pairs)
        suspect_now = statistics.median(s for _, s in self.pairs)
        suspect_moved, reference_moved = suspect_first_ms / suspect_now, self.first_ms / reference_now
        against = (f"{self.variant} read {self.first_ms:.3g} ms in the run and "
                   f"{', '.join(f'{r:.3g}' for r, _ in self.pairs)} ms in rounds alternating with this variant's "
                   f"{', '.join(f'{s:.3g}' for _, s in self.pairs)} ms")
        if _apart(suspect_moved, 1.0):
            if not _apart(suspect_moved, reference_moved):
                return Judged("machine", f"{against}: the reference moved alike, so the first figure was the machine's")
            return Judged("variant", f"{against}: the reference did not move alike, so the first figure was this "
                                     "variant's own")
        far = _far(suspect_now, self.suspect_history_ms)
        reference_far = _far(reference_now, self.history_ms)
        alike = (far is not None and reference_far is not None and self.suspect_history_ms is not None
                 and self.history_ms is not None and not _apart(suspect_now / self.suspect_history_ms,
                                                                  reference_now / self.history_ms))
        if alike:
            return Judged("machine", f"{against}: measured alike again, and the reference is {reference_far:.3g}x its "
                                     f"own history median ({self.history_ms:.3g} ms) too", machine_far_from_history=True)
        return Judged("steady", f"{against}: measured alike again")

    def details(self, suspect_first_ms: float, judged: Judged | None) -> dict[str, Any]:
        return {"variant": self.variant, "order": "reference, suspect, ...", "first_median_ms": self.first_ms,
                "first_ratio": suspect_first_ms / self.first_ms,
                "medians_ms": [r for r, _ in self.pairs], "suspect_medians_ms": [s for _, s in self.pairs],
                "ratios": [s / r for r, s in self.pairs],
                "verdict": judged.verdict if judged is not None else None,
                **({"failures": self.failures} if self.failures else {})}


def _apart(a: float, b: float) -> bool:
    """Two figures (or two ratios) AGREE_FACTOR or more apart."""
    return max(a, b) / max(min(a, b), 1e-12) >= AGREE_FACTOR


def alternate(suspect: str, reference: ReferenceRounds, measure: Callable[[str], Iterator[RunRecord]],
              left_s: Callable[[], float]) -> RunRecord | None:
    """Rounds of the reference then the suspect (up to REFERENCE_ROUNDS), the pairs going to `reference`; the
    suspect's best measured record (better graded, else faster), else its last. A round after the first starts
    only while `left_s()` exceeds what the first took: the rounds keep within the budget."""
    measured: list[RunRecord] = []
    first_round_s = 0.0
    for index in range(REFERENCE_ROUNDS):
        if index and left_s() < first_round_s:
            break
        started = time.monotonic()
        ref = next(iter(measure(reference.variant)), None)
        second = next(iter(measure(suspect)), None)
        first_round_s = first_round_s or time.monotonic() - started
        if second is not None:
            measured.append(second)
        ref_figure, figure = (_figure(ref) if ref is not None else None), (_figure(second) if second is not None else None)
        if ref_figure is not None and figure is not None:
            reference.pairs.append((ref_figure[0], figure[0]))
        elif ref_figure is None:
            reference.failures.append(f"{reference.variant}: {ref.error or ref.status}" if ref is not None else
                                      f"{reference.variant}: no record")
    timed = [r for r in measured if _figure(r) is not None]
    return min(timed, key=_rank) if timed else (measured[-1] if measured else None)


def comparable_history(record: RunRecord, past: float | None) -> float | None:
    """The variant's history median where its figure was timed as the history's were: None where a stalled pool
    made this run time it with one thread (`details.thread_check`). The history holds the configured count's
    figures, so a one-thread figure far above them is the stall's fallback, not a change of the model (a busy
    runner's resnet18 read 58.8 ms with 1 thread, "4.27x the history's 13.8 ms" taken with 2)."""
    check = record.details.get("thread_check")
    return None if isinstance(check, dict) and check.get("stalled") else past


def remeasure(records: dict[str, RunRecord], history: dict[str, float], budget_s: float,
              measure: Callable[[str], Iterator[RunRecord]], on_note: Callable[[str], None]) -> dict[str, RunRecord]:
    """The suspect records measured again, one by one, while `budget_s` lasts; the combined records by
    variant id (only those that changed). `measure(variant_id)` yields a measurement's record; a suspect whose
    model's reference variant is in `records` is measured in rounds alternating with it (`alternate`)."""
    history = {vid: past for vid, record in records.items()
               if (past := comparable_history(record, history.get(vid))) is not None}
    suspects = {vid: why for vid, record in records.items()
                if (why := why_suspect(record, history.get(vid))) is not None}
    if not suspects:
        return {}
    changed: dict[str, RunRecord] = {}
    if budget_s <= 0:
        for vid, why in suspects.items():
            marked = not_remeasured(records[vid], history.get(vid), why, "latency.retry_s is 0")
            if marked is not records[vid]:
                changed[vid] = marked
        return changed
    on_note(f"measuring {len(suspects)} suspect figure{'s' if len(suspects) != 1 else ''} again "
            f"(latency.retry_s {budget_s:g} s): {', '.join(suspects)}")
    start = time.monotonic()
    for vid, why in suspects.items():
        if time.monotonic() - start >= budget_s:
            marked = not_remeasured(records[vid], history.get(vid), why, f"latency.retry_s ({budget_s:g} s) was spent")
            if marked is not records[vid]:
                changed[vid] = marked
            continue
        ref = reference_for(records[vid], records)
        rounds: ReferenceRounds | None = None
        if ref is None:
            second = next(iter(measure(vid)), None)
        else:
            ref_figure = _figure(records[ref])
            assert ref_figure is not None  # reference_for picks one with a figure
            rounds = ReferenceRounds(ref, ref_figure[0], history.get(ref), history.get(vid))
            second = alternate(vid, rounds, measure, lambda: budget_s - (time.monotonic() - start))
        if second is None:
            continue
        changed[vid] = combine(records[vid], second, history.get(vid), why, rounds)
    return changed
