"""Export speed-up of `--jobs 2` over `--jobs 1`, measured side by side in one run.

Each setting runs `mlbench run` in a fresh process on a fresh cache (so every artifact is built),
on a sweep that is all export (benchmarks/pipelines/export_sweep.yaml: 12 distinct artifacts).
Rounds alternate the order of the two settings so machine drift hits both alike.
Prints each wall time and the speed-up (target ≥ 1.7× on a 2-core machine).

Usage: python benchmarks/parallel_export.py [--pipeline FILE] [--rounds 2] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_run(pipeline: Path, jobs: int) -> float:
    exe = Path(sys.executable).with_name("mlbench")
    with tempfile.TemporaryDirectory(prefix="mlbench-parallel-") as tmp:
        env = {**os.environ, "MLBENCH_CACHE_DIR": str(Path(tmp) / "cache"), "MLBENCH_HISTORY": str(Path(tmp) / "h.db")}
        t0 = time.perf_counter()
        subprocess.run([str(exe), "run", "-q", "--jobs", str(jobs), str(pipeline)], check=True, env=env)
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, default=ROOT / "benchmarks" / "pipelines" / "export_sweep.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    serial, parallel = [], []
    for i in range(args.rounds):
        order = [(1, serial), (args.jobs, parallel)]
        for jobs, out in (order if i % 2 == 0 else order[::-1]):
            out.append(timed_run(args.pipeline, jobs))
            print(f"round {i + 1}: --jobs {jobs}: {out[-1]:6.1f} s", flush=True)
    s, p = statistics.median(serial), statistics.median(parallel)
    print(f"--jobs 1 median {s:.1f} s, --jobs {args.jobs} median {p:.1f} s: speed-up {s / p:.2f}× "
          f"(target ≥ 1.7× with 2 jobs on 2 cores) {'PASS' if s / p >= 1.7 else 'UNDER'}")


if __name__ == "__main__":
    main()
