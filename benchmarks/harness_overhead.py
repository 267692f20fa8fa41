"""Does mlbench's timing add anything? And is `mlbench validate` fast?

Prints, in one run:
  1. mlbench's eager median ÷ a bare timing loop's median on the same model (target ≤ 1.01),
     measured in alternating rounds (mlbench first in even rounds, the bare loop first in odd ones)
     so that machine drift hits both sides alike: the median of the per-round ratios, their
     interquartile range and extremes — one round's ratio on a shared machine means little — and the
     machine's load meanwhile; then the cost of the timing loop itself on a no-op call (what the
     harness could add, free of model noise);
  2. the same ratio when the measurement runs as `mlbench run` runs it: in a supervised child
     process (mlbench/run/supervisor.py) while the coordinator waits on its pipe (target ≤ 1.01),
     again as the median and IQR of alternating rounds;
  3. the wall time of `mlbench validate pipelines/*.yaml` in a fresh process (target < 0.3 s).

Each ratio is judged as `mlbench ab` judges rounds: the Hodges–Lehmann estimate of the per-round
ratios and its 95% signed-rank interval; PASS when the whole interval is at or under 1.01, OVER when
it is wholly above, INCONCLUSIVE otherwise (the machine was too noisy to tell).

Usage: python benchmarks/harness_overhead.py [--model mobilenet_v3_small] [--rounds 400] [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bare_loop(call, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e6


def harness_rounds(model_name: str, rounds: int, warmup: int, repeats: int) -> tuple[list[float], list[float]]:
    """Per round: mlbench's median and the bare loop's, in ms."""
    import torch
    import torchvision

    from mlbench.backends.torch.backend import TorchBackend
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import expand
    from mlbench.sources.loading import load_model
    from mlbench.store.cache import ArtifactCache

    config = PipelineConfig.model_validate({
        "version": 1, "name": "overhead",
        "models": [{"name": model_name, "source": f"torchvision:{model_name}", "kwargs": {"weights": None},
                    "inputs": [{"name": "image", "shape": [1, 3, 224, 224]}]}],
        "targets": [{"backend": "torch"}],
        "latency": {"warmup": warmup, "repeats": repeats, "min_time_s": 0.0},
    })
    assert torchvision  # imported for the model registry
    loaded = load_model(config.models[0], seed=0, base_dir=ROOT)
    variant = expand(config)[0]
    backend = TorchBackend(config.targets[0], config, ArtifactCache())  # eager: the cache stays unused
    exported = backend.export(loaded, variant)
    mine, bare = [], []
    def run_mine() -> None:
        mine.append(backend.measure(loaded, exported, variant).latency.median)

    def run_bare() -> None:
        with torch.inference_mode():
            bare.append(bare_loop(lambda: loaded.module(*loaded.example_inputs), warmup, repeats))

    for i in range(rounds):  # alternate which side goes first, so neither always runs warm
        for side in ((run_mine, run_bare) if i % 2 == 0 else (run_bare, run_mine)):
            side()
    return mine, bare


def harness_ratio(model_name: str, rounds: int, warmup: int, repeats: int) -> tuple[float, float, float]:
    """mlbench's median, the bare loop's (medians over rounds) and the median per-round ratio."""
    mine, bare = harness_rounds(model_name, rounds, warmup, repeats)
    return statistics.median(mine), statistics.median(bare), statistics.median(x / y for x, y in zip(mine, bare))


def judged(ratios: list[float], target: float = 1.01) -> str:
    """The per-round ratios' Hodges–Lehmann estimate and 95% signed-rank interval (as `mlbench ab`
    judges rounds), and the verdict against the target: PASS when the whole interval is at or under it,
    OVER when the whole interval is above it, else INCONCLUSIVE — the machine decides, not mlbench."""
    from mlbench.compare.paired import hodges_lehmann

    estimate, (low, high) = hodges_lehmann(ratios, alpha=0.05)
    verdict = "PASS" if high <= target else "OVER" if low > target else "INCONCLUSIVE (the interval straddles it)"
    return f"Hodges–Lehmann {estimate:.4f}, 95% interval {low:.4f}–{high:.4f} (target <= {target:g}) {verdict}"


def spread(values: list[float]) -> tuple[float, float, float, float, float]:
    """(median, first quartile, third quartile, min, max)."""
    from mlbench.timing import percentile

    ordered = sorted(values)
    return (statistics.median(ordered), percentile(ordered, 0.25), percentile(ordered, 0.75), ordered[0],
            ordered[-1])


def isolated_rounds(model_name: str, rounds: int, warmup: int, repeats: int) -> tuple[list[float], list[float]]:
    """Per-round medians from the supervised child (the run's own path) and a bare loop in this
    process, alternating which goes first."""
    import tempfile

    import torch

    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import expand
    from mlbench.run.limits import ChildLimits
    from mlbench.run.supervisor import ChildPool, measure_group
    from mlbench.run.tasks import WorkSpec
    from mlbench.sources.loading import load_model

    data = {"version": 1, "name": "overhead",
            "models": [{"name": model_name, "source": f"torchvision:{model_name}", "kwargs": {"weights": None},
                        "inputs": [{"name": "image", "shape": [1, 3, 224, 224]}]}],
            "targets": [{"backend": "torch"}],
            "latency": {"warmup": warmup, "repeats": repeats, "min_time_s": 0.0}}
    config = PipelineConfig.model_validate(data)
    loaded = load_model(config.models[0], seed=0, base_dir=ROOT)
    variant = expand(config)[0]
    pool = ChildPool()
    mine, bare = [], []
    cache = tempfile.mkdtemp(prefix="mlbench-overhead-")  # eager variants never write to it
    spec = WorkSpec(config=config.model_dump(mode="json"), base_dir=str(ROOT), cache_dir=cache)

    def run_child() -> None:
        (finished,) = measure_group(pool, spec, [variant], ChildLimits(600, 600, None))
        assert finished.record.latency is not None, finished.record.error
        mine.append(finished.record.latency.median)

    def run_bare() -> None:
        with torch.inference_mode():
            bare.append(bare_loop(lambda: loaded.module(*loaded.example_inputs), warmup, repeats))

    try:
        run_child()  # the child's first request builds the model: not a round
        mine.clear()
        for i in range(rounds):
            for side in ((run_child, run_bare) if i % 2 == 0 else (run_bare, run_child)):
                side()
    finally:
        pool.close()
    return mine, bare


def per_call_overhead_ns(calls: int = 200_000) -> tuple[float, float]:
    """Median ns per timed no-op call: mlbench's loop and the bare loop. The difference is all
    the harness can add to a model's figure, free of the model's own noise."""
    from mlbench.timing import time_calls

    def noop() -> None:
        return None

    harness = time_calls(noop, warmup=100, repeats=calls, min_time_s=0.0, max_repeats=calls).median * 1e6
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        noop()
        samples.append(time.perf_counter_ns() - t0)
    return harness, statistics.median(samples)


def validate_seconds(tries: int = 5) -> float:
    files = sorted(str(p) for p in (ROOT / "pipelines").glob("*.yaml"))
    exe = Path(sys.executable).with_name("mlbench")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "mlbench.cli"]
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        subprocess.run([*command, "validate", "-q", *files], check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    from mlbench.machine_load import describe, load_between, sample

    start = sample()
    mine, bare = harness_rounds(args.model, args.rounds, args.warmup, args.repeats)
    load = load_between(start, sample(), "rounds")
    ratios = [x / y for x, y in zip(mine, bare)]
    median, q1, q3, low, high = spread(ratios)
    b = statistics.median(bare)
    print(f"eager median, mlbench harness : {statistics.median(mine):8.3f} ms  ({args.model}, median of "
          f"{args.rounds} rounds of {args.repeats} calls)")
    print(f"eager median, bare loop       : {b:8.3f} ms")
    print(f"ratio mlbench / bare          : {median:8.4f}   median of {len(ratios)} per-round ratios, IQR "
          f"{q1:.4f}–{q3:.4f}, range {low:.4f}–{high:.4f}")
    print(f"                                {judged(ratios)}")
    print(f"machine load meanwhile        : {describe(load)}")
    harness_ns, bare_ns = per_call_overhead_ns()
    print(f"no-op call, mlbench / bare    : {harness_ns:6.0f} ns / {bare_ns:.0f} ns  "
          f"(= {(harness_ns - bare_ns) / (b * 1e6) * 100:+.4f}% of the model's median)")
    child, bare_here = isolated_rounds(args.model, args.rounds, args.warmup, args.repeats)
    child_ratios = [x / y for x, y in zip(child, bare_here)]
    median, q1, q3, low, high = spread(child_ratios)
    print(f"eager median, supervised child: {statistics.median(child):8.3f} ms  (the run's own path; bare loop "
          f"here {statistics.median(bare_here):.3f} ms)")
    print(f"ratio child / bare            : {median:8.4f}   median of {len(child_ratios)} per-round ratios, IQR "
          f"{q1:.4f}–{q3:.4f}, range {low:.4f}–{high:.4f}")
    print(f"                                {judged(child_ratios)}")
    seconds = validate_seconds()
    n = len(list((ROOT / "pipelines").glob("*.yaml")))
    print(f"mlbench validate ({n} files)   : {seconds:8.3f} s   (target < 0.3 s, best of 5) "
          f"{'PASS' if seconds < 0.3 else 'OVER'}")


if __name__ == "__main__":
    main()
