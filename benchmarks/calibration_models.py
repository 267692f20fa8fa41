"""Rebuild each calibration row's model (random seeded weights), export it through mlbench's Core ML
exporter at the row's precision and analyse the package; analyses are cached as JSON.

Used by `calibrate_latency.py`. Only the architecture matters for FLOPs, bytes and placement, so
random weights stand in for the published checkpoints (which cannot be downloaded here).
MobileOne and FastViT are reparameterized for inference as their repositories do before export
(the published figures are for the reparameterized models).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _shared_folder() -> Path:
    """The calibration folder: $MLBENCH_CALIBRATION_DATA, else the first `shared/calibration` beside the checkout
    or one of its parents (a worktree sits a level deeper than the main checkout)."""
    import os

    if os.environ.get("MLBENCH_CALIBRATION_DATA"):
        return Path(os.environ["MLBENCH_CALIBRATION_DATA"])
    for parent in HERE.parents:
        if (parent / "shared" / "calibration" / "coreml_latency.csv").exists():
            return parent / "shared" / "calibration"
    return HERE.parent.parent / "shared" / "calibration"


SHARED = _shared_folder()
ROWS_PATH = (SHARED if (SHARED / "coreml_latency.csv").exists() else HERE / "calibration") / "coreml_latency.csv"
PUBLISHED_PATH = SHARED / "published_apple.csv"
CHIP_IDS = {"A14": "a14", "A15": "a15", "A16": "a16", "M1": "m1", "M1 Pro": "m1pro", "M1 Max": "m1max",
            "M1 Ultra": "m1ultra", "M2": "m2", "M2 Pro": "m2pro", "M2 Max": "m2max",
            "M2 Ultra": "m2ultra"}  # the chips the calibration rows name -> profile ids


@dataclass(frozen=True)
class Row:
    model: str
    build: str
    input_shape: tuple[int, ...]
    chip: str  # profile id
    compute_units: str  # cpu_only, all, ...
    precision: str
    latency_ms: float
    source: str
    os: str = ""
    optimization: dict | None = None  # the compression the row's variant had (mlbench's `optimizations:` vocabulary)
    variant: str = ""  # the compression in words ('' for the float16 original)
    deployment_target: str | None = None  # the OS the row's model was built for, where the source states it
    also_in: tuple[str, ...] = ()  # other pages printing the same measurement (a shared float16 baseline)

    @property
    def pages(self) -> frozenset[str]:
        """Every page the row's figure is printed on: order pairs are formed within one page."""
        return frozenset(s.split(":")[-1] for s in (self.source, *self.also_in))

    @property
    def label(self) -> str:
        what = self.variant or self.precision
        return f"{self.model} {what} {self.compute_units} on {self.chip}"


def _published_optimization(text: str) -> tuple[dict | None, str] | None:
    """The compression a published row's precision column names; None where it names none we can rebuild.
    Palettization uses coremltools' uniform mode: the stored format (n-bit indices, a per-tensor LUT) is what
    latency depends on, and k-means on every weight would take minutes per model here."""
    t = text.lower()
    if t.startswith(("float16", "not stated")):
        return None, ""
    if m := re.match(r"(\d) bit palettization", t):
        return {"kind": "palettize", "nbits": int(m.group(1)), "mode": "uniform"}, f"palettize{m.group(1)}"
    if t.startswith("weight-only quantization"):
        return {"kind": "linear_quantize", "dtype": "int8"}, "int8 weights"
    if t.startswith("weight & activation quantization"):
        return {"kind": "linear_quantize_activations"}, "W8A8"
    if m := re.match(r"unstructured sparsity (\d+)%", t):
        return {"kind": "prune", "target_sparsity": int(m.group(1)) / 100}, f"sparse{m.group(1)}"
    return None


MOBILECLIP_IMAGE_TOWERS = {"mobileclip_s0": "fastvit_mci0", "mobileclip_s1": "fastvit_mci1",
                           "mobileclip_s2": "fastvit_mci2", "mobileclip_b": "vit_base_mci_224",
                           "same architecture as MobileCLIP-B": "vit_base_mci_224"}


def _published_build(build: str, model: str = "") -> tuple[str, str] | None:
    """(build, model name) for a published row's `build` pointer, or None where it cannot be rebuilt here. A
    MobileCLIP image encoder is timm's image tower of the same name (fastvit_mci0-4, vit_base_mci_224, ViT-L/14),
    as open_clip builds it; its text encoder (open_clip's or ml-mobileclip's own text transformer) is not rebuilt."""
    if "CLIP" in model:
        if "image encoder" not in model:
            return None
        if m := re.search(r"\(timm (\w+)", build):
            return f"timm:{m.group(1)}", m.group(1)
        tower = next((t for key, t in MOBILECLIP_IMAGE_TOWERS.items() if key in build), None)
        return (f"timm:{tower}", tower) if tower else None
    if m := re.match(r"torchvision\.models\.(\w+)\(\)", build):
        return f"torchvision:{m.group(1)}", m.group(1)
    if m := re.match(r"timm\.create_model\('(\w+)'\)", build):
        return f"timm:{m.group(1)}", m.group(1)
    if "mobilevitv2_100" in build:
        return "timm:mobilevitv2_100", "mobilevitv2_100"
    return None


