"""Do the stability grades tell a wrong figure from a right one on a shared 2-core machine?

Two halves, each of --trials real `mlbench run`s of one pipeline with two eager models (the timing loop,
the thread-pool stall check, the grade and the re-measurement at the end of the run, as a user's run has
them; no history, as on a fresh CI runner):
  - conv_linear: two inputs, a conv and linears, 0.1 ms a call with torch's 2 threads: the kind of model
    whose pool stalls when other processes hold the cores (mlbench/thread_check.py);
  - tiny_cnn (examples/tiny_cnn.py) at 160x160: a few ms a call, which preemption lengthens.

Busy half: each trial runs the pipeline without this script's load, then again while a busy loop this script
starts holds the machine (bursty spinning processes, eight per core, each in a session of its own as other
jobs' are). Each model's reference is the median of its figures without the busy loop over the trials. A
busy figure off its reference by more than --tolerance (default 10%, a gate's usual threshold) is wrong;
one that is wrong and graded `stable` (no mark in any report) slipped through. Target: 0 of 20 trials with
a slip.

Quiet half: --trials runs with nothing else running; each model's reference is the median of its figures
over the trials. A figure within the tolerance of it and still marked (`?` noisy or `⚠` unreliable) is
wrongly marked. Target: at most 1 of 20 trials with a wrongly marked figure. This half means something
only on a machine nothing else is using: other processes' load is what the grades are there to see.

Usage: python benchmarks/stability_grading.py [--trials 20] [--half busy|quiet|both] [--tolerance 0.10] [--save F]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODEL = """\
import torch
from torch import nn


class ConvLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.image = nn.Linear(16 * 32 * 32, 64)
        self.extra = nn.Linear(64, 64)

    def forward(self, image, extra):
        return self.image(torch.relu(self.conv(image)).flatten(1)) + self.extra(extra)
"""

PIPELINE = f"""\
version: 1
name: stability-grading
models:
  - name: conv_linear
    source: conv_linear.py:ConvLinear
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}, {{name: extra, shape: [1, 64]}}]
  - name: tiny_cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 160, 160]}}]
targets:
  - backend: torch
    device: [cpu]
    precision: [float32]
    threads: 2
latency: {{warmup: 5, repeats: 30, min_time_s: 1.0}}
report: {{dir: out, formats: [json]}}
history: {{enabled: false}}
cache: {{dir: cache}}
"""

SPIN = """\
import random, time
print("spinning", flush=True)
rng = random.Random()
while True:  # bursts of spinning between short naps: the load comes and goes, as another job's does
    until = time.perf_counter() + rng.uniform(0.002, 0.03)
    while time.perf_counter() < until:
        pass
    time.sleep(rng.uniform(0.0, 0.01))
"""


@contextmanager
def busy_loop(per_core: int = 8) -> Iterator[None]:
    """Bursty spinning processes, `per_core` per CPU, each in a session of its own (Linux's autogroup shares
    the CPU between sessions first, as between other jobs on a shared runner)."""
    count = min(per_core * (os.cpu_count() or 1), 64)
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True,
                                 start_new_session=True) for _ in range(count)]
    try:
        for process in spinners:
            assert process.stdout is not None and process.stdout.readline() == "spinning\n"
        yield
    finally:
        for process in spinners:
            process.kill()
        for process in spinners:
            process.wait()


SAVED: list[dict[str, object]] = []  # every figure of this process's trials, for --save
HALF = ["quiet"]  # the half under way, for SAVED


@dataclass(frozen=True)
class Figure:
    model: str
    median_ms: float
    grade: str
    stalled: bool
    remeasured: bool
    why: str = ""  # the grade's reasons (cv, IQR/median, samples, load)
    p90_ms: float | None = None
    iqr_ratio: float | None = None
    cv: float | None = None
    other_share: float | None = None
    samples: int | None = None

    @property
    def marked(self) -> bool:
        return self.grade != "stable"


def run_once(folder: Path) -> dict[str, Figure]:
    """One `mlbench run` of the pipeline in `folder`: each model's latency.median and its grade."""
    from mlbench.run.progress import PlainProgress
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    run(load_pipeline(folder / "pipeline.yaml"), PlainProgress(io.StringIO()))
    figures: dict[str, Figure] = {}
    for record in json.loads((folder / "out" / "report.json").read_text(encoding="utf-8"))["records"]:
        median = record["metrics"]["latency.median"]
        if record["status"] != "ok" or median.get("value") is None:
            raise SystemExit(f"{record['variant_id']}: {record['status']}: {record.get('error')}")
        stability = median.get("stability") or {}
        figures[record["model"]] = Figure(record["model"], median["value"], stability.get("grade", "stable"),
                                          bool(record["details"].get("thread_check", {}).get("stalled")),
                                          "remeasured" in record["details"], "; ".join(stability.get("reasons", [])),
                                          (record["metrics"].get("latency.p90") or {}).get("value"),
                                          stability.get("iqr_ratio"), stability.get("cv"), stability.get("other_share"),
                                          stability.get("samples"))
        SAVED.append({"half": HALF[0], **asdict(figures[record["model"]]), "samples_ms": (record.get("latency") or {}).get("samples")})
    return figures


