"""Suspect figures measured again at the end of the run (`latency.retry_s`): which one a report uses,
and how a figure far from its history is graded when it could not be measured again. The unit tests
build records by hand (no torch); the end-to-end test runs a real model whose first measurement a
neighbour's work slows 100x (the model sleeps through its first calls, as a preempted one would)."""

from __future__ import annotations

import json

import pytest

from mlbench.cli.main import main
from mlbench.records import Metric
from mlbench.run.retry import (
    ReferenceRounds,
    alternate,
    combine,
    comparable_history,
    history_medians,
    not_remeasured,
    reference_for,
    remeasure,
    why_suspect,
)
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


def test_two_measurements_apart_with_no_history_use_the_faster_and_say_so():
    """A machine's slow spell can read steady: with nothing to arbitrate, a steady 3.56 ms second measurement must
    not replace a noisy 1.30 ms first one as a plain figure (seen on a VM whose speed changes by itself)."""
    combined = combine(timed(1.30, "noisy", ["cv 0.15, IQR/median 0.06"]), timed(3.56), None, "why")
    assert combined.metrics["latency.median"].value == 1.30
    assert combined.details["remeasured"]["used"] == "first"
    stability = combined.metrics["latency.median"].stability
    assert stability.grade == "noisy"
    assert stability.reasons[-1] == ("measured twice 2.74x apart with no history to tell which is the variant's: "
                                     "the faster is used")
    broken = combine(timed(934.0, "unreliable", ["cv 0.48, IQR/median 0.57"]), timed(27.7), None, "why")
    assert broken.metrics["latency.median"].value == 27.7  # the preempted first one is not used
    assert broken.metrics["latency.median"].stability.grade == "noisy"
    close = combine(timed(1.30, "noisy"), timed(1.28), None, "why").metrics["latency.median"]
    assert close.value == 1.28 and close.stability.grade == "stable"  # alike: the better graded, as before


def test_a_figure_timed_with_one_thread_after_a_stall_is_not_judged_by_the_configured_counts_history():
    """The history holds 2-thread figures (13.8 ms); a busy runner's stalled pool made this run time resnet18 with 1
    thread (58.8 ms, steady): 4.27x, but the stall's fallback, not a change of the model, so it is not a suspect
    and not called a real change."""
    stalled = timed(58.8)
    stalled.details["thread_check"] = {"configured": 2, "configured_ms": 349.0, "one_thread_ms": 67.9,
                                       "stalled": True, "factor": 1.5}
    assert comparable_history(stalled, 13.8) is None and comparable_history(timed(58.8), 13.8) == 13.8
    measured: list[str] = []
    changed = remeasure({"m/torch/cpu": stalled}, {"m/torch/cpu": 13.8}, 60.0,
                        lambda vid: iter(measured.append(vid) or [timed(58.0)]), lambda _note: None)
    assert changed == {} and measured == []
    plain = timed(58.8)  # timed with the configured count: far from its history, so measured again
    remeasure({"m/torch/cpu": plain}, {"m/torch/cpu": 13.8}, 60.0,
              lambda vid: iter(measured.append(vid) or [timed(14.0)]), lambda _note: None)
    assert measured == ["m/torch/cpu"]


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


def variant(variant_id: str, median: float, grade: str = "stable"):
    """A record of `model/backend/device/precision` with a measured median, graded `grade`."""
    model, backend, device, precision = variant_id.split("/")
    record = timed(median, grade, ["cv 0.88"] if grade == "unreliable" else None)
    return record.model_copy(update={"variant_id": variant_id, "model": model, "backend": backend,
                                     "axes": {"device": device, "precision": precision}})


REF, SUSPECT = "m/torch/cpu/float32", "m/onnxruntime/cpu/float32"


def measurer(figures: dict[str, list[float]]):
    """`measure(variant_id)` yielding each variant's next figure in turn, and the order it was asked in."""
    asked: list[str] = []

    def measure(vid: str):
        asked.append(vid)
        yield variant(vid, figures[vid].pop(0))

    return measure, asked