def load_published(path: Path = PUBLISHED_PATH) -> tuple[list[Row], list[str]]:
    """The prediction-latency rows of published_apple.csv that can be rebuilt here, and why each other kind is
    left out. Shared float16 baselines (one measurement printed on three pages) are kept once."""
    rows: list[Row] = []
    left_out: dict[str, int] = {}
    seen: dict[tuple, int] = {}  # a measurement -> its row's index
    with path.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            unit, chip = r["unit"], r["chip"]
            why = None
            if not unit.startswith("ms") or "load time" in r["what"].lower() or "(TTFT)" in r["what"]:
                why = f"{unit.split(' (')[0]}: not one prediction's latency (generation, diffusion or load time)"
            built = _published_build(r["build"], r["model"])
            opt = _published_optimization(r["precision"])
            if why is None and built is None:
                why = ("MobileCLIP text encoder: open_clip's / ml-mobileclip's text transformer not rebuilt here"
                       if "text encoder" in r["model"] else "architecture not rebuildable here (CenterNet head not public)")
            if why is None and opt is None:
                why = f"precision not rebuilt: {r['precision'][:40]}"
            if why is None and chip not in CHIP_IDS:
                why = f"chip {chip} has no profile"
            if why is not None:
                left_out[why] = left_out.get(why, 0) + 1
                continue
            assert built is not None and opt is not None
            build, model = built
            key = (build, chip, opt[1], r["figure"])
            if key in seen:  # one measurement printed on several pages: one row, paired on every page
                first = rows[seen[key]]
                rows[seen[key]] = dataclasses.replace(first, also_in=(*first.also_in, r["source"]))
                continue
            seen[key] = len(rows)
            size = 256 if model.startswith("fastvit") else 224
            platform = "iOS" if "iphone" in r["device"].lower() or "ipad" in r["device"].lower() else "macOS"
            # the compression pages measured on iOS 17, their float16 baselines too: export those at iOS17, so
            # the baseline and its compressed variants are the same program but for the weights
            target = "iOS17" if r["os"].replace(" ", "").startswith("iOS17") else None
            rows.append(Row(model=model, build=build, input_shape=(1, 3, size, size), chip=CHIP_IDS[chip],
                            compute_units="all", precision="float16", latency_ms=float(r["figure"]),
                            source=r["source"], os=platform,
                            optimization=opt[0], variant=opt[1], deployment_target=target))
    return rows, [f"{n} published rows: {why}" for why, n in left_out.items()]


def load_all() -> tuple[list[Row], list[str]]:
    """Both calibration files, each measurement once (the A14 rows of coreml_latency.csv are ml-mobileone's and
    ml-fastvit's README figures, which published_apple.csv holds too)."""
    rows = load_rows(ROWS_PATH)
    if not PUBLISHED_PATH.exists():
        return rows, [f"{PUBLISHED_PATH} not found: fitted on {ROWS_PATH.name} only"]
    published, left_out = load_published()
    have = {(p.model, p.chip, p.variant, p.latency_ms) for p in published}
    kept = [r for r in rows if (r.model, r.chip, "", r.latency_ms) not in have]
    return kept + published, left_out


def load_rows(path: Path = ROWS_PATH) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            rows.append(Row(model=r["model"], build=r["build"], input_shape=tuple(int(d) for d in r["input"].split("x")),
                            chip=CHIP_IDS[r["chip"]], compute_units=r["compute_units"].lower(),
                            precision=r["precision"], latency_ms=float(r["latency_ms"]), source=r["source"],
                            os=r.get("os", "")))
    return rows


def quantizes_activations(row: Row) -> bool:
    return bool(row.optimization) and row.optimization.get("kind") == "linear_quantize_activations"  # type: ignore[union-attr]


def recalibrate_batch_norms(module, shape: tuple[int, ...], batches: int = 4):
    """Batch-norm statistics of `module` re-estimated on seeded inputs, as after training: with random weights and
    the initial statistics (mean 0, variance 1) some activations are negative on every input, so a ReLU leaves a
    tensor that is 0 everywhere and activation quantization cannot choose its scale. Matched statistics centre
    every channel, as a trained network's are; the architecture, FLOPs and stored sizes do not change."""
    import torch

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches
    generator = torch.Generator().manual_seed(1)
    module.train()
    with torch.no_grad():
        for _ in range(batches):
            module(torch.randn((8, *shape[1:]), generator=generator))
    return module.eval()


