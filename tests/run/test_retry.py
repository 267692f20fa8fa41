"""Suspect figures measured again at the end of the run (`latency.retry_s`): which one a report uses,
and how a figure far from its history is graded when it could not be measured again. The unit tests
build records by hand (no torch); the end-to-end test runs a real model whose first measurement a
neighbour's work slows 100x (the model sleeps through its first calls, as a preempted one would)."""

from __future__ import annotations

import json

import pytest

from mlbench.cli.main import main
from mlbench.records import Metric
from mlbench.run.retry import combine, history_medians, not_remeasured, remeasure, why_suspect
from mlbench.stability import Stability
from tests.compare.test_comparison import rec, run_of


def timed(median: float, grade: str = "stable", reasons: list[str] | None = None):
    stability = Stability(grade=grade, iqr_ratio=0.01, cv=0.01, samples=30, reasons=reasons or [])
    return rec("m/torch/cpu", latency__median=Metric(value=median, unit="ms", source="measured", stability=stability))


def test_a_figure_far_from_its_history_or_unreliable_is_suspect_and_a_plain_one_is_not():
    assert why_suspect(timed(135.9), 0.33) == "136 ms is 412x this variant's history median on this machine (0.33 ms)"
    assert why_suspect(timed(0.35), 0.33) is None
    assert why_suspect(timed(0.35, "unreliable", ["cv 0.88"]), None) == "graded unreliable (cv 0.88)"
    assert why_suspect(timed(0.35), None) is None  # no history: nothing to judge it by


def test_the_better_graded_measurement_is_used_and_both_are_kept():
    first, second = timed(135.9), timed(0.34)
    combined = combine(first, second, 0.33, "why")
    assert combined.metrics["latency.median"].value == 0.34
    remeasured = combined.details["remeasured"]
    assert remeasured["used"] == "second" and remeasured["first"]["median_ms"] == 135.9
    stability = combined.metrics["latency.median"].stability
    assert stability.grade == "stable"
    assert stability.adjustments == ["measured again at the end of the run (why): 136 ms then 0.34 ms; this report "
                                     "uses the second"]


def test_two_alike_measurements_far_from_history_read_as_a_real_change_and_disagreeing_ones_are_unreliable():
    alike = combine(timed(1.30), timed(1.25), 0.33, "why").metrics["latency.median"].stability
    assert alike.grade == "noisy" and "read as a real change from the history's 0.33 ms" in alike.adjustments[0]
    assert alike.reasons == ["3.79x this variant's history median (0.33 ms), measured alike twice: a real change, or "
                             "interference that lasted the run"]
    apart = combine(timed(135.9), timed(20.0), 0.33, "why").metrics["latency.median"]
    assert apart.value == 20.0  # the faster of two equally graded
    assert apart.stability.grade == "unreliable"
    assert apart.stability.reasons == ["60.6x this variant's history median (0.33 ms), and the two measurements "
                                       "disagree"]


def test_with_no_time_to_measure_again_a_figure_far_from_history_is_graded_unreliable():
    changed = remeasure({"m/torch/cpu": timed(135.9)}, {"m/torch/cpu": 0.33}, 0, lambda vid: iter(()),
                        lambda text: None)
    stability = changed["m/torch/cpu"].metrics["latency.median"].stability
    assert stability.grade == "unreliable"
    assert stability.reasons == ["412x this variant's history median (0.33 ms), not measured again: latency.retry_s "
                                 "is 0"]
    assert not_remeasured(timed(0.34), 0.33, "why", "x").metrics["latency.median"].stability.grade == "stable"


def test_history_medians_read_this_pipelines_runs_on_this_machine(tmp_path):
    from mlbench.store.history import machine_key, record_run

    db = tmp_path / "history.sqlite"
    assert history_medians(db, "p", "k") == {}
    for run_id, value in (("r1", 0.30), ("r2", 0.36), ("r3", 0.33)):
        report = run_of([rec("m/torch/cpu", latency__median=value)], run_id)
        report = report.model_copy(update={"pipeline": report.pipeline.model_copy(update={"name": "p"})})
        record_run(report, tmp_path / "p.yaml", db)
    key = machine_key(run_of([], "x").machine)
    assert history_medians(db, "p", key) == {"m/torch/cpu": 0.33}
    assert history_medians(db, "other", key) == {}
    stalled = timed(708.0, "unreliable", ["cv 0.76, IQR/median 1.12"])  # left out: not a figure to judge by
    report = run_of([stalled], "r4")
    record_run(report.model_copy(update={"pipeline": report.pipeline.model_copy(update={"name": "p"})}),
               tmp_path / "p.yaml", db)
    assert history_medians(db, "p", key) == {"m/torch/cpu": 0.33}


SLOW_ONCE = '''\
import os, time
import torch
from torch import nn


class SlowOnce(nn.Module):
    """Sleeps through its first calls in the first process that builds it (as a model preempted by a
    neighbour's job would): the flag file is claimed by one process only."""

    def __init__(self, flag: str = "") -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.slow_calls = 0
        try:
            os.rename(flag, flag + ".claimed")
            self.slow_calls = 23  # the first measurement's calls: the first, 2 warmup, 20 timed
        except OSError:
            pass

    def forward(self, x):
        if self.slow_calls:
            self.slow_calls -= 1
            time.sleep(0.01)
        return self.linear(x)
'''


@pytest.mark.slow
def test_a_figure_100x_above_its_history_is_measured_again_and_the_report_uses_the_second(tmp_path, capsys):
    (tmp_path / "slow_once.py").write_text(SLOW_ONCE)
    flag = tmp_path / "slow-flag"
    (tmp_path / "p.yaml").write_text(f"""\
version: 1
name: retry
models:
  - name: lin
    source: slow_once.py:SlowOnce
    kwargs: {{flag: "{flag}"}}
    inputs: [{{name: x, shape: [4, 8]}}]
targets:
  - backend: torch
    device: [cpu]
    precision: [float32]
    threads: 1
latency: {{warmup: 2, repeats: 20, min_time_s: 0}}
report: {{dir: out, formats: [json, markdown]}}
history: {{path: history.sqlite}}
cache: {{dir: cache}}
""")
    assert main(["run", str(tmp_path / "p.yaml"), "--quiet"]) == 0  # the history's run: fast
    fast = json.loads((tmp_path / "out" / "report.json").read_text())["records"][0]["metrics"]["latency.median"]
    assert fast["value"] < 1.0
    flag.write_text("")  # the next run's first measurement sleeps 10 ms a call: ~100x its history
    assert main(["run", str(tmp_path / "p.yaml")]) == 0
    err = capsys.readouterr().err
    assert "measuring 1 suspect figure again (latency.retry_s 60 s): lin/torch/cpu/float32" in err
    record = json.loads((tmp_path / "out" / "report.json").read_text())["records"][0]
    remeasured = record["details"]["remeasured"]
    assert remeasured["first"]["median_ms"] > 9 and remeasured["used"] == "second"
    assert record["metrics"]["latency.median"]["value"] < 1.0
    assert "measured again at the end of the run" in (tmp_path / "out" / "report.md").read_text()
