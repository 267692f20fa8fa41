"""A supervised worker serves every variant of a model (its start is paid once, not per variant), and a fresh one
replaces it after a crash: a model that segfaults on its third variant fails that variant only, with the cause,
and the next model's variants run on a fresh worker."""

from __future__ import annotations

import pytest

from mlbench.run.runner import run
from mlbench.validate import load_pipeline

pytestmark = pytest.mark.torch

MODELS = """\
import ctypes
import os

import torch


class PidLogging(torch.nn.Module):
    \"\"\"Writes `name dtype pid` for every call; segfaults when called in `crash_on`'s precision.\"\"\"

    def __init__(self, name, log, crash_on=None):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.name, self.log, self.crash_on = name, log, crash_on

    def forward(self, x):
        with open(self.log, "a") as f:
            f.write(f"{self.name} {str(x.dtype).removeprefix('torch.')} {os.getpid()}\\n")
        if self.crash_on is not None and str(x.dtype) == f"torch.{self.crash_on}":
            ctypes.string_at(0)
        return self.linear(x)
"""

PIPELINE = """\
version: 1
name: reuse
models:
  - name: before
    source: models.py:PidLogging
    kwargs: {{name: before, log: {log}}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: crashes
    source: models.py:PidLogging
    kwargs: {{name: crashes, log: {log}, crash_on: bfloat16}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: after
    source: models.py:PidLogging
    kwargs: {{name: after, log: {log}}}
    inputs: [{{name: x, shape: [1, 8]}}]
targets:
  - backend: torch
    precision: [float32, float16, bfloat16]
latency: {{warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}}
verify: {{tolerance: {{float16: 0.5, bfloat16: 0.5}}}}
report: {{dir: out}}
history: {{enabled: false}}
"""


def test_a_model_segfaulting_on_its_third_variant_fails_that_variant_and_the_next_model_gets_a_fresh_worker(
        tmp_path):
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    log = tmp_path / "calls.log"
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(log=log), encoding="utf-8")
    report = run(load_pipeline(path))
    outcomes = {r.variant_id: (r.status, r.error) for r in report.records}
    crashed = "crashes/torch/cpu/bfloat16"
    assert outcomes.pop(crashed) == ("failed", "the process was killed by SIGSEGV (segmentation fault) while "
                                               "measuring")
    assert set(outcomes.values()) == {("ok", None)} and len(outcomes) == 8
    pids: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        name, _dtype, pid = line.split()
        pids.setdefault(name, set()).add(pid)
    assert len(pids["before"]) == 1 and pids["crashes"] == pids["before"]  # one worker served both models
    assert len(pids["after"]) == 1 and pids["after"].isdisjoint(pids["crashes"])  # a fresh one after the crash
    assert report.stage_seconds["child_start"] > 0
