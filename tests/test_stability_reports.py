"""Stability grades where users read them: a real run timed while a busy loop the test starts holds every
core is graded unreliable, and the console line, report.md and report.html mark it and say why;
`mlbench compare` then calls a rule on it inconclusive (never a regression). Figures without a grade, or
with a stable one, read as before."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest

from mlbench.cli.main import main
from mlbench.generate.metrics import generative_metrics
from mlbench.metrics import format_ms
from mlbench.records import Metric
from mlbench.report.markdown.run_report import render_markdown
from mlbench.run.progress import PlainProgress, record_line
from mlbench.stability import Stability, grade
from mlbench.timing import time_calls
from tests.compare.test_comparison import rec, run_of
from tests.conftest import ROOT

PIPELINE = f"""\
version: 1
name: busy
models:
  - name: tiny_cnn
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 3, 160, 160]}}]
targets:
  - backend: torch
    device: [cpu]
    precision: [float32]
    threads: 1
latency: {{warmup: 1, repeats: 30, min_time_s: 1.0, retry_s: 0}}
report: {{dir: out, formats: [json, markdown, html]}}
history: {{enabled: false}}
"""


SPIN = """\
import random, time
print("spinning", flush=True)  # started: the test waits for every spinner before it times anything
rng = random.Random()
while True:  # bursts of spinning between short naps: the load comes and goes, as another job's does
    until = time.perf_counter() + rng.uniform(0.002, 0.03)
    while time.perf_counter() < until:
        pass
    time.sleep(rng.uniform(0.0, 0.01))
