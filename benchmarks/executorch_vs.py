"""Which runtime is faster on this CPU: ExecuTorch-XNNPACK vs LiteRT-XNNPACK vs ONNX Runtime vs eager PyTorch?

Runs one mlbench sweep on a fresh temporary cache: the same small models (mobilenet_v3_small, a two-layer
transformer encoder and a two-layer LSTM, random weights; resnet18 on request) on `backend: torch` (eager, CPU,
float32), `backend: onnxruntime` (CPU provider, float32), `backend: executorch` (`delegate: xnnpack`, float32)
and `backend: litert` (XNNPACK, float32), all timed by mlbench's one timing loop (same warmup, repeats and
statistics). Prints a table of medians (ms, with p90) per model and runtime, each runtime's speed against
eager, and the machine's load before and after: on a shared machine, read the figures with it.

Threads: eager, ONNX Runtime and LiteRT run at `--threads` (default: this machine's CPU count); ExecuTorch's
XNNPACK threadpool has no per-program setting in its Python runtime and takes the CPU count.

Usage: python benchmarks/executorch_vs.py [--repeats 30] [--min-time 1.0] [--threads N]
           [--models mobilenet_v3_small,encoder,lstm] [--runtimes eager,onnxruntime,executorch-xnnpack,litert-xnnpack]
Needs the onnxruntime extra, and the executorch and litert extras for their columns (a runtime whose extra is
missing shows the skip reason). About two to four minutes on a 2-core x86 VM (exports included).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MODELS: dict[str, dict[str, Any]] = {
    "mobilenet_v3_small": {"source": f"{EXAMPLES}/random_weights.py:torchvision_model",
                           "kwargs": {"name": "mobilenet_v3_small", "weights": None},
                           "inputs": [{"name": "image", "shape": [1, 3, 224, 224]}]},
    "encoder": {"source": f"{EXAMPLES}/small_sequence.py:SmallEncoder",
                "inputs": [{"name": "features", "shape": [1, 64, 128]}]},
    "lstm": {"source": f"{EXAMPLES}/small_sequence.py:SmallLSTM",
             "inputs": [{"name": "features", "shape": [1, 32, 64]}]},
    "resnet18": {"source": f"{EXAMPLES}/random_weights.py:torchvision_model",
                 "kwargs": {"name": "resnet18", "weights": None},
                 "inputs": [{"name": "image", "shape": [1, 3, 224, 224]}]},
}
DEFAULT_MODELS = ("mobilenet_v3_small", "encoder", "lstm")
RUNTIMES = (("eager", "torch"), ("onnxruntime", "onnxruntime"), ("executorch-xnnpack", "executorch"),
            ("litert-xnnpack", "litert"))


def targets(runtimes: list[str], threads: int) -> list[dict[str, Any]]:
    """One float32 CPU target per runtime (label from RUNTIMES)."""
    every = {"eager": {"backend": "torch", "device": ["cpu"], "precision": ["float32"], "threads": threads},
             "onnxruntime": {"backend": "onnxruntime", "providers": ["cpu"], "precision": ["float32"],
                             "intra_op_threads": threads},
             "executorch-xnnpack": {"backend": "executorch", "delegate": ["xnnpack"], "precision": ["float32"]},
             "litert-xnnpack": {"backend": "litert", "precision": ["float32"], "threads": threads}}
    return [every[label] for label in runtimes]


def pipeline(models: list[str], repeats: int, min_time_s: float, folder: Path,
             runtimes: list[str] | None = None, threads: int = 1) -> dict[str, Any]:
    return {
        "version": 1, "name": "executorch_vs",
        "models": [{"name": name, **MODELS[name]} for name in models],
        "targets": targets(runtimes or [label for label, _ in RUNTIMES], threads),
        "latency": {"warmup": 3, "repeats": repeats, "min_time_s": min_time_s},
        "verify": {"samples": 1},
        "cache": {"dir": str(folder / "cache")},
        "report": {"dir": str(folder / "out"), "formats": ["json"]},
        "seed": 0,
    }


def sweep(models: list[str], repeats: int, min_time_s: float, runtimes: list[str] | None = None,
          threads: int = 1) -> dict[tuple[str, str], tuple[float | None, float | None, str]]:
    """(model, backend) → (median ms, p90 ms, status or error)."""
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    with tempfile.TemporaryDirectory(prefix="mlbench-executorch-vs-") as tmp:
        path = Path(tmp) / "pipeline.yaml"  # JSON is YAML
        path.write_text(json.dumps(pipeline(models, repeats, min_time_s, Path(tmp), runtimes, threads), indent=1),
                        encoding="utf-8")
        report = run(load_pipeline(path))
    cells = {}
    for record in report.records:
        median, p90 = record.metrics.get("latency.median"), record.metrics.get("latency.p90")
        cells[(record.model, record.backend)] = (median.value if median else None, p90.value if p90 else None,
                                                 record.status if record.status == "ok" else str(record.error))
    return cells


def table(models: list[str], cells: dict[tuple[str, str], tuple[float | None, float | None, str]],
          runtimes: list[str] | None = None) -> list[str]:
    chosen = [(label, backend) for label, backend in RUNTIMES if runtimes is None or label in runtimes]
    head = "| model | " + " | ".join(f"{label} median (p90), ms" for label, _ in chosen) + " | fastest |"
    lines = [head, "|---|" + "---:|" * len(chosen) + "---|"]
    for model in models:
        row, best = [], None
        eager = cells.get((model, "torch"), (None, None, ""))[0]
        for label, backend in chosen:
            median, p90, status = cells.get((model, backend), (None, None, "not run"))
            if median is None:
                row.append(f"— ({status[:60]})")
                continue
            speed = f", {eager / median:.2f}× eager" if eager and backend != "torch" else ""
            row.append(f"{median:.3g} ({p90:.3g}){speed}")
            best = min(best or (median, label), (median, label))
        lines.append(f"| {model} | " + " | ".join(row) + f" | {best[1] if best else '—'} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--min-time", type=float, default=1.0, help="least seconds of timed calls per variant")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    labels = [label for label, _ in RUNTIMES]
    parser.add_argument("--runtimes", default=",".join(labels), help=f"comma-separated, of: {', '.join(labels)}")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads of eager, ONNX Runtime and LiteRT (default: the CPU count, ExecuTorch's own)")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    runtimes = [r for r in args.runtimes.split(",") if r]
    unknown = [r for r in runtimes if r not in labels]
    if unknown or not runtimes:
        parser.error(f"unknown runtime(s) {', '.join(unknown)}; known: {', '.join(labels)}")
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    cells = sweep(models, args.repeats, args.min_time, runtimes, args.threads)
    wall = time.perf_counter() - t0
    print("\n".join(table(models, cells, runtimes)))
    print(f"\n{os.cpu_count()} CPUs; eager, ONNX Runtime and LiteRT at {args.threads} thread(s), ExecuTorch's "
          f"threadpool at the CPU count; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} "
          f"(1 min); {wall:.0f} s with exports")


if __name__ == "__main__":
    main()
