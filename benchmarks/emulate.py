"""Does the Core ML interpreter compute what PyTorch computes, and how fast?

For a sweep of torchvision models (weights=None, seeded), each exported at float32 and float16
through mlbench's Core ML exporter, prints per model:
  * whether the interpreter can run the program (or which op types it lacks);
  * float32 max_rel of the emulated outputs against eager PyTorch (target ≤ 1e-5);
  * float16 max_rel (rounding every op's output to float16; expect ~1e-3, tolerance 1e-2);
  * emulation time ÷ eager time on the float32 program (target ≤ 3× on resnet18).

max_rel = max|emulated - eager| / max(max|eager|, 1), over every output.

Random weights: every Linear layer is reset (as examples/random_weights.py does) and BatchNorm
statistics are set from one random batch (--no-calibrate keeps them), so outputs carry signal
instead of collapsing to the classifier's bias.

Usage:
  python benchmarks/emulate.py [--models resnet18,mobilenet_v2] [--precisions float32,float16]
                               [--work-dir DIR] [--repeats 3] [--export-only]

Exports are kept in --work-dir (default: a temporary folder) and reused when already there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# name -> (torchvision builder, input size); segmentation models return a dict ("out", "aux").
MODELS: dict[str, tuple[str, int]] = {
    "resnet18": ("models.resnet18", 224),
    "resnet50": ("models.resnet50", 224),
    "resnext50_32x4d": ("models.resnext50_32x4d", 224),
    "wide_resnet50_2": ("models.wide_resnet50_2", 224),
    "alexnet": ("models.alexnet", 224),
    "vgg11": ("models.vgg11", 224),
    "squeezenet1_0": ("models.squeezenet1_0", 224),
    "squeezenet1_1": ("models.squeezenet1_1", 224),
    "densenet121": ("models.densenet121", 224),
    "googlenet": ("models.googlenet", 224),
    "inception_v3": ("models.inception_v3", 299),
    "mobilenet_v2": ("models.mobilenet_v2", 224),
    "mobilenet_v3_small": ("models.mobilenet_v3_small", 224),
    "mobilenet_v3_large": ("models.mobilenet_v3_large", 224),
    "mnasnet0_5": ("models.mnasnet0_5", 224),
    "shufflenet_v2_x0_5": ("models.shufflenet_v2_x0_5", 224),
    "shufflenet_v2_x1_0": ("models.shufflenet_v2_x1_0", 224),
    "efficientnet_b0": ("models.efficientnet_b0", 224),
    "regnet_x_400mf": ("models.regnet_x_400mf", 224),
    "regnet_y_400mf": ("models.regnet_y_400mf", 224),
    "convnext_tiny": ("models.convnext_tiny", 224),
    "vit_b_16": ("models.vit_b_16", 224),
    "deeplabv3_mobilenet_v3_large": ("models.segmentation.deeplabv3_mobilenet_v3_large", 224),
    "lraspp_mobilenet_v3_large": ("models.segmentation.lraspp_mobilenet_v3_large", 224),
    "fcn_resnet50": ("models.segmentation.fcn_resnet50", 224),
}
DEFAULT_MODELS = list(MODELS)
CALIBRATE_BATCH_NORM = True  # --no-calibrate turns it off (the exports then differ: use another --work-dir)


def build(name: str):
    import torch
    import torchvision

    path, size = MODELS[name]
    builder = torchvision
    for part in path.split("."):
        builder = getattr(builder, part)
    torch.manual_seed(0)
    kwargs = {"weights": None}
    if "segmentation" in path:
        kwargs["weights_backbone"] = None
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = builder(**kwargs).eval()
    # torchvision initialises some heads so that random outputs are ≈ 0 (ViT's head is all zeros,
    # MobileNet's std 0.01): reset every Linear layer as examples/random_weights.py does, so the
    # comparison has a usable scale.
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.reset_parameters()
    generator = torch.Generator().manual_seed(1)
    example = torch.randn(1, 3, size, size, generator=generator)
    if CALIBRATE_BATCH_NORM:
        _calibrate_batch_norm(model, torch.randn(4, 3, size, size, generator=generator))
    if "segmentation" in path:
        model = _tuple_outputs(model)
    return model, example


def _calibrate_batch_norm(model, batch) -> None:
    """Set every BatchNorm's running statistics from one random batch (cumulative average).

    With weights=None, BatchNorm layers hold mean 0 / variance 1, so activations shrink through
    deep networks until many classifiers output only their bias (a check that cannot fail).
    Statistics from a random batch keep every layer at unit scale; the model stays seeded.
    """
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(batch)
    model.eval()


def _tuple_outputs(model):
    import torch

    class TupleOutputs(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(x)
            return tuple(out[k] for k in sorted(out))

    return TupleOutputs(model).eval()


def export(name: str, precision: str, work_dir: Path) -> Path:
    """The exported package (reused when already in work_dir)."""
    from tests.emulate_helpers import export_coreml

    dest = work_dir / f"{name}_{precision}"
    artifact = dest / "model.mlpackage"
    if (artifact / "Manifest.json").is_file():
        return artifact
    model, example = build(name)
    result = export_coreml(model, [example], ["image"], precision=precision, optimization=None,
                           deployment_target=None, dest=dest)
    return result.artifact


def eager(model, example):
    import torch

    with torch.no_grad():
        out = model(example)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def eager_folded(model, example):
    """Eager outputs with every BatchNorm folded into its convolution, as coremltools folds them: the
    fair float32 reference for the interpreter (None where torch.fx cannot trace the model)."""
    import copy

    from torch.fx.experimental.optimization import fuse

    try:
        folded = fuse(copy.deepcopy(model).eval())
    except Exception:  # noqa: BLE001 - control flow fx cannot trace
        return None
    return eager(folded, example)


def timed(call, repeats: int) -> float:
    call()  # warmup
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def max_rel(reference, actual) -> float:
    import numpy as np

    worst = 0.0
    for ref, got in zip(reference, actual):
        ref = np.asarray(ref, dtype=np.float64)
        got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
        err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        if np.isnan(got).any():
            err = float("inf")
        worst = max(worst, err / max(float(np.max(np.abs(ref))), 1.0))
    return worst


def run_model(name: str, precisions: list[str], work_dir: Path, repeats: int, export_only: bool) -> dict:
    import torch

    row: dict = {"model": name}
    model, example = build(name)
    reference = eager(model, example)
    row["ref_scale"] = max(float(abs(r).max()) for r in reference)
    for precision in precisions:
        try:
            artifact = export(name, precision, work_dir)
        except Exception as exc:  # noqa: BLE001 - reported per model
            row[precision] = f"export failed: {str(exc)[:80]}"
            continue
        if export_only:
            row[precision] = "exported"
            continue
        from mlbench.backends.coreml.emulate import Emulator, UnsupportedOps, load_program

        program = load_program(artifact)
        inputs = {program.input_names[0]: example.numpy()}
        try:
            emulator = Emulator(program)  # decodes the weights once, as a runtime's load would
            outputs = emulator.run(inputs)
        except UnsupportedOps as exc:
            row[precision] = f"unsupported: {', '.join(exc.ops)}"
            continue
        except Exception as exc:  # noqa: BLE001
            row[precision] = f"error: {type(exc).__name__}: {str(exc)[:100]}"
            traceback.print_exc()
            continue
        row[precision] = max_rel(reference, list(outputs.values()))
        if precision == "float32":
            folded = eager_folded(model, example)
            row["float32_folded"] = None if folded is None else max_rel(folded, list(outputs.values()))
            with torch.no_grad():
                eager_s = timed(lambda: model(example), repeats)
            emulate_s = timed(lambda: emulator.run(inputs), repeats)  # noqa: B023 - called right here
            row["eager_ms"] = eager_s * 1e3
            row["emulate_ms"] = emulate_s * 1e3
            row["ratio"] = emulate_s / eager_s
    return row


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.2e}"
    return str(value) if value is not None else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated subset")
    parser.add_argument("--precisions", default="float32,float16")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep (and reuse) exports here")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--export-only", action="store_true")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="keep BatchNorm statistics as initialised (outputs of deep models shrink to ≈ bias)")
    args = parser.parse_args(argv)
    global CALIBRATE_BATCH_NORM
    CALIBRATE_BATCH_NORM = not args.no_calibrate
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}")
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="mlbench-emulate-"))
    work_dir.mkdir(parents=True, exist_ok=True)

    import torch

    torch.set_num_threads(torch.get_num_threads())
    print("max_rel = max|emulated - eager| / max(max|eager|, 1); |ref| = max|eager| (near 0: a weak check)")
    print("fp32 folded: against eager with BatchNorm folded into the convolutions, as coremltools folds them")
    print(f"{'model':30s} {'|ref|':>8s} {'fp32 max_rel':>13s} {'fp32 folded':>12s} {'fp16 max_rel':>13s} "
          f"{'eager ms':>9s} {'emul ms':>9s} {'ratio':>6s}", flush=True)
    rows = []
    for name in names:
        try:
            row = run_model(name, precisions, work_dir, args.repeats, args.export_only)
        except Exception as exc:  # noqa: BLE001
            row = {"model": name, "float32": f"error: {exc}"}
        rows.append(row)
        print(f"{name:30s} {fmt(row.get('ref_scale')):>8s} {fmt(row.get('float32')):>13s} "
              f"{fmt(row.get('float32_folded')):>12s} {fmt(row.get('float16')):>13s} "
              f"{fmt(row.get('eager_ms')) if 'eager_ms' not in row else format(row['eager_ms'], '9.1f'):>9s} "
              f"{fmt(row.get('emulate_ms')) if 'emulate_ms' not in row else format(row['emulate_ms'], '9.1f'):>9s} "
              f"{'-' if 'ratio' not in row else format(row['ratio'], '6.2f'):>6s}", flush=True)
    if not args.export_only:
        ran = [r for r in rows if isinstance(r.get("float32"), float)]
        passed = [r for r in ran if r["float32"] <= 1e-5]
        ran16 = [r for r in rows if isinstance(r.get("float16"), float)]
        fair = [r for r in ran if isinstance(r.get("float32_folded"), float)]
        print(f"\nran in the interpreter: float32 {len(ran)}/{len(rows)}, float16 {len(ran16)}/{len(rows)}; "
              f"float32 max_rel ≤ 1e-5: {len(passed)}/{len(ran)} against eager, "
              f"{sum(r['float32_folded'] <= 1e-5 for r in fair)}/{len(fair)} against BatchNorm-folded eager")
        overflow = [r["model"] for r in rows if isinstance(r.get("float16"), float) and not r["float16"] < float("inf")]
        if overflow:
            print(f"float16 inf/nan (eager |ref| beyond float16's 65504: the program overflows): {', '.join(overflow)}")
        for r in rows:
            if r["model"] == "resnet18" and "ratio" in r:
                print(f"resnet18 emulation ÷ eager: {r['ratio']:.2f}× (target ≤ 3×)")
    print(f"exports in {work_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
