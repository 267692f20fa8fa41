"""Sustained runs on calls whose duration the test sets: the first and last windows' medians, the slope in ms per
minute, and the note that says why a run slowed (throttled when the thermal state rose)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from mlbench import sustained
from mlbench.config.pipeline import LatencySettings


class VirtualClock:
    """The sustained run's clock, moved only by the calls: window medians are exact whatever the machine's load
    (real sleeps woke up to 2 ms late on a loaded runner, and identical windows differed by a third)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> VirtualClock:
    virtual = VirtualClock()
    monkeypatch.setattr(sustained, "time", SimpleNamespace(perf_counter=virtual))
    return virtual


def stepping_call(clock: VirtualClock, slow_after_s: float, fast_ms: float = 4.0, slow_ms: float = 12.0):
    """A call that takes `fast_ms`, then `slow_ms` once `slow_after_s` seconds have passed on `clock`."""

    def call() -> None:
        clock.now += (slow_ms if clock.now >= slow_after_s else fast_ms) / 1e3

    return call


UNREAD = {"method": "linux sysfs", "state": None, "cpu_mhz": None, "throttle_events": None, "zones": {},
          "reason": "no thermal zone"}


def test_a_run_that_slows_halfway_reports_both_windows_a_positive_slope_and_why(clock):
    run = sustained.run_sustained(stepping_call(clock, 0.45), seconds=0.9, window_s=60.0, reader=lambda: UNREAD)
    assert run.window_s == pytest.approx(0.3)  # a third of the run: shorter than the configured minute
    assert run.first == pytest.approx(4.0) and run.last == pytest.approx(12.0)
    assert len(run.windows) == 3 and run.windows[0] < run.windows[-1]
    assert run.slope > 0  # ms per minute: (12 - 4) ms over the 0.6 s between the outer windows' midpoints ≈ 800
    assert run.throttled() is None
    note = run.note()
    assert note is not None and note.startswith("slowed ") and "from the first window to the last" in note
    assert note.endswith("thermal state unread (no thermal zone)")
    metrics = run.metrics()
    assert metrics["latency.sustained.slope"].unit == "ms/min" and metrics["latency.sustained.slope"].value == run.slope
    assert metrics["latency.sustained.first"].source == "measured"
    details = run.details()
    assert details["throttled"] is False and details["note"] == note and details["calls"] == len(run.samples_ms)


def test_a_rise_of_the_thermal_state_is_the_throttled_note(clock):
    readings = iter([{"state": "nominal"}, {"state": "serious"}])
    run = sustained.run_sustained(stepping_call(clock, 0.2), seconds=0.4, window_s=0.1, reader=lambda: next(readings))
    assert run.throttled() == "thermal state nominal → serious"
    assert run.note() == "throttled: thermal state nominal → serious"
    assert run.details()["throttled"] is True
    assert len(run.windows) == 4  # the configured window, shorter than a third of the run


def test_a_steady_run_has_no_note(clock):
    steady = {"state": "nominal"}
    run = sustained.run_sustained(stepping_call(clock, 99.0), seconds=0.3, window_s=0.1, reader=lambda: steady)
    assert run.note() is None and run.last == run.first == pytest.approx(4.0)


def test_nothing_runs_when_sustained_s_is_zero():
    called: list[int] = []
    metrics: dict = {}
    details: dict = {}
    sustained.sustained_figures(lambda: called.append(1), LatencySettings(), metrics, details)
    assert called == [] and metrics == {} and details == {}
    sustained.sustained_figures(lambda: time.sleep(0.001), LatencySettings(sustained_s=0.2, sustained_window_s=0.05),
                                metrics, details)
    assert set(metrics) == {"latency.sustained.first", "latency.sustained.last", "latency.sustained.slope"}
    assert details["sustained"]["window_s"] == 0.05


# ---------------------------------------------------------------------------------------------
# For real: eager PyTorch and ONNX Runtime, a busy loop started halfway through each sustained run

SUSTAINED_S = 8.0
LOAD_AFTER_S = 3.5  # after the variant's measure stage starts: its timed loop is short, so mid-run
PIPELINE = """\
version: 1
name: sustained
models:
  - name: tiny_cnn
    source: {root}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 160, 160]}}]
  - name: wide_cnn  # ONNX Runtime's calls are ~4x shorter: a larger image keeps them past a time slice
    source: {root}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 384, 384]}}]
exclude: [{{model: tiny_cnn, backend: onnxruntime}}, {{model: wide_cnn, backend: torch}}]
targets:
  - backend: torch
    threads: 1
  - backend: onnxruntime
    intra_op_threads: 1
latency: {{warmup: 1, repeats: 5, min_time_s: 0.0, retry_s: 0, sustained_s: {seconds}, sustained_window_s: 60}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown]}}
history: {{enabled: false}}
"""


@pytest.mark.torch
@pytest.mark.slow  # two sustained runs of 8 s, under a busy loop for half of each
def test_eager_and_onnxruntime_slow_under_a_load_started_halfway_and_say_why(tmp_path, monkeypatch):
    import json
    import threading
    from contextlib import ExitStack

    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    from mlbench.run.progress import Progress
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline
    from tests.conftest import ROOT
    from tests.test_stability_reports import SPIN, busy_loop

    monkeypatch.setattr("tests.test_stability_reports.SPIN", SPIN.replace("rng.uniform(0.0, 0.01)", "0"))  # no naps

    class LoadHalfway(Progress):
        """Starts the busy loop LOAD_AFTER_S into each variant's measure stage, stops it when the record comes."""

        def __init__(self) -> None:
            self.stack = ExitStack()
            self.timer: threading.Timer | None = None

        def stage(self, subject: str, stage: str) -> None:
            if stage == "measure" and "/" in subject and self.timer is None:
                self.timer = threading.Timer(LOAD_AFTER_S, self.load)
                self.timer.start()

        def load(self) -> None:
            for _ in range(2):  # twice the stability test's spinners, never napping: a shared machine is busy already
                self.stack.enter_context(busy_loop())

        def record(self, record, done: int, total: int) -> None:
            if self.timer is not None:
                self.timer.join()
                self.timer = None
            self.stack.close()

    path = tmp_path / "sustained.yaml"
    path.write_text(PIPELINE.format(root=ROOT, seconds=SUSTAINED_S), encoding="utf-8")
    progress = LoadHalfway()
    try:
        report = run(load_pipeline(path), progress)
    finally:
        progress.stack.close()
    records = {r.backend: r for r in report.records}
    assert set(records) == {"torch", "onnxruntime"}
    for backend, record in records.items():
        assert record.status == "ok", record.error
        facts = record.details["sustained"]
        first, last = record.metrics["latency.sustained.first"].value, record.metrics["latency.sustained.last"].value
        slope = record.metrics["latency.sustained.slope"]
        assert (first, last) == (facts["first_ms"], facts["last_ms"])
        assert facts["window_s"] == pytest.approx(SUSTAINED_S / 3, rel=0.01)
        assert last > first * 1.1, (backend, json.dumps({k: facts[k] for k in ("first_ms", "last_ms", "load_first_window", "load_last_window")}))
        assert slope.unit == "ms/min" and slope.value is not None and slope.value > 0, backend
        note = facts["note"]
        shares = facts["load_first_window"]["other_share"], facts["load_last_window"]["other_share"]
        assert note.startswith("slowed ") and "the first window to the last; other processes used " in note, note
        assert f"used {shares[0]:.0%} of the CPUs in the first window and {shares[1]:.0%} in the last" in note
        assert "thermal" in record.details and "before" in record.details["thermal"]
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "sustained last ms" in markdown
