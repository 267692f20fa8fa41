"""Rebuild each calibration row's model (random seeded weights), export it through mlbench's Core ML
exporter at the row's precision and analyse the package; analyses are cached as JSON.

Used by `calibrate_latency.py`. Only the architecture matters for FLOPs, bytes and placement, so
random weights stand in for the published checkpoints (which cannot be downloaded here).
MobileOne and FastViT are reparameterized for inference as their repositories do before export
(the published figures are for the reparameterized models).
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS_PATH = HERE / "calibration" / "coreml_latency.csv"
CHIP_IDS = {"A14": "a14", "M1 Pro": "m1pro"}  # the chips the calibration rows name -> profile ids


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

    @property
    def label(self) -> str:
        return f"{self.model} {self.precision} {self.compute_units} on {self.chip}"


def load_rows(path: Path = ROWS_PATH) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            rows.append(Row(model=r["model"], build=r["build"], input_shape=tuple(int(d) for d in r["input"].split("x")),
                            chip=CHIP_IDS[r["chip"]], compute_units=r["compute_units"].lower(),
                            precision=r["precision"], latency_ms=float(r["latency_ms"]), source=r["source"],
                            os=r.get("os", "")))
    return rows


def build_module(row: Row):
    """The row's model with seeded random weights, reparameterized for inference where it applies."""
    import torch

    torch.manual_seed(0)
    if row.build.startswith("torchvision:"):
        import torchvision

        return getattr(torchvision.models, row.build.split(":", 1)[1])(weights=None).eval()
    import timm
    from timm.utils.model import reparameterize_model

    module = timm.create_model(row.model, pretrained=False).eval()
    return reparameterize_model(module).eval()  # MobileOne / FastViT: fold branches as their repos do


def _code_digest() -> str:
    """The exporter's, analysis' and cost model's source: a change there re-exports and re-analyses."""
    import mlbench.backends.coreml as coreml

    root = Path(coreml.__file__).parent
    files = sorted([root / "export.py", root / "conversion.py", *root.glob("analysis/*.py"), *root.glob("cost/*.py")])
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def _key(row: Row) -> str:
    from importlib.metadata import version

    parts = [row.build, row.model, "x".join(map(str, row.input_shape)), row.precision,
             version("coremltools"), version("torch"), version("timm"), _code_digest()]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Beside the artifact cache, not inside it: the cache refuses a folder holding files it did not write."""
    from mlbench.store.cache import default_cache_dir

    cache = default_cache_dir()
    return cache.with_name(f"{cache.name}-calibration-analyses")


def analysis_for(row: Row, *, verbose: bool = True):
    """The row's ProgramAnalysis, from the cache or by exporting it now. Raises on export failure."""
    import torch

    from mlbench.backends.apple.analysis import ProgramAnalysis, analyse_package
    from mlbench.backends.coreml.export import export_coreml

    path = cache_dir() / f"{row.model}-{row.precision}-{_key(row)}.json"
    if path.exists():
        return ProgramAnalysis.model_validate_json(path.read_text(encoding="utf-8"))
    if verbose:
        print(f"exporting {row.model} ({row.precision}) ...", file=sys.stderr, flush=True)
    module = build_module(row)
    with tempfile.TemporaryDirectory() as tmp:
        result = export_coreml(module, [torch.randn(row.input_shape)], ["image"], precision=row.precision,
                               optimization=None, deployment_target=None, dest=Path(tmp))
        analysis = analyse_package(result.artifact)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(".tmp")
    tmp_path.write_text(json.dumps(analysis.model_dump(mode="json")), encoding="utf-8")
    tmp_path.replace(path)
    return analysis


if __name__ == "__main__":  # warm the cache
    for row in load_rows():
        try:
            a = analysis_for(row)
            print(f"{row.label}: {a.totals.compute_ops} ops, {a.totals.flops / 1e9:.2f} GFLOP, "
                  f"{a.totals.bytes / 1e6:.1f} MB, {a.precision}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{row.label}: export failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