def off(figure: Figure, reference: float, tolerance: float) -> bool:
    return abs(figure.median_ms / reference - 1) > tolerance


def describe(figure: Figure, reference: float) -> str:
    extra = [*(["stall found"] if figure.stalled else []), *(["measured again"] if figure.remeasured else [])]
    return (f"{figure.model} {figure.median_ms:.3g} ms ({figure.median_ms / reference - 1:+.0%} of {reference:.3g}) "
            f"{figure.grade}{' (' + figure.why + ')' if figure.why else ''}{' [' + ', '.join(extra) + ']' if extra else ''}")


def busy_half(folder: Path, trials: int, tolerance: float) -> tuple[int, int, int, int]:
    """(trials with a slip, wrong figures, wrong figures marked, stalls found) under the busy loop. Each
    model's reference is the median of its figures without the busy loop over all trials (one of them can
    itself be disturbed by whatever else the machine runs)."""
    pairs: list[tuple[dict[str, Figure], dict[str, Figure]]] = []
    for trial in range(1, trials + 1):
        HALF[0] = "busy-reference"
        reference = run_once(folder)
        HALF[0] = "busy"
        with busy_loop():
            busy = run_once(folder)
        pairs.append((reference, busy))
        print(f"busy  trial {trial:2d}: " + "; ".join(describe(f, reference[n].median_ms) for n, f in busy.items()),
              flush=True)
    references = {name: statistics.median(r[name].median_ms for r, _ in pairs) for name in pairs[0][0]}
    print("references (median without the busy loop): "
          + ", ".join(f"{name} {ms:.3g} ms" for name, ms in references.items()))
    slipped_trials = wrong = caught = stalls = 0
    for trial, (_, busy) in enumerate(pairs, 1):
        slips = []
        for name, figure in busy.items():
            stalls += figure.stalled
            if off(figure, references[name], tolerance):
                wrong += 1
                caught += figure.marked
                if not figure.marked:
                    slips.append(describe(figure, references[name]))
        slipped_trials += bool(slips)
        if slips:
            print(f"busy  trial {trial:2d} SLIPPED: {'; '.join(slips)}")
    return slipped_trials, wrong, caught, stalls


def quiet_half(folder: Path, trials: int, tolerance: float) -> tuple[int, int, int]:
    """(trials with a wrongly marked figure, figures marked, figures) with nothing else running."""
    HALF[0] = "quiet"
    runs = [run_once(folder) for _ in range(trials)]
    references = {name: statistics.median(r[name].median_ms for r in runs) for name in runs[0]}
    wrongly_trials = marked = 0
    for trial, figures in enumerate(runs, 1):
        wrongly = [n for n, f in figures.items() if f.marked and not off(f, references[n], tolerance)]
        marked += sum(f.marked for f in figures.values())
        wrongly_trials += bool(wrongly)
        print(f"quiet trial {trial:2d}: " + "; ".join(describe(f, references[n]) for n, f in figures.items())
              + (f"  WRONGLY MARKED: {', '.join(wrongly)}" if wrongly else ""), flush=True)
    return wrongly_trials, marked, sum(len(r) for r in runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--half", choices=("busy", "quiet", "both"), default="both")
    parser.add_argument("--tolerance", type=float, default=0.10, help="how far off its reference a figure is wrong")
    parser.add_argument("--save", type=Path, help="write every figure (median, p90, IQR/median, CV, load, grade, samples) "
                        "to this JSON file, to judge other grading rules on the same figures")
    args = parser.parse_args(argv)
    SAVED.clear()
    # A `timeout` or a CI job's cancel sends SIGTERM: exit through the `finally` blocks, so the busy loop's
    # spinners (in sessions of their own, out of reach of a group kill) are stopped with this script.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="mlbench-grading-") as tmp:
        folder = Path(tmp)
        (folder / "conv_linear.py").write_text(MODEL, encoding="utf-8")
        (folder / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
        lines = []
        if args.half in ("busy", "both"):
            slipped, wrong, caught, stalls = busy_half(folder, args.trials, args.tolerance)
            lines.append(f"busy half : {args.trials} trials; figures off their reference by more than "
                         f"{args.tolerance:.0%}: {wrong}, marked: {caught}; trials where one slipped through unmarked: "
                         f"{slipped} of {args.trials} (target 0); thread-pool stalls found: {stalls}")
        if args.half in ("quiet", "both"):
            wrongly, marked, figures = quiet_half(folder, args.trials, args.tolerance)
            lines.append(f"quiet half: {args.trials} trials; figures marked: {marked} of {figures}; trials with a "
                         f"figure within {args.tolerance:.0%} of the quiet median yet marked: {wrongly} of "
                         f"{args.trials} (target at most 1)")
    print("\n".join(lines))
    if args.save:
        args.save.write_text(json.dumps(SAVED, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
