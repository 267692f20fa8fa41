"""Which published rows the latency calibration fits (benchmarks/calibration_models.py, calibration_diffusion.py),
and how order pairs are formed: on small CSVs in published_apple.csv's format, so no export runs."""

from __future__ import annotations

import csv
import importlib
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

FIELDS = ["model", "build", "input", "chip", "device", "os", "compute_units", "precision", "figure", "unit", "what",
          "source"]
PAGE = "apple/coremltools@e0e2f42:docs-guides/source/"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    for name in ("calibration_models", "calibration_diffusion", "calibrate_latency"):
        sys.modules.pop(name, None)
    return importlib.import_module("calibration_models")


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "not stated") for k in FIELDS})
    return path


def row(model: str, build: str, precision: str, figure: str, page: str, chip: str = "A16", **more: str) -> dict:
    return {"model": model, "build": build, "chip": chip, "device": "iPhone 14 Pro", "os": "iOS17 (Xcode 15)",
            "compute_units": "ALL", "precision": precision, "figure": figure, "unit": "ms per batch",
            "what": "Xcode Performance tab, median prediction latency", "source": PAGE + page, **more}


def test_a_baseline_printed_on_several_pages_is_one_row_paired_on_every_page(bench, tmp_path):
    resnet = "torchvision.models.resnet50()"
    path = write(tmp_path / "p.csv", [
        row("ResNet50", resnet, "Float16", "1.52", "opt-palettization-perf.md"),
        row("ResNet50", resnet, "6 bit palettization (K-Means, post-training)", "1.37", "opt-palettization-perf.md"),
        row("ResNet50", resnet, "Float16", "1.52", "opt-quantization-perf.md"),
        row("ResNet50", resnet, "Weight & activation quantization (training-time)", "0.94",
            "opt-quantization-perf.md"),
    ])
    rows, _ = bench.load_published(path)
    assert [(r.variant, r.latency_ms) for r in rows] == [("", 1.52), ("palettize6", 1.37), ("W8A8", 0.94)]
    assert rows[0].pages == {"docs-guides/source/opt-palettization-perf.md", "docs-guides/source/opt-quantization-perf.md"}
    calibrate = importlib.import_module("calibrate_latency")
    cases = [type("C", (), {"model": r.model, "group": r.chip})() for r in rows]
    pairs = list(calibrate.calibration_pairs(cases, [r.pages for r in rows]))
    assert pairs == [(0, 1), (0, 2)]  # palettized and W8A8 each pair with the float16 baseline, not with each other


def test_mobileclip_image_encoders_are_timm_towers_and_text_encoders_are_left_out_with_the_reason(bench, tmp_path):
    common = {"chip": "A14", "device": "iPhone12 Pro Max", "unit": "ms", "precision": "not stated"}
    path = write(tmp_path / "p.csv", [
        {**row("MobileCLIP2-S0 image encoder", "open_clip.create_model('MobileCLIP2-S0') (timm fastvit_mci0 image "
               "tower)", "", "1.5", "README.md"), **common},
        {**row("MobileCLIP-S0 image encoder", "mobileclip.create_model_and_transforms('mobileclip_s0') "
               "(apple/ml-mobileclip; mci0 + mct text)", "", "1.5", "README.md"), **common},
        {**row("MobileCLIP-B (LT) image encoder", "same architecture as MobileCLIP-B", "", "10.4", "README.md"),
         **common},
        {**row("MobileCLIP-S0 text encoder", "mobileclip.create_model_and_transforms('mobileclip_s0')", "", "1.6",
               "README.md"), **common},
    ])
    rows, left_out = bench.load_published(path)
    assert [(r.build, r.input_shape, r.chip) for r in rows] == [
        ("timm:fastvit_mci0", (1, 3, 256, 256), "a14"),  # the same tower and figure in both READMEs: one row
        ("timm:vit_base_mci_224", (1, 3, 224, 224), "a14")]
    assert left_out == ["1 published rows: MobileCLIP text encoder: open_clip's / ml-mobileclip's text transformer "
                        "not rebuilt here"]


def test_superseded_diffusion_rows_count_only_for_chips_the_later_table_does_not_measure(bench, tmp_path, monkeypatch):
    diffusion = importlib.import_module("calibration_diffusion")
    monkeypatch.setattr(diffusion, "flop_scale", lambda: 1.5)  # diffusers is not needed to choose rows
    sd = "stable-diffusion-2-1-base"
    speed = {"unit": "iterations/s (diffusion speed)", "source": "apple/ml-stable-diffusion:README.md"}
    path = write(tmp_path / "p.csv", [
        {"model": f"{sd} (apple/coreml-stable-diffusion-2-1-base-palettized)", "chip": "M1", "figure": "2.19",
         "compute_units": "CPU_AND_NE", "os": "iOS 17.0 / iPadOS 17.0", **speed},
        {"model": f"{sd} (superseded June 2023 table)", "chip": "M1", "figure": "2.1", "compute_units": "CPU_AND_NE",
         "os": "iOS 17.0", **speed},
        {"model": f"{sd} (superseded June 2023 table)", "chip": "M2 Ultra", "figure": "7.6",
         "compute_units": "CPU_AND_GPU", "os": "macOS 14.0 public beta (June 2023)", **speed},
        {"model": "stable-diffusion-xl-base-1.0 (apple/coreml-stable-diffusion-xl-base)", "chip": "M2 Ultra",
         "figure": "1.11", "compute_units": "CPU_AND_GPU", "os": "macOS 14.0", **speed},
    ])
    rows, left_out = diffusion.load_diffusion(path)
    assert [(d.row.chip, d.row.os, d.row.compute_units, round(d.row.latency_ms, 1)) for d in rows] == [
        ("m1", "iOS", "cpu_and_ne", 456.6), ("m2ultra", "macOS", "cpu_and_gpu", 131.6)]
    assert sorted(left_out) == ["1 diffusion rows: SDXL: UNet not rebuilt here (2.6B parameters)",
                                "1 diffusion rows: superseded June 2023 table, chip measured again in the later table"]


def test_batch_norms_recalibrated_on_seeded_inputs_leave_no_tensor_zero_everywhere(bench):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                 torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    with torch.no_grad():
        for norm in (module[1], module[4]):
            norm.running_mean.fill_(50.0)  # statistics far from the activations: every ReLU output is 0
        before = module(torch.randn(2, 3, 16, 16))
    assert float(before.abs().max()) == 0.0
    bench.recalibrate_batch_norms(module, (1, 3, 16, 16))
    assert not module.training
    with torch.no_grad():
        after = module(torch.randn(2, 3, 16, 16))
    positive = float((after > 0).float().mean())
    assert 0.2 < positive < 0.8  # centred channels: about half of each ReLU's outputs pass


def test_without_timm_the_benchmark_says_what_to_install_in_one_line(bench, monkeypatch, capsys):
    import importlib.util

    calibrate = importlib.import_module("calibrate_latency")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else find_spec(name, *a))
    assert calibrate.main([]) == 2
    assert capsys.readouterr().err == 'calibrate_latency: needs timm and diffusers: pip install -e ".[calibration]"\n'


def test_a_checkout_without_the_shared_calibration_folder_leaves_the_diffusion_rows_out_saying_so(bench, tmp_path):
    diffusion = importlib.import_module("calibration_diffusion")
    missing = tmp_path / "published_apple.csv"
    assert diffusion.load_diffusion(missing) == ([], [f"diffusion rows: {missing} not found"])
