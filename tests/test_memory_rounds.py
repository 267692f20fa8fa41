"""`memory.rounds` (mlbench/run/memory_rounds.py): memory.peak as the median over rounds in separate processes,
with its spread, so that `mlbench compare --fail-on memory.peak:+10%` passes identical runs of a model whose
peak moves by whole buffers between processes, and still fails a model with 30% larger layers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mlbench.cli.main import main
from mlbench.memory import median_of_rounds
from mlbench.records import Metric

WIDE = """\
import torch


class Wide(torch.nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, width, 3, padding=1)
        self.head = torch.nn.Conv2d(width, 4, 1)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)))
"""

PIPELINE = """\
version: 1
name: mem
models:
  - name: wide
    source: wide.py:Wide
    kwargs: {{width: {width}}}
    inputs: [{{name: x, shape: [{batch}, 3, 96, 96]}}]
targets:
  - backend: {backend}
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
memory: {{rounds: 3}}
verify: {{samples: 1}}
cache: {{dir: cache}}
report: {{dir: out-{name}, formats: [json]}}
"""


def _run(tmp_path: Path, name: str, *, width: int = 64, batch: int = 4, backend: str = "torch") -> Path:
    """One real run of the 2-conv model (through eager PyTorch by default); the path of its report.json."""
    (tmp_path / "wide.py").write_text(WIDE)
    path = tmp_path / f"{name}.yaml"
    path.write_text(PIPELINE.format(width=width, batch=batch, name=name, backend=backend))
    assert main(["run", str(path)]) == 0
    return tmp_path / f"out-{name}" / "report.json"


def _peak(report: Path, name: str = "memory.peak") -> dict:
    (record,) = json.loads(report.read_text())["records"]
    return {**record["metrics"][name], "details": record["details"]["memory"]}


def test_the_median_of_rounds_keeps_each_rounds_figure_and_their_spread():
    def figures(peak: float | None) -> dict[str, Metric]:
        return {"memory.peak": Metric(value=peak, unit="bytes", source="measured") if peak is not None else
                Metric.absent("bytes", "not measured"), "memory.load": Metric.absent("bytes", "eager")}

    merged = median_of_rounds([figures(31e6), figures(21e6), figures(24e6)])
    assert (merged["memory.peak"].value, merged["memory.peak"].samples, merged["memory.peak"].spread) == (
        24e6, [31e6, 21e6, 24e6], 10e6)
    assert merged["memory.load"].value is None and merged["memory.load"].spread is None
    alone = median_of_rounds([figures(31e6), figures(None)])  # one round measured it: as the first gave it
    assert alone["memory.peak"].value == 31e6 and alone["memory.peak"].spread is None


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_identical_runs_pass_the_memory_gate_and_a_model_with_30_percent_larger_layers_fails_it(tmp_path, capsys):
    # batch 4: 9.4 MB activations, whose peak moved between 21.7 and 31.1 MB over identical single-round runs
    first, second = _run(tmp_path, "first"), _run(tmp_path, "second")
    peak = _peak(first)
    assert peak["source"] == "measured" and len(peak["samples"]) == 3
    assert peak["value"] == sorted(peak["samples"])[1] and peak["spread"] == max(peak["samples"]) - min(peak["samples"])
    assert peak["details"]["rounds"] == 3 and peak["details"]["aggregate"] == "median"
    assert peak["details"]["timed_round"]["memory.peak"] > 0  # kept beside, not in the median
    assert json.loads(first.read_text())["stage_seconds"]["memory_rounds"] > 0  # where a run's time went
    capsys.readouterr()
    assert main(["compare", str(first), str(second), "--fail-on", "memory.peak:+10%"]) == 0, capsys.readouterr().out
    # batch 16: 38 MB activations (above glibc's largest mmap threshold: mapped afresh each time, a steadier
    # peak); width 83 is 30% more channels, so 30% larger layers and activations
    base, larger = _run(tmp_path, "base", batch=16), _run(tmp_path, "larger", width=83, batch=16)
    capsys.readouterr()
    assert main(["compare", str(base), str(larger), "--fail-on", "memory.peak:+10%"]) == 1
    assert "memory.peak" in capsys.readouterr().out


@pytest.mark.torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.parametrize("backend, modules", [
    ("onnxruntime", ("onnxruntime",)),
    pytest.param("executorch", ("executorch",), marks=pytest.mark.slow),  # an export, three children
    pytest.param("litert", ("litert_torch", "ai_edge_litert"), marks=pytest.mark.slow),
])
def test_each_runtime_measures_its_load_and_peak_over_the_rounds_too(tmp_path, backend, modules):
    for module in modules:
        pytest.importorskip(module)
    report = _run(tmp_path, backend, backend=backend)
    for name in ("memory.load", "memory.peak"):
        figure = _peak(report, name)
        assert figure["source"] == "measured" and len(figure["samples"]) == 3 and figure["spread"] >= 0
        assert figure["value"] == sorted(figure["samples"])[1]
    assert "the median over 3 load-and-predict rounds, each in a process of its own" in figure["details"]["rounds_note"]