def build_module(row: Row):
    """The row's model with seeded random weights, reparameterized for inference where it applies (and, for a row
    that quantizes activations, its batch norms recalibrated: recalibrate_batch_norms)."""
    module = _build_module(row)
    return recalibrate_batch_norms(module, row.input_shape) if quantizes_activations(row) else module


def _build_module(row: Row):
    import torch

    torch.manual_seed(0)
    if row.build.startswith("timm:"):
        import timm
        from timm.utils.model import reparameterize_model

        module = timm.create_model(row.build.split(":", 1)[1], pretrained=False).eval()
        return reparameterize_model(module).eval()
    if row.build.startswith("torchvision:"):
        import torchvision

        return getattr(torchvision.models, row.build.split(":", 1)[1])(weights=None).eval()
    import timm
    from timm.utils.model import reparameterize_model

    module = timm.create_model(row.model, pretrained=False).eval()
    return reparameterize_model(module).eval()  # MobileOne / FastViT: fold branches as their repos do


def _code_digest() -> str:
    """The exporter's, analysis' and cost model's source: a change there re-exports and re-analyses."""
    import mlbench.backends.apple as apple
    import mlbench.backends.coreml as coreml

    root, shared = Path(coreml.__file__).parent, Path(next(iter(apple.__path__)))
    files = sorted([root / "export.py", root / "conversion.py", root / "compression.py",
                    root / "activation_quantization.py", *shared.glob("analysis/*.py"), *shared.glob("cost/*.py")])
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def _key(row: Row) -> str:
    from importlib.metadata import version

    parts = [row.build, row.model, "x".join(map(str, row.input_shape)), row.precision, json.dumps(row.optimization),
             version("coremltools"), version("torch"), version("timm"), _code_digest()]
    if row.deployment_target and not row.optimization:  # compressed rows are exported at iOS17 anyway
        parts.append(row.deployment_target)
    if quantizes_activations(row):
        parts.append("batch-norms-recalibrated")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Beside the artifact cache, not inside it: the cache refuses a folder holding files it did not write."""
    from mlbench.store.cache import default_cache_dir

    cache = default_cache_dir()
    return cache.with_name(f"{cache.name}-calibration-analyses")


def analysis_for(row: Row, *, verbose: bool = True):
    """The row's ProgramAnalysis, from the cache or by exporting it now. Raises on export failure (and remembers
    it: a failed export is minutes, and the same code and versions fail the same way)."""
    from mlbench.backends.apple.analysis import ProgramAnalysis

    path = cache_dir() / f"{row.model}-{row.variant or row.precision}-{_key(row)}.json"
    failed = path.with_suffix(".failed")
    if path.exists():
        return ProgramAnalysis.model_validate_json(path.read_text(encoding="utf-8"))
    if failed.exists():  # the same code and versions failed before: say so instead of minutes of re-export
        raise RuntimeError(f"{failed.read_text(encoding='utf-8')} (cached failure: delete {failed.name} to retry)")
    if verbose:
        print(f"exporting {row.model} ({row.variant or row.precision}) ...", file=sys.stderr, flush=True)
    try:
        return _export_and_analyse(row, path)
    except Exception as exc:
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
                          encoding="utf-8")
        raise


def _export_and_analyse(row: Row, path: Path):
    import torch

    from mlbench.backends.apple.analysis import ProgramAnalysis, analyse_package
    from mlbench.backends.coreml.export import export_coreml

    module = build_module(row)
    with tempfile.TemporaryDirectory() as tmp:
        example = torch.randn(row.input_shape)
        calibration = [{"image": torch.randn(row.input_shape).numpy()} for _ in range(2)]
        result = export_coreml(module, [example], ["image"], precision=row.precision,
                               optimization=row.optimization,
                               deployment_target=row.deployment_target or ("iOS17" if row.optimization else None),
                               dest=Path(tmp), calibration=calibration if row.optimization else None)
        analysis = analyse_package(result.artifact)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(".tmp")
    tmp_path.write_text(json.dumps(analysis.model_dump(mode="json")), encoding="utf-8")
    tmp_path.replace(path)
    return ProgramAnalysis.model_validate(analysis.model_dump(mode="json"))


if __name__ == "__main__":  # warm the cache
    for row in load_all()[0]:
        try:
            a = analysis_for(row)
            print(f"{row.label}: {a.totals.compute_ops} ops, {a.totals.flops / 1e9:.2f} GFLOP, "
                  f"{a.totals.bytes / 1e6:.1f} MB, {a.precision}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{row.label}: export failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
