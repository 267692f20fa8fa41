"""What a CI log shows: a piped `mlbench run` prints a line at once, the start and end of each long stage,
a heartbeat naming what runs whenever it was silent, what a resume reused, and a Core ML variant's estimate
where nothing is timed."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import threading
import time

import pytest

from mlbench.cli.main import main
from mlbench.records import Band, Metric, RunRecord
from mlbench.run.progress import PlainProgress, record_line
from tests.conftest import ROOT

SLOW = '''\
import time

import torch


class Slow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        time.sleep(0.4)
        return self.linear(x)
'''

PIPELINE = """\
version: 1
name: piped
models:
  - name: slow
    source: slow.py:Slow
    inputs: [{name: x, shape: [1, 8]}]
targets:
  - backend: torch
latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}
report: {dir: out}
history: {enabled: false}
"""


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_a_piped_run_prints_a_line_at_once_and_each_long_stage(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CI", None)
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "mlbench", "run", "pipeline.yaml"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic() - t0, line.rstrip("\n"))
                                                          for line in child.stderr))  # type: ignore[union-attr]
    reader.start()
    assert child.wait(timeout=240) == 0
    reader.join()
    assert lines and lines[0][0] < 30 and lines[0][1] == "1 variant to run"
    text = [line for _, line in lines]
    assert "  start measure slow/torch/cpu/float32" in text  # ≥ 1.6 s of sleeping calls: announced
    record = next(i for i, line in enumerate(text) if line.startswith("[1/1] slow/torch/cpu/float32  ok  median "))
    assert text.index("  start measure slow/torch/cpu/float32") < record
    assert text[-1] == f"1 ok; 1 timed; reports in {tmp_path / 'out'}"
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(lines)]
    assert max(gaps) < 30, lines  # the heartbeat: never 30 s without a line


def test_the_heartbeat_names_what_runs_and_stages_end_with_their_time():
    stream = io.StringIO()
    progress = PlainProgress(stream, heartbeat_s=0.6)
    progress.start(3, done=1)
    progress.stage("m/coreml/float16", "queued")  # short stages: only with -v
    progress.stage("m", "load")
    progress.stage("m/coreml/float16", "export")  # the model is built: its load is over, said only if it lasted
    time.sleep(1.3)  # past ANNOUNCE_S: announced; past heartbeat_s without a line: a heartbeat
    progress.stage("m/coreml/float16/all", "measure")
    progress.stop()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "2 of 3 variants to run" and "  start export m/coreml/float16" in lines
    beats = [line for line in lines if line.startswith("  … ")]
    assert beats and all(" in, 1/3 done; running: export m/coreml/float16 (" in line for line in beats), lines
    assert lines[-1].startswith("  done  export m/coreml/float16 in 1.") and lines[-1].endswith(" s")
    assert not any("load" in line or "queued" in line for line in lines)


def test_an_artifact_ends_when_a_variant_with_measurement_axes_between_its_own_begins():
    stream = io.StringIO()
    progress = PlainProgress(stream)
    progress.running[("export", "m/torch/float32")] = (time.monotonic() - 2, True)
    progress.stage("m/torch/cpu/float32", "measure")  # torch: device (measured) comes before precision
    assert stream.getvalue().startswith("  done  export m/torch/float32 in 2.0 s\n")
    assert list(progress.running) == [("measure", "m/torch/cpu/float32")]


def test_a_core_ml_line_gives_its_estimate_where_nothing_is_measured():
    record = RunRecord(variant_id="m/coreml/float16/all", model="m", backend="coreml", axes={}, artifact_id="a",
                       status="ok", started="t", seconds=0.1,
                       metrics={"latency.estimated.a17pro": Metric(value=0.4123, unit="ms", source="estimated"),
                                "latency.estimated.m1": Metric(value=0.3, unit="ms", source="estimated")})
    assert record_line(record, 2, 8) == "[2/8] m/coreml/float16/all  ok  ≈0.412 ms on a17pro (estimated)"
    band = Band(median_ratio=1.4, worst_ratio=2.01, basis="calibration")
    record.metrics["latency.estimated.a17pro"] = Metric(value=0.4123, unit="ms", source="estimated", band=band)
    record.metrics["memory.estimated"] = Metric(value=10_000_000, unit="bytes", source="estimated")
    assert record_line(record, 2, 8) == ("[2/8] m/coreml/float16/all  ok  ≈0.412 ms on a17pro (estimated, ×2.01 at "
                                         "worst), memory ≈10.0 MB (estimated)")
    record.metrics["latency.median"] = Metric(value=0.5, unit="ms", source="measured")  # on a Mac: measured leads
    assert record_line(record, 2, 8).endswith("ok  median 0.500 ms (measured); ≈0.412 ms on a17pro (estimated, "
                                              "×2.01 at worst), memory ≈10.0 MB (estimated)")


@pytest.mark.torch
def test_resume_says_how_many_finished_records_it_reused(write_pipeline, tiny_pipeline_text, tmp_path, capsys):
    path = write_pipeline(tiny_pipeline_text + "history: {enabled: false}\n")
    assert main(["run", "-q", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", "--resume", str(path)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"resuming: 1 finished record reused from {tmp_path / 'out' / 'journal.jsonl'}", "0 of 1 variant to run",
        f"1 ok; 0 timed (1 cached); reports in {tmp_path / 'out'}"]


def test_the_eta_counts_down_from_this_run_s_records_and_says_when_a_variant_overruns():
    from mlbench.run.progress import Eta

    eta = Eta(done=6)  # a resume: six records reused, taking no time here
    assert eta.text(10, 6, now=eta.started + 5) == "ETA -:--:--"  # nothing finished here yet: nothing to go by
    eta.last = eta.started + 20
    eta.done = 8  # two variants in 20 s: 10 s each, two left
    assert eta.text(10, 8, now=eta.last + 4) == "ETA 0:00:16"
    assert eta.text(10, 8, now=eta.last + 45) == "ETA: running 0:00:45 (others took 0:00:10), then ~0:00:10"
    eta.done, eta.last = 9, eta.started + 30  # the third in 10 s too
    assert eta.text(10, 9, now=eta.last + 45) == "ETA: running 0:00:45 (others took 0:00:10)"
    assert eta.text(10, 10) == "ETA 0:00:00"