def test_the_reference_is_the_models_eager_float32_cpu_variant_and_none_for_itself():
    records = {v.variant_id: v for v in (variant(REF, 5.0), variant(SUSPECT, 136.0), variant("n/onnxruntime/cpu/float32", 1.0),
                                         variant("m/torch/cpu/float16", 9.0))}
    assert reference_for(records[SUSPECT], records) == REF
    assert reference_for(records["m/torch/cpu/float16"], records) == REF
    assert reference_for(records[REF], records) is None
    assert reference_for(records["n/onnxruntime/cpu/float32"], records) is None  # another model's reference only


def test_a_suspect_is_measured_alternating_with_its_reference_and_a_held_reference_says_the_variant():
    # the 400x case: the suspect's first figure moved on its own, its reference measured alike throughout
    records = {REF: variant(REF, 5.0), SUSPECT: variant(SUSPECT, 136.0)}
    measure, asked = measurer({REF: [5.1, 4.9], SUSPECT: [0.34, 0.35]})
    changed = remeasure(records, {SUSPECT: 0.33}, 60, measure, lambda text: None)
    assert asked == [REF, SUSPECT, REF, SUSPECT]
    assert list(changed) == [SUSPECT]  # the reference's own record stands as the run measured it
    record = changed[SUSPECT]
    assert record.metrics["latency.median"].value == 0.34
    reference = record.details["remeasured"]["reference"]
    assert reference == {"variant": REF, "order": "reference, suspect, ...", "first_median_ms": 5.0,
                         "first_ratio": 136.0 / 5.0, "medians_ms": [5.1, 4.9], "suspect_medians_ms": [0.34, 0.35],
                         "ratios": [0.34 / 5.1, 0.35 / 4.9], "verdict": "variant"}
    stability = record.metrics["latency.median"].stability
    assert stability.grade == "stable"
    assert stability.adjustments == [
        "measured again at the end of the run (136 ms is 412x this variant's history median on this machine (0.33 "
        "ms)): 136 ms then 0.34 ms; this report uses the second; m/torch/cpu/float32 read 5 ms in the run and 5.1, "
        "4.9 ms in rounds alternating with this variant's 0.34, 0.35 ms: the reference did not move alike, so the "
        "first figure was this variant's own"]


def test_a_reference_that_moved_alike_says_the_first_figure_was_the_machines():
    records = {REF: variant(REF, 50.0), SUSPECT: variant(SUSPECT, 4.0, "unreliable")}  # both 10x slow at first
    measure, _ = measurer({REF: [5.0, 5.2], SUSPECT: [0.41, 0.40]})
    record = remeasure(records, {}, 60, measure, lambda text: None)[SUSPECT]
    assert record.details["remeasured"]["reference"]["verdict"] == "machine"
    assert record.metrics["latency.median"].value == 0.40  # the faster of two stable re-measurements
    assert record.metrics["latency.median"].stability.adjustments[0].endswith(
        "the reference moved alike, so the first figure was the machine's")


def test_a_figure_far_from_history_whose_reference_is_as_far_from_its_own_is_the_machine_and_unreliable():
    history = {REF: 1.25, SUSPECT: 0.33}  # this machine now reads both ~4x their history, twice alike
    records = {REF: variant(REF, 5.0), SUSPECT: variant(SUSPECT, 1.30)}
    measure, asked = measurer({REF: [5.0, 5.1, 5.0], SUSPECT: [1.28, 1.31]})
    stability = remeasure(records, history, 60, measure, lambda text: None)[SUSPECT].metrics["latency.median"].stability
    assert asked == [REF, REF, SUSPECT, REF, SUSPECT]  # the reference, suspect too, is measured again on its own first
    assert stability.grade == "unreliable"
    assert stability.reasons[-1] == ("3.88x this variant's history median (0.33 ms), measured alike twice, and its "
                                     "reference variant is as far from its own history: the machine, not the variant")
    # the reference as in its history: a change of this variant, which a gate still judges
    measure, _ = measurer({REF: [1.26, 1.24], SUSPECT: [1.28, 1.31]})
    records = {REF: variant(REF, 1.25), SUSPECT: variant(SUSPECT, 1.30)}
    changed = remeasure(records, history, 60, measure, lambda text: None)[SUSPECT]
    assert changed.metrics["latency.median"].stability.grade == "noisy"
    assert changed.details["remeasured"]["reference"]["verdict"] == "steady"


