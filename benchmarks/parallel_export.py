"""Export speed-up of `--jobs 2` over `--jobs 1`, measured side by side in one run.

Each setting runs `mlbench run` in a fresh process on a fresh cache (so every artifact is built),
on a sweep that is all export and untimed analysis (benchmarks/pipelines/export_sweep.yaml: 12
distinct artifacts; off macOS a Core ML variant's measurement times nothing, so with several jobs it
runs beside the exports). Rounds alternate the order of the two settings so machine drift hits both
alike. Prints each wall time with its stages, the CPU time the machine was busy meanwhile, and the speed-up of
the whole run (target ≥ 1.7× on a 2-core machine) beside its bound: `--jobs 1` already keeps more than one core
busy at times (torch's and coremltools' own threads), and no split of that work over the machine's cores finishes
before its busy CPU seconds / cores, so the speed-up can be at most `--jobs 1`'s wall / (its CPU seconds / cores).

Then (skip with --no-overhead) mlbench's cost per export against plain coremltools, in this process:
for each distinct artifact of the sweep, `torch.jit.trace` + `coremltools.convert` (+ the same weight
compression) + `save`, against mlbench's export of the same model and options into a fresh cache (key,
conversion, package analysis, checksum, durable publish), alternating which goes first. Model building
is excluded from both; the model digest (hashed once per model, on its first export) is mlbench's.
Prints each pair and the median overhead (target ≤ 5%).

Usage: python benchmarks/parallel_export.py [--pipeline FILE] [--rounds 2] [--jobs 2] [--no-overhead]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_run(pipeline: Path, jobs: int) -> tuple[float, float | None, dict[str, float]]:
    """Wall seconds of a cold `mlbench run --jobs N`, the machine's busy CPU seconds meanwhile (all processes:
    mlbench's children and their threads are most of it on a quiet machine; None off Linux), and its stage
    seconds (summed over the children: with several jobs they overlap)."""
    from mlbench.machine_load import sample

    exe = Path(sys.executable).with_name("mlbench")
    with tempfile.TemporaryDirectory(prefix="mlbench-parallel-") as tmp:
        env = {**os.environ, "MLBENCH_CACHE_DIR": str(Path(tmp) / "cache"), "MLBENCH_HISTORY": str(Path(tmp) / "h.db")}
        before, t0 = sample(), time.perf_counter()
        done = subprocess.run([str(exe), "run", "-q", "--jobs", str(jobs), str(pipeline)], env=env)
        wall, after = time.perf_counter() - t0, sample()
        busy = after.busy_s - before.busy_s if after.busy_s is not None and before.busy_s is not None else None
        if done.returncode not in (0, 1):  # 1: a variant failed (its verification, say): the exports ran
            raise SystemExit(f"mlbench run --jobs {jobs} exited with {done.returncode}")
        from mlbench.validate import load_pipeline

        report = json.loads((load_pipeline(pipeline).report_dir / "report.json").read_text())
        return wall, busy, report["stage_seconds"]


def plain_export(ct, module, inputs, names, precision: str, recipe: dict | None, target: str, dest: Path) -> None:
    """What a user would write by hand: trace, convert, compress, save."""
    import torch

    traced = torch.jit.trace(module.eval(), tuple(inputs))
    mlmodel = ct.convert(traced, inputs=[ct.TensorType(name=n, shape=t.shape) for n, t in zip(names, inputs)],
                         convert_to="mlprogram", minimum_deployment_target=getattr(ct.target, target),
                         compute_precision=ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32,
                         skip_model_load=True)
    if recipe is not None:
        cto = ct.optimize.coreml
        if recipe["kind"] == "linear_quantize":
            config = cto.OpLinearQuantizerConfig(mode=recipe.get("mode", "linear_symmetric"),
                                                 dtype=recipe.get("dtype", "int8"))
            mlmodel = cto.linear_quantize_weights(mlmodel, cto.OptimizationConfig(global_config=config))
        elif recipe["kind"] == "palettize":
            config = cto.OpPalettizerConfig(mode=recipe.get("mode", "kmeans"), nbits=recipe["nbits"])
            mlmodel = cto.palettize_weights(mlmodel, cto.OptimizationConfig(global_config=config))
        else:
            raise ValueError(f"no plain equivalent written for {recipe['kind']}")
    mlmodel.save(str(dest / "model.mlpackage"))


def export_overhead(pipeline_path: Path) -> list[tuple[str, float, float]]:
    """(artifact id, plain seconds, mlbench seconds) per distinct artifact of the pipeline."""
    import coremltools as ct

    from mlbench.backends.coreml.deployment import check_deployment_target
    from mlbench.backends.coreml.target import recipe_dict
    from mlbench.matrix import Plan, expand
    from mlbench.run.tasks import WorkContext
    from mlbench.store.cache import ArtifactCache
    from mlbench.validate import load_pipeline

    pipeline = load_pipeline(pipeline_path)
    config = pipeline.config
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlbench-overhead-") as tmp:
        ctx = WorkContext(config, pipeline.base_dir, ArtifactCache(Path(tmp) / "cache"))
        for i, group in enumerate(Plan(expand(config)).artifact_groups()):
            variant = group[0]
            model = ctx.model(variant.model)  # built outside both timers
            precision = variant.axis("precision")
            recipe = recipe_dict(config.optimizations.get(variant.axis("optimize")))
            target = check_deployment_target(ctx.backend(variant).target.deployment_target, precision, recipe)
            dest = Path(tmp) / f"plain-{i}"
            dest.mkdir()

            backend = ctx.backend(variant)
            sides = {"plain": (plain_export, (ct, model.module, model.example_inputs, model.input_names, precision,
                                              recipe, target, dest)),
                     "mlbench": (backend.export, (model, variant))}
            seconds = {}
            for name in (("plain", "mlbench") if i % 2 == 0 else ("mlbench", "plain")):
                fn, fn_args = sides[name]
                t0 = time.perf_counter()
                result = fn(*fn_args)
                seconds[name] = time.perf_counter() - t0
                if name == "mlbench":
                    assert result.info is not None and not result.info.cache_hit
            p, m = seconds["plain"], seconds["mlbench"]
            rows.append((variant.artifact_id, p, m))
            print(f"  {variant.artifact_id:42s} plain {p:6.2f} s, mlbench {m:6.2f} s ({m / p - 1:+6.1%})", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, default=ROOT / "benchmarks" / "pipelines" / "export_sweep.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-overhead", action="store_true", help="skip the comparison with plain coremltools")
    parser.add_argument("--no-speedup", action="store_true", help="skip the --jobs comparison")
    args = parser.parse_args()
    if not args.no_speedup:
        speedup(args)
    if not args.no_overhead:
        print("per-export cost, mlbench against plain torch.jit.trace + coremltools.convert (+ compression) + save:")
        rows = export_overhead(args.pipeline)
        overheads = [m / p - 1 for _, p, m in rows]
        total = sum(m for *_, m in rows) / sum(p for _, p, _ in rows) - 1
        print(f"mlbench overhead per export: median {statistics.median(overheads):+.1%} (range "
              f"{min(overheads):+.1%} to {max(overheads):+.1%}), over all exports {total:+.1%} "
              f"(target ≤ +5%) {'PASS' if statistics.median(overheads) <= 0.05 else 'OVER'}")


def speedup(args: argparse.Namespace) -> None:
    from mlbench.machine_load import describe, load_between, sample

    start = sample()
    serial: list[float] = []
    parallel: list[float] = []
    serial_bound: list[float] = []
    cores = os.cpu_count() or 1
    for i in range(args.rounds):
        order = [(1, serial), (args.jobs, parallel)]
        for jobs, out in (order if i % 2 == 0 else order[::-1]):
            wall, busy, stages = timed_run(args.pipeline, jobs)
            out.append(wall)
            summed = ", ".join(f"{name} {value:.1f} s" for name, value in stages.items())
            cpu = f", machine busy {busy:.1f} CPU s ({busy / wall:.2f} of {cores} cores)" if busy is not None else ""
            print(f"round {i + 1}: --jobs {jobs}: {wall:6.1f} s{cpu} (stages summed over the children: {summed})",
                  flush=True)
            if jobs == 1 and busy:
                serial_bound.append(wall / (busy / cores))
    s, p = statistics.median(serial), statistics.median(parallel)
    print(f"--jobs 1 median {s:.1f} s, --jobs {args.jobs} median {p:.1f} s: speed-up of the whole run {s / p:.2f}× "
          f"(target ≥ 1.7× with 2 jobs on 2 cores) {'PASS' if s / p >= 1.7 else 'UNDER'}")
    if serial_bound:
        print(f"bound: --jobs 1's work spread perfectly over {cores} cores would finish {statistics.median(serial_bound):.2f}× "
              "sooner (its wall / (its busy CPU seconds / cores)); no --jobs setting can beat that on this machine")
    print(f"machine load meanwhile (the mlbench runs it started count as other processes): "
          f"{describe(load_between(start, sample(), 'benchmark'))}")


if __name__ == "__main__":
    main()
