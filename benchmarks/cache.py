"""How well does the artifact cache serve a sweep? Cold run, then warm rerun, in one process.

Prints:
  - exports performed on the cold run (must equal the distinct artifacts the plan names),
  - exports performed on the warm rerun (must be 0),
  - cold and warm wall time,
  - where each run's time went: building models, exporting, measuring, and everything else
    (cache lookups and checksums, program analysis, hashing, reports) — the share of wall time
    outside export and measurement (target < 5%, cold and warm),
    The children's start (a fresh interpreter importing torch and the converters, once per run at
    --jobs 1) is shown apart: it is the price of running models in supervised children;
  - a second warm run with the stat state switched off (MLBENCH_CACHE_TRUST_STAT=0: every lookup
    hashes, as before it existed), for contrast (skip with --no-contrast).

Usage: python benchmarks/cache.py [--pipeline pipelines/coreml.yaml]
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


def timed_run(pipeline: Pipeline):
    t0 = time.perf_counter()
    report = run(pipeline)
    return report, time.perf_counter() - t0


def describe(label: str, report, wall: float) -> None:
    stages = report.stage_seconds
    export = built_seconds(report)
    measure = stages["measure"]
    models = stages["load"]
    start = stages.get("child_start", 0.0)
    other = wall - export - measure - models - start
    outside = other + start
    print(f"{label}: wall {wall:7.1f} s | exports performed {exports_performed(report):3d} | "
          f"export {export:6.1f} s, measure {measure:6.1f} s, build models {models:5.1f} s, "
          f"child start (interpreter + imports) {start:5.1f} s, other {other:5.1f} s | outside export and "
          f"measurement {outside / wall:5.1%} of wall (without the child start {other / wall:5.1%}; with model "
          f"building {(outside + models) / wall:5.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", default=str(ROOT / "pipelines" / "coreml.yaml"))
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
        print(f"{pipeline.path.name}: {len(plan.variants)} variants, {exportable} distinct exported artifacts")
        cold, cold_wall = timed_run(pipeline)
        describe("cold", cold, cold_wall)
        warm, warm_wall = timed_run(pipeline)
        describe("warm", warm, warm_wall)
        if not args.no_contrast:
            from mlbench.store.state import TRUST_STAT_ENV

            os.environ[TRUST_STAT_ENV] = "0"  # as before the stat state: the children inherit it
            try:
                again, again_wall = timed_run(pipeline)
            finally:
                del os.environ[TRUST_STAT_ENV]
            describe("warm, stat state off (MLBENCH_CACHE_TRUST_STAT=0)", again, again_wall)
    print(f"cold exports == distinct artifacts: {exports_performed(cold) == exportable}; "
          f"warm exports == 0: {exports_performed(warm) == 0}; warm/cold wall: {warm_wall / cold_wall:.2f}")


if __name__ == "__main__":
    main()
