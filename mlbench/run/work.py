"""What a run did and what it reused, per kind of work: the report's `work` summary and the console's last line.

`48 variants` of a warm Linux rerun export nothing and emulate nothing, yet they do get their figures: the line
says so, e.g. `51 ok; 0 exported (12 cached), 0 emulated (12 cached), 0 estimated (60 cached), 3 timed`.

- exported: distinct artifacts this run built, or found in the cache (an artifact the user already had is
  neither);
- each kind of derived work (`mlbench.store.derived`: `emulated`, `estimated`, `reference-run` ...): distinct
  cache entries computed by this run, or found (a variant that found what another variant of this run computed
  adds nothing to either: the work was done once);
- timed: variants whose latency was measured (cached: the records a resumed run took from its journal).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlbench.records import RunRecord, RunReport
from mlbench.store.derived import DERIVED_DETAILS

EXPORTED, TIMED = "exported", "timed"
WorkCount = dict[str, int]  # {"computed": n, "cached": m}


def _count(computed: int, cached: int = 0) -> WorkCount:
    return {"computed": computed, "cached": cached}


def work_summary(records: Iterable[RunRecord], reused: frozenset[str] = frozenset()) -> dict[str, WorkCount]:
    """Counts of computed and cached work by kind, in the order a run does it (exported, derived, timed). The
    records of `reused` variants (a resumed run's, from the journal) count as found, never as done."""
    built: set[str] = set()
    found: set[str] = set()
    derived: dict[str, tuple[set[str], set[str]]] = {}
    timed = timed_before = 0
    for record in records:
        earlier = record.variant_id in reused
        info = record.artifact
        if info is not None and not (info.export_path or "").startswith("existing"):
            (found if info.cache_hit or earlier else built).add(info.key)
        for use in record.details.get(DERIVED_DETAILS) or []:
            if isinstance(use, dict) and isinstance(use.get("work"), str) and isinstance(use.get("key"), str):
                computed, cached = derived.setdefault(use["work"], (set(), set()))
                (computed if use.get("outcome") == "computed" and not earlier else cached).add(use["key"])
        if record.latency is not None:
            timed_before += earlier
            timed += not earlier
    out: dict[str, WorkCount] = {}
    if built or found:
        out[EXPORTED] = _count(len(built), len(found - built))
    for work, (computed, cached) in derived.items():
        out[work] = _count(len(computed), len(cached - computed))
    out[TIMED] = _count(timed, timed_before)
    return out


def work_words(work: dict[str, Any]) -> str:
    """`0 exported (12 cached), 0 emulated (12 cached), 3 timed`."""
    return ", ".join(f"{count.get('computed', 0)} {name}" + (f" ({count['cached']} cached)" if count.get("cached")
                                                              else "") for name, count in work.items())


def final_line(report: RunReport, where: str) -> str:
    """The console's last line: the records by status, what was done and what reused, where the reports are."""
    counts = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    words = work_words(report.work)
    return f"{counts}; {words}; reports in {where}" if words else f"{counts}; reports in {where}"
