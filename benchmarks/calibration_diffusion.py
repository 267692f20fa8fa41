"""Stable Diffusion 2.1's UNet for the latency fit: the rows of published_apple.csv that give one chip's diffusion
speed (iterations/s) on chips no prediction-latency row covers (A15, M1, M2 beside A14 and A16).

    PYTHONPATH=. python benchmarks/calibration_diffusion.py   # build, export and analyse once (minutes), cached

An iteration is one UNet prediction at batch 2 (classifier-free guidance, "unet batch 2" in the rows), 64x64
latents (512x512 images), 77 text tokens of width 1024; the scheduler's step is negligible beside it, so
1000 / (iterations/s) is taken as the UNet's latency, and the row says so.

The UNet at its published size (866M parameters) is too large to convert on a 24 GB machine, so it is built
from stabilityai/stable-diffusion-2-1-base's unet/config.json with `layers_per_block` 1 instead of 2 (same
widths, heads and attention; 583M parameters), exported with 6-bit palettized weights as the rows' models
were, and its estimate scaled by the full model's FLOPs over the reduced one's (both counted by
torch.utils.flop_counter on the meta device, 1608.5 / 1047.2 GFLOP). What differs from the published models
and is not modelled: Apple's SPLIT_EINSUM_V2 attention rewrite (mlbench exports diffusers' attention as
matmuls) and k-means tables (uniform palettization here; the stored format is what latency depends on).
"""

from __future__ import annotations

import csv
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calibration_models import CHIP_IDS, PUBLISHED_PATH, Row, cache_dir

# stabilityai/stable-diffusion-2-1-base, unet/config.json (diffusers UNet2DConditionModel), as published
UNET_CONFIG = {
    "sample_size": 64, "in_channels": 4, "out_channels": 4, "block_out_channels": (320, 640, 1280, 1280),
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "layers_per_block": 2, "attention_head_dim": (5, 10, 20, 20), "cross_attention_dim": 1024,
    "use_linear_projection": True, "norm_num_groups": 32, "flip_sin_to_cos": True, "freq_shift": 0,
}
REDUCED_LAYERS = 1
BATCH = 2  # classifier-free guidance: "unet batch 2"
TOKENS, TEXT_WIDTH = 77, 1024
MODEL = "sd21_unet"
SCALE_WORDS = "UNet with layers_per_block 1 (same widths); estimate scaled by the full UNet's FLOPs"


@dataclass(frozen=True)
class DiffusionRow:
    row: Row
    scale: float  # full model's FLOPs / the exported reduced model's


def _inputs():
    import torch

    torch.manual_seed(0)
    return [torch.randn(BATCH, 4, 64, 64), torch.full((BATCH,), 500.0), torch.randn(BATCH, TOKENS, TEXT_WIDTH)]


def _unet(layers: int):
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(**{**UNET_CONFIG, "layers_per_block": layers}).eval()


def flop_scale() -> float:
    """FLOPs of the published UNet over the reduced one's, counted on the meta device (no memory, no weights)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    totals = []
    for layers in (UNET_CONFIG["layers_per_block"], REDUCED_LAYERS):
        with torch.device("meta"):
            module = _unet(layers)
            args = [t.to("meta") for t in _inputs()]
            with FlopCounterMode(display=False) as counter:
                module(*args)
        totals.append(counter.get_total_flops())
    return totals[0] / totals[1]


class _Wrapped:
    """The UNet as a module taking three tensors and returning one (what the exporter traces)."""

    @staticmethod
    def build():
        import torch

        class UNetOnly(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.unet = _unet(REDUCED_LAYERS)

            def forward(self, sample, timestep, encoder_hidden_states):
                return self.unet(sample, timestep, encoder_hidden_states, return_dict=False)[0]

        return UNetOnly().eval()


def load_diffusion(path: Path = PUBLISHED_PATH) -> tuple[list[DiffusionRow], list[str]]:
    """The current table's SD 2.1 rows on chips with a profile, and the superseded June 2023 table's rows on chips
    the current table does not measure (M1 Ultra, M2 Ultra: the GPU, macOS 14 beta); what else is left out and
    why."""
    if not path.exists():  # a checkout without the shared folder: load_all says so for the latency rows
        return [], [f"diffusion rows: {path} not found"]
    rows, left_out = [], {}
    scale = None
    with path.open(encoding="utf-8") as f:
        table = [r for r in csv.DictReader(f) if r["unit"].startswith("iterations/s")]
    current = {r["chip"] for r in table if r["model"].startswith("stable-diffusion-2-1-base (apple/")}
    for r in table:
        why = None
        superseded = r["model"].startswith("stable-diffusion-2-1-base (superseded")
        if superseded and r["chip"] in current:
            why = "superseded June 2023 table, chip measured again in the later table"
        elif not superseded and not r["model"].startswith("stable-diffusion-2-1-base (apple/"):
            why = "SDXL: UNet not rebuilt here (2.6B parameters)"
        elif r["chip"] not in CHIP_IDS:
            why = f"chip {r['chip']} has no profile"
        if why is not None:
            left_out[why] = left_out.get(why, 0) + 1
            continue
        scale = scale if scale is not None else flop_scale()
        units = r["compute_units"].split(" ")[0].lower()
        figure = float(re.match(r"[\d.]+", r["figure"]).group(0))  # type: ignore[union-attr]
        row = Row(model=MODEL, build="diffusers:UNet2DConditionModel", input_shape=(BATCH, 4, 64, 64),
                  chip=CHIP_IDS[r["chip"]], compute_units=units, precision="float16",
                  latency_ms=1000.0 / figure, source=r["source"], os="macOS" if r["os"].startswith("macOS") else "iOS",
                  optimization={"kind": "palettize", "nbits": 6, "mode": "uniform"}, variant="palettize6")
        rows.append(DiffusionRow(row=row, scale=scale))
    return rows, [f"{n} diffusion rows: {why}" for why, n in left_out.items()]


def analysis_for_unet(verbose: bool = True):
    """The reduced UNet's ProgramAnalysis (6-bit palettized, float16, iOS17), cached beside the others."""
    import torch

    from mlbench.backends.apple.analysis import ProgramAnalysis, analyse_package
    from mlbench.backends.coreml.export import export_coreml

    path = cache_dir() / f"{MODEL}-L{REDUCED_LAYERS}-palettize6.json"
    if path.exists():
        return ProgramAnalysis.model_validate_json(path.read_text(encoding="utf-8"))
    if verbose:
        print(f"exporting {MODEL} (layers_per_block {REDUCED_LAYERS}, 6-bit palettized; minutes) ...",
              file=sys.stderr, flush=True)
    module = _Wrapped.build()
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        result = export_coreml(module, _inputs(), ["sample", "timestep", "encoder_hidden_states"],
                               precision="float16", optimization={"kind": "palettize", "nbits": 6, "mode": "uniform"},
                               deployment_target="iOS17", dest=Path(tmp))
        analysis = analyse_package(result.artifact)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(".tmp")
    tmp_path.write_text(json.dumps(analysis.model_dump(mode="json")), encoding="utf-8")
    tmp_path.replace(path)
    return analysis


if __name__ == "__main__":
    found, skipped = load_diffusion()
    print(f"{len(found)} rows; scale ×{found[0].scale:.3f}" if found else "no rows")
    for line in skipped:
        print(line)
    a = analysis_for_unet()
    print(f"{MODEL}: {a.totals.compute_ops} ops, {a.totals.flops / 1e9:.1f} GFLOP, {a.totals.bytes / 1e6:.0f} MB")
