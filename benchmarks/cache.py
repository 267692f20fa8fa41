"""How well the cache serves a sweep: artifacts exported once, figures derived from them computed once, and a
warm rerun that only measures. Cold run, then warm rerun, in one process.

Prints:
  - exports performed on the cold run (must equal the distinct artifacts the plan names) and on the warm rerun
    (must be 0), with each run's work summary (what it computed and what it found in the cache, per kind);
  - cold and warm wall time, and where each run's time went: timed measurement (the variants whose latency was
    measured), derived work (figures derived from an artifact: emulated verification, estimates; computed, and
    found in the cache), the rest of the untimed measurements, exporting (or finding the artifact; summed over
    the children with --jobs > 1), building models, the children's start (a fresh interpreter importing torch
    and the converters; its wall time, children started together counted once) and everything else (cache
    lookups, hashing, reports, the coordinator);
  - the targets: cold emulated verifications == distinct (artifact, inputs) pairs (one input set per artifact
    here: the distinct Core ML artifacts); warm wall <= 1.15 x the sum of the warm run's timed measurements;
    child start <= 10% of the warm wall; beside them, the memory rounds' wall time (`memory.rounds`: fresh
    processes measuring memory after the timing, their children's start included);
  - a second warm run with the stat state switched off (MLBENCH_CACHE_TRUST_STAT=0: every lookup
    hashes, as before it existed), for contrast (skip with --no-contrast).

Usage: python benchmarks/cache.py [--pipeline pipelines/coreml.yaml] [--jobs 1] [--no-contrast]
The cache and reports go to a fresh temporary folder, so the run starts cold.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from mlbench.config.pipeline import CacheSettings, HistorySettings, ReportSettings
from mlbench.config.pipeline_file import Pipeline
from mlbench.matrix import Plan, expand
from mlbench.run.runner import run
from mlbench.validate import load_pipeline

ROOT = Path(__file__).resolve().parent.parent


def exports_performed(report) -> int:
    """Distinct artifacts built this run (a cache miss builds; a hit does not)."""
    return len({r.artifact.key for r in report.records if r.artifact is not None and not r.artifact.cache_hit})


def built_seconds(report) -> float:
    """Exporter time of the artifacts built this run, once per artifact."""
    seconds = {}
    for r in report.records:
        if r.artifact is not None and not r.artifact.cache_hit:
            seconds[r.artifact.key] = r.artifact.export_seconds
    return sum(seconds.values())


def timed_run(pipeline: Pipeline, jobs: int = 1):
    t0 = time.perf_counter()
    report = run(pipeline, jobs=jobs)
    return report, time.perf_counter() - t0


def timed_seconds(report) -> float:
    """Seconds spent on the variants whose latency was measured (their whole measurement: timing, verification)."""
    return sum(r.seconds for r in report.records if r.latency is not None)


def split(report, wall: float) -> dict[str, float]:
    """Where a run's wall time went (seconds): timed measurement, derived work computed and found, the rest of the
    untimed measurements (static figures, reading the cache's values), export (building, or finding the artifact
    in the cache), building models, child start (wall) and everything else (the coordinator, the reports)."""
    stages = report.stage_seconds
    parts = {"timed": timed_seconds(report), "derived computed": stages.get("derived.computed", 0.0),
             "derived cached": stages.get("derived.cached", 0.0)}
    parts["other measure"] = max(0.0, stages.get("measure", 0.0) - sum(parts.values()))
    parts.update({"export": stages.get("export", 0.0), "build models": stages.get("load", 0.0),
                  "child start": stages.get("child_start_wall", stages.get("child_start", 0.0))})
    parts["other"] = wall - sum(parts.values())
    return parts


def describe(label: str, report, wall: float) -> None:
    from mlbench.run.work import work_words

    parts = split(report, wall)
    shares = ", ".join(f"{name} {value:6.1f} s ({value / wall:4.0%})" for name, value in parts.items())
    print(f"{label}: wall {wall:7.1f} s | exports performed {exports_performed(report):3d} | {shares}")
    print(f"{' ' * len(label)}  {len(report.records)} variants: {work_words(report.work)}; child start summed over "
          f"children {report.stage_seconds.get('child_start', 0.0):.1f} s")
    rounds = report.stage_seconds.get("memory_rounds", 0.0)
    if rounds:
        print(f"{' ' * len(label)}  of which memory rounds (memory.rounds: fresh processes measuring memory after the "
              f"timing; within child start and other): {rounds:.1f} s ({rounds / wall:.0%})")


def targets(plan, cold, warm, warm_wall: float) -> list[tuple[str, bool]]:
    """The issue's targets, each with whether this run met it."""
    coreml = len({v.artifact_id for v in plan.variants if v.backend == "coreml"})
    emulated = cold.work.get("emulated", {}).get("computed", 0)
    timed = timed_seconds(warm)
    start = warm.stage_seconds.get("child_start_wall", 0.0)
    return [(f"cold emulated verifications {emulated} == distinct (artifact, inputs) pairs {coreml}",
             emulated == coreml),
            (f"warm wall {warm_wall:.1f} s <= 1.15 x timed measurement {timed:.1f} s = {1.15 * timed:.1f} s",
             warm_wall <= 1.15 * timed),
            (f"child start {start:.1f} s <= 10% of warm wall ({start / warm_wall:.0%})", start <= 0.1 * warm_wall)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", default=str(ROOT / "pipelines" / "coreml.yaml"))
    parser.add_argument("--jobs", type=int, default=1, help="export processes at once (mlbench run --jobs)")
    parser.add_argument("--no-contrast", action="store_true", help="skip the warm run without the stat state")
    args = parser.parse_args()
    pipeline = load_pipeline(args.pipeline)
    plan = Plan(expand(pipeline.config))
    exportable = len({v.artifact_id for v in plan.variants if v.backend != "torch"})
    with tempfile.TemporaryDirectory(prefix="mlbench-cache-bench-") as tmp:
        config = pipeline.config.model_copy(update={
            "cache": CacheSettings(dir=Path(tmp) / "cache"), "report": ReportSettings(dir=Path(tmp) / "reports"),
            "history": HistorySettings(enabled=False),
        })
        pipeline = Pipeline(config=config, path=pipeline.path, sha256=pipeline.sha256)
        print(f"{pipeline.path.name}: {len(plan.variants)} variants, {exportable} distinct exported artifacts, "
              f"--jobs {args.jobs}")
        cold, cold_wall = timed_run(pipeline, args.jobs)
        describe("cold", cold, cold_wall)
        warm, warm_wall = timed_run(pipeline, args.jobs)
        describe("warm", warm, warm_wall)
        if not args.no_contrast:
            from mlbench.store.state import TRUST_STAT_ENV

            os.environ[TRUST_STAT_ENV] = "0"  # as before the stat state: the children inherit it
            try:
                again, again_wall = timed_run(pipeline, args.jobs)
            finally:
                del os.environ[TRUST_STAT_ENV]
            describe("warm, stat state off (MLBENCH_CACHE_TRUST_STAT=0)", again, again_wall)
    print(f"cold exports == distinct artifacts: {exports_performed(cold) == exportable}; "
          f"warm exports == 0: {exports_performed(warm) == 0}; warm/cold wall: {warm_wall / cold_wall:.2f}")
    for text, met in targets(plan, cold, warm, warm_wall):
        print(f"target {'met' if met else 'MISSED'}: {text}")
    rounds = warm.stage_seconds.get("memory_rounds", 0.0)
    if rounds:  # not a target: what the warm wall is beside all that this machine measured
        measured = timed_seconds(warm) + rounds
        print(f"beside it: warm wall / (timed measurement + memory rounds {measured:.1f} s) = "
              f"{warm_wall / measured:.2f}")


if __name__ == "__main__":
    main()