def test_a_second_round_starts_only_while_the_budget_holds_what_the_first_took():
    measure, asked = measurer({REF: [5.0, 5.0], SUSPECT: [0.34, 0.34]})
    rounds = ReferenceRounds(REF, 5.0)
    assert alternate(SUSPECT, rounds, measure, lambda: 0.0) is not None  # the first round is always measured
    assert asked == [REF, SUSPECT] and rounds.pairs == [(5.0, 0.34)]
    failing = ReferenceRounds(REF, 5.0)

    def reference_fails(vid: str):
        yield variant(vid, 0.34) if vid == SUSPECT else rec(REF, status="failed")

    second = alternate(SUSPECT, failing, reference_fails, lambda: 60.0)
    assert second is not None and failing.pairs == [] and failing.failures == [f"{REF}: measure: boom"] * 2
    assert failing.judge(136.0) is None  # no round had both: nothing to judge by


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


SLOW_HALF_ONCE = '''\
import os, time
import torch
from torch import nn


class SlowHalfOnce(nn.Module):
    """Its float16 variant sleeps through its first calls the first time it runs (as a variant preempted by a
    neighbour's job would, its reference left alone): the flag file is claimed once, whichever process runs it."""

    def __init__(self, flag: str = "") -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.flag, self.slow_calls = flag, None

    def forward(self, x):
        if x.dtype == torch.float16 and self.slow_calls is None:
            try:
                os.rename(self.flag, self.flag + ".claimed")
                self.slow_calls = 23  # the first measurement's calls: the first, 2 warmup, 20 timed
            except OSError:
                self.slow_calls = 0
        if self.slow_calls:
            self.slow_calls -= 1
            time.sleep(0.01)
        return self.linear(x)
'''


@pytest.mark.torch
@pytest.mark.slow  # two runs of two variants, then four measurements alternating
def test_a_suspect_is_measured_again_alternating_with_its_reference_in_a_real_run(tmp_path):
    (tmp_path / "slow_half.py").write_text(SLOW_HALF_ONCE)
    flag = tmp_path / "slow-flag"
    (tmp_path / "p.yaml").write_text(f"""\
version: 1
name: retry_ref
models:
  - name: lin
    source: slow_half.py:SlowHalfOnce
    kwargs: {{flag: "{flag}"}}
    inputs: [{{name: x, shape: [4, 8]}}]
targets:
  - backend: torch
    device: [cpu]
    precision: [float32, float16]
    threads: 1
latency: {{warmup: 2, repeats: 20, min_time_s: 0}}
verify: {{samples: 1}}
report: {{dir: out, formats: [json]}}
history: {{path: history.sqlite}}
cache: {{dir: cache}}
""")
    assert main(["run", str(tmp_path / "p.yaml"), "--quiet"]) == 0  # the history's run: fast
    flag.write_text("")  # the next run's float16 variant sleeps 10 ms a call in its first measurement
    assert main(["run", str(tmp_path / "p.yaml"), "--quiet"]) == 0
    records = {r["variant_id"]: r for r in json.loads((tmp_path / "out" / "report.json").read_text())["records"]}
    half = records["lin/torch/cpu/float16"]
    remeasured = half["details"]["remeasured"]
    reference = remeasured["reference"]
    assert reference["variant"] == "lin/torch/cpu/float32" and len(reference["medians_ms"]) == 2, reference
    assert remeasured["first"]["median_ms"] > 9 and remeasured["used"] == "second"
    assert half["metrics"]["latency.median"]["value"] < 5
    # the reference held (well under 5 ms each time) while the suspect moved 10 ms and more: the variant's own
    assert max(reference["medians_ms"]) < 5 and reference["verdict"] == "variant", reference
    assert "remeasured" not in records["lin/torch/cpu/float32"]["details"]
