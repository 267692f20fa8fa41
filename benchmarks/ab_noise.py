"""Does `mlbench ab` see through a machine whose load changes during the run? And do two sequential
runs compared with `mlbench compare`?

Each trial measures, twice over (A=A, and A against a head 5% slower), with a background load that
starts and stops by itself during the measurement (a busy loop on one core, in a process this script
starts, with a random start and length):
  - interleaved: `mlbench ab` (paired statistics over alternating rounds);
  - sequential: `mlbench run` of BASE, then of HEAD, then `mlbench compare` on the two reports —
    the same number of timed calls per side.
The head is benchmarks/ab/head.yaml: the same stack of blocks with one block more in twenty (5% more
of the same work, so it stays 5% slower whatever the load).

Each comparison is judged by every --rule given (default: the median's and the best call's, each
+2%), and counted per rule: the median says what a user's gate says; the best call is the figure a
machine busy with other processes (preemption mid-call) disturbs least.

Prints per trial the verdicts and estimated changes, then the counts per rule: no regression in A=A
trials (target ≥ 19 of 20 for ab) and regressions caught against the slower head (target ≥ 19 of 20
for ab), with the sequential counts beside them for contrast.

Usage: python benchmarks/ab_noise.py [--trials 20] [--rounds N] [--calls N] [--warmup N] [--rule RULE]...
(rounds, calls and warmup default to `mlbench ab`'s own defaults)
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlbench.compare.paired import DEFAULT_CALLS, DEFAULT_INSTANCES, DEFAULT_ROUNDS, DEFAULT_WARMUP

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "benchmarks" / "ab" / "base.yaml"
HEAD = ROOT / "benchmarks" / "ab" / "head.yaml"
LOADER = """
import os, sys, time
delay, length = float(sys.argv[1]), float(sys.argv[2])
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {0})
time.sleep(delay)
end = time.monotonic() + length
while time.monotonic() < end:
    pass
"""


class BackgroundLoad:
    """A busy loop on one core that starts after a random delay and stops by itself."""

    def __init__(self, rng: random.Random, expected_s: float) -> None:
        self.delay = rng.uniform(0.0, 0.5 * expected_s)
        self.length = rng.uniform(0.25 * expected_s, 0.5 * expected_s)

    def __enter__(self) -> BackgroundLoad:
        self.process = subprocess.Popen([sys.executable, "-c", LOADER, f"{self.delay:.3f}", f"{self.length:.3f}"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.wait(timeout=self.delay + self.length + 60)


def pipelines(tmp: Path):
    from mlbench.config.pipeline import HistorySettings, ReportSettings
    from mlbench.config.pipeline_file import Pipeline
    from mlbench.validate import load_pipeline

    out = []
    for path, side in ((BASE, "base"), (HEAD, "head")):
        pipeline = load_pipeline(path)
        config = pipeline.config.model_copy(update={
            "report": ReportSettings(dir=tmp / side, formats=["json"]), "history": HistorySettings(enabled=False)})
        out.append(Pipeline(config=config, path=pipeline.path, sha256=pipeline.sha256))
    return out


def with_repeats(pipeline, repeats: int, warmup: int):
    from mlbench.config.pipeline_file import Pipeline

    latency = pipeline.config.latency.model_copy(update={"repeats": repeats, "warmup": warmup, "min_time_s": 0.0})
    return Pipeline(config=pipeline.config.model_copy(update={"latency": latency}), path=pipeline.path,
                    sha256=pipeline.sha256)


def ratio_of(comparison, metric: str) -> float:
    for variant in comparison.variants:
        for delta in variant.deltas:
            if delta.metric == metric and delta.ratio is not None:
                return delta.ratio
    return float("nan")


def regressed_by(comparison, rule: str) -> bool:
    return any(f.rule == rule and f.kind == "regression" for v in comparison.variants for f in v.findings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--instances", type=int, default=DEFAULT_INSTANCES)
    parser.add_argument("--rule", action="append", help="a rule to judge by (repeatable; default: "
                        "latency.median:+2%% and latency.best:+2%%)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from mlbench.compare.comparison import compare
    from mlbench.compare.rules import parse_rules
    from mlbench.machine_load import describe, load_between, sample
    from mlbench.run.ab import AbSettings, run_ab
    from mlbench.run.progress import Progress
    from mlbench.run.runner import run

    texts = args.rule or ["latency.median:+2%", "latency.best:+2%"]
    rules = parse_rules(texts)
    settings = AbSettings(rounds=args.rounds, calls=args.calls, warmup=args.warmup, instances=args.instances)
    rng = random.Random(args.seed)
    counts = {(method, kind, rule): 0 for method in ("ab", "seq") for kind in ("same", "slower") for rule in texts}
    started = sample()
    with tempfile.TemporaryDirectory(prefix="mlbench-ab-noise-") as tmp:
        base, head = pipelines(Path(tmp))
        t0 = time.perf_counter()
        run_ab(base, base, rules, settings=settings)  # warm the caches and the imports; sizes a trial
        expected = max(time.perf_counter() - t0, 1.0)
        print(f"{args.trials} trials, up to {args.rounds} rounds × {args.calls} calls per side, {args.instances} "
              f"copies per side (sequential: as many calls per run as ab made), rules {', '.join(texts)}; a trial side takes "
              f"~{expected:.1f} s; per trial: verdict per rule (R: regression, .: none) and estimated ratios",
              flush=True)
        for trial in range(1, args.trials + 1):
            line = [f"trial {trial:2d}:"]
            for kind, other in (("same", base), ("slower", head)):
                with BackgroundLoad(rng, expected):
                    ab = run_ab(base, other, rules, settings=settings)
                rounds = max(ab.interleaved.rounds_run.values()) if ab.interleaved and ab.interleaved.rounds_run else 0
                with BackgroundLoad(rng, expected):  # the same number of timed calls as ab made
                    first = run(with_repeats(base, rounds * args.calls, args.warmup), Progress())
                    second = run(with_repeats(other, rounds * args.calls, args.warmup), Progress())
                seq = compare(first, second, rules)
                label = "A=A" if kind == "same" else "A<B"
                for method, comparison in (("ab", ab), ("seq", seq)):
                    marks = "".join("R" if regressed_by(comparison, r) else "." for r in texts)
                    for rule in texts:
                        counts[(method, kind, rule)] += regressed_by(comparison, rule)
                    ratios = "/".join(f"{ratio_of(comparison, parse_rules([r])[0].metric):.3f}" for r in texts)
                    line.append(f"{label} {method} {marks} {ratios}" + (f" ({rounds} rounds);" if method == "ab" else ";"))
            print(" ".join(line), flush=True)
    load = load_between(started, sample(), "benchmark")
    n = args.trials
    target = n - n // 20
    for rule in texts:
        print(f"\n{rule}:")
        print(f"  A=A (no change): no regression — ab {n - counts[('ab', 'same', rule)]}/{n} (target ≥ {target}), "
              f"sequential compare {n - counts[('seq', 'same', rule)]}/{n}")
        print(f"  head 5% slower : caught        — ab {counts[('ab', 'slower', rule)]}/{n} (target ≥ {target}), "
              f"sequential compare {counts[('seq', 'slower', rule)]}/{n}")
    print(f"machine load over the benchmark: {describe(load)}")


if __name__ == "__main__":
    main()