"""


@contextmanager
def busy_loop():
    """Eight bursty spinning processes per core: calls of several ms are slowed by whatever bursts overlap them,
    and other processes hold most of the machine while the calls are timed."""
    count = min(8 * (os.cpu_count() or 1), 64)
    # each in a session of its own, as other jobs' processes are: Linux's autogroup shares the CPU between
    # sessions first, so spinners in the test's one session held about half the machine against the measuring
    # child (which mlbench starts in its own session), whatever their number
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True,
                                 start_new_session=True) for _ in range(count)]
    try:
        for process in spinners:  # interpreters take a while to start on a loaded machine
            assert process.stdout is not None and process.stdout.readline() == "spinning\n"
        yield
    finally:
        for process in spinners:
            process.kill()
        for process in spinners:
            process.wait()


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory):
    """(report folder, console text) of one run of the tiny CNN timed under the busy loop."""
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    folder = tmp_path_factory.mktemp("busy")
    path = folder / "busy.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    console = io.StringIO()
    with busy_loop():
        run(load_pipeline(path), PlainProgress(console))
    return folder / "out", console.getvalue()


@pytest.mark.torch
@pytest.mark.slow  # one run under sixteen spinners: ~25 s on a 2-core machine
def test_a_figure_timed_under_a_busy_loop_is_unreliable_and_marked_in_every_report(busy_run):
    out, console = busy_run
    (record,) = json.loads((out / "report.json").read_text(encoding="utf-8"))["records"]
    stability = record["latency"]["stability"]
    assert stability["grade"] == "unreliable", json.dumps(stability)
    assert stability["samples"] == len(record["latency"]["samples"]) and stability["reasons"]
    for name in ("latency.median", "latency.best", "latency.p90"):
        assert record["metrics"][name]["stability"] == stability
    why = Stability.model_validate(stability).note()
    note = f"latency.median, latency.best, latency.p90: ⚠ {why}"
    median = record["metrics"]["latency.median"]["value"]

    line = next(line for line in console.splitlines() if line.startswith("[1/1] tiny_cnn/torch/cpu/float32"))
    # the mark follows the median; the measured memory (which carries no grade) may follow it
    assert line.startswith(f"[1/1] tiny_cnn/torch/cpu/float32  ok  median {median:.3f} ms (measured) ⚠")
    assert line.endswith(f"  [{note}]") and line.count("⚠") == 2, line

    markdown = (out / "report.md").read_text(encoding="utf-8")
    row = next(line for line in markdown.splitlines() if line.startswith("| `torch/cpu/float32`"))
    assert f"| {format_ms(median)} ⚠ |" in row and row.endswith(f"| {note} |")
    ship = next(line for line in markdown.splitlines() if line.startswith("| tiny_cnn |"))
    assert f"| {format_ms(median)} ms ⚠ |" in ship  # the table a pull request's comment leads with
    assert "⚠ marks an unreliable figure, ? a noisy one (their note says why" in markdown

    html = (out / "report.html").read_text(encoding="utf-8")
    assert f'<td class="num">{format_ms(median)} ms ⚠</td>' in html  # the headline table (which variant to ship)
    assert f'<td class="num">{format_ms(median)} ⚠</td>' in html and note in html  # the full table, its note
    chart = next(part for part in html.split("<text ") if part.startswith('class="value" x')).split("</text>")[0]
    assert chart.endswith(") ⚠") and f">{format_ms(median)} ms  (" in chart  # the chart's figure
    assert f"(measured); ⚠ {why}</title>" in html  # and its tooltip


@pytest.mark.torch
@pytest.mark.slow  # shares the busy run
def test_compare_calls_a_rule_on_an_unreliable_figure_inconclusive_never_a_regression(busy_run, tmp_path, capsys):
    out, _ = busy_run
    base = out / "report.json"
    data = json.loads(base.read_text(encoding="utf-8"))
    for record in data["records"]:  # 30% slower, with the busy machine's grade it was measured with
        for name, metric in record["metrics"].items():
            if name.startswith("latency.") and metric["value"] is not None:
                metric["value"] *= 1.3
        record["latency"]["samples"] = [s * 1.3 for s in record["latency"]["samples"]]
    data["run_id"] = "slower000001"
    head = tmp_path / "slower.json"
    head.write_text(json.dumps(data), encoding="utf-8")

    assert main(["compare", str(base), str(head), "--fail-on", "latency.median:+10%"]) == 0
    text = capsys.readouterr().out
    assert "**No regression** (1 unchanged; 1 rule inconclusive on unreliable figures)." in text
    assert "### Inconclusive (1)" in text
    lines = [line for line in text.splitlines() if line.startswith("- `tiny_cnn/torch/cpu/float32`: latency.median")]
    assert len(lines) == 1 and "(+30.0%), inconclusive: base's figure is unreliable: " in lines[0]
    assert main(["compare", str(base), str(head), "--fail-on", "latency.median:+10%", "--format", "json"]) == 0
    (variant,) = json.loads(capsys.readouterr().out)["variants"]
    assert variant["group"] == "unchanged" and variant["findings"] == [] and len(variant["inconclusive"]) == 1


# ---------------------------------------------------------------------------------------------
# Built by hand: which grades count, and what stays as it was


TIGHT = [10.0 + 0.01 * i for i in range(21)]
SLOWER = [13.0 + 0.01 * i for i in range(21)]


def graded(record, stability: Stability | None):
    for name in ("latency.median", "latency.best"):
        record.metrics[name] = record.metrics[name].model_copy(update={"stability": stability})
    return record


@pytest.mark.parametrize("which, grade_name, expected", [
    ("head", "unreliable", "inconclusive"),
    ("base", "unreliable", "inconclusive"),
    ("head", "noisy", "regressed"),   # only an unreliable figure is inconclusive
    ("head", None, "regressed"),      # no grade recorded (records written before): judged as before
])
def test_only_a_recorded_unreliable_grade_makes_a_rule_inconclusive(which, grade_name, expected):
    from mlbench.compare.comparison import compare, parse_rules

    stability = (Stability(grade=grade_name, iqr_ratio=0.4, cv=0.9, samples=21, other_share=0.99,
                           reasons=["cv 0.90, IQR/median 0.40", "other processes used 99% of the CPUs"])
                 if grade_name else None)
    base, head = rec("m/torch/cpu", TIGHT), rec("m/torch/cpu", SLOWER)
    graded(head if which == "head" else base, stability)
    result = compare(run_of([base], "b"), run_of([head], "h"), parse_rules(["latency.median:+10%"]))
    (variant,) = result.variants
    if expected == "inconclusive":
        assert not result.regressed and variant.group == "unchanged" and variant.findings == []
        assert variant.inconclusive == [
            f"latency.median:+10%: 10.10 ms → 13.10 ms (+29.7%), inconclusive: {which}'s figure is unreliable: cv "
            "0.90, IQR/median 0.40; other processes used 99% of the CPUs; measure again on a quieter machine, or "
            "both sides interleaved with `mlbench ab`"]
    else:
        assert result.regressed and variant.group == "regressed" and variant.inconclusive == []
        assert "inconclusive" not in result.model_dump(mode="json")["variants"][0]  # JSON as before


def test_ab_calls_a_change_inconclusive_when_the_per_round_ratios_disagree_and_leave_it_open():
    from mlbench.compare.comparison import compare, parse_rules
    from mlbench.compare.paired import paired_change

    base_rounds = [1.0] * 20
    rules = parse_rules(["latency.median:+10%"])
    base, head = run_of([rec("m/torch/cpu", TIGHT)], "b"), run_of([rec("m/torch/cpu", SLOWER)], "h")
    scattered = paired_change(base_rounds, [0.5, 2.0, 0.7, 1.6, 0.6, 1.9, 0.8, 1.5, 0.9, 2.2] * 2)
    assert scattered.stability is not None and scattered.stability.grade == "unreliable"
    result = compare(base, head, rules, paired={"m/torch/cpu": {"latency.median": scattered}})
    (variant,) = result.variants
    assert not result.regressed and variant.findings == [] and len(variant.inconclusive) == 1
    assert variant.inconclusive[0].startswith("latency.median:+10%: 10.10 ms → 13.10 ms (")
    assert f"inconclusive: the per-round ratios are {scattered.stability.note()}; measure again" in variant.inconclusive[0]
    # ratios of 10 to 40 are far apart, yet every round says much slower: the interval settles it, a regression
    clear = paired_change(base_rounds, [10.0, 40.0, 15.0, 30.0, 12.0, 35.0, 20.0, 25.0, 11.0, 38.0] * 2)
    assert clear.stability is not None and clear.stability.grade == "unreliable"
    settled = compare(base, head, rules, paired={"m/torch/cpu": {"latency.median": clear}})
    assert settled.regressed and settled.variants[0].inconclusive == []
    steady = paired_change(base_rounds, [1.3 + 0.001 * i for i in range(20)])
    assert steady.stability is not None and steady.stability.grade == "stable"


def test_a_stable_or_ungraded_figure_is_written_as_before():
    stable = grade([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.0, 1.0])
    plain = rec("m/torch/cpu/float32", TIGHT)
    marked = graded(rec("m/torch/cpu/float32", TIGHT), stable)
    assert record_line(marked, 1, 1) == record_line(plain, 1, 1) == "[1/1] m/torch/cpu/float32  ok  median 10.100 ms (measured)"
    assert render_markdown(run_of([marked], "a")) == render_markdown(run_of([plain], "a"))
    assert "stability" not in plain.model_dump(mode="json")["metrics"]["latency.median"]


def test_time_calls_grades_its_samples_and_a_generation_carries_its_grades():
    latency = time_calls(lambda: None, warmup=1, repeats=20, min_time_s=0, max_repeats=20)
    assert latency.stability is not None and latency.stability.samples == 20
    noisy = grade([1.0, 1.08, 0.95, 1.1, 1.0, 0.9, 1.05, 1.12, 0.97, 1.0])
    metrics = generative_metrics(prefill_ms=[2.0] * 12, decode_ms=[1.0] * 12, prefill_stability=latency.stability,
                                 decode_stability=noisy)
    assert metrics["latency.prefill"].stability == latency.stability
    assert metrics["latency.decode"].stability == metrics["tokens_per_s.decode"].stability == noisy


def test_compare_widens_the_memory_noise_floor_to_the_spreads_both_runs_measured(tmp_path, capsys):
    from mlbench.compare.comparison import compare, parse_rules

    def peak(mb: float, spread_mb: float | None = None) -> Metric:
        return Metric(value=mb * 1e6, unit="bytes", source="measured",
                      spread=spread_mb * 1e6 if spread_mb is not None else None)

    rules = parse_rules(["memory.peak:+10%"])
    base = run_of([rec("m/torch/cpu", memory__peak=peak(30.0, 6.0))], "b")
    alike = run_of([rec("m/torch/cpu", memory__peak=peak(40.0, 6.0))], "h")   # +33%, within the spreads' 12 MB
    larger = run_of([rec("m/torch/cpu", memory__peak=peak(45.0, 6.0))], "h")  # +50%: 15 MB, past it
    (within,) = compare(base, alike, rules).variants
    assert within.group == "unchanged" and within.held_back == [
        "memory.peak:+10%: 30.0 MB → 40.0 MB, within memory.peak's noise floor (max(5%, 4.0 MB, the measured "
        "spread 12.0 MB))"]
    (past,) = compare(base, larger, rules).variants
    assert past.group == "regressed"
    no_spread = run_of([rec("m/torch/cpu", memory__peak=peak(30.0))], "b")  # records without one: the fixed floor
    (fixed,) = compare(no_spread, run_of([rec("m/torch/cpu", memory__peak=peak(40.0))], "h"), rules).variants
    assert fixed.group == "regressed"
    (one_side,) = compare(no_spread, run_of([rec("m/torch/cpu", memory__peak=peak(40.0, 12.0))], "h"), rules).variants
    assert one_side.group == "unchanged" and "the measured spread 12.0 MB" in one_side.held_back[0]
