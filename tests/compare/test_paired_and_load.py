"""Paired statistics over interleaved rounds, and the machine's load beside a run (no torch needed)."""

from __future__ import annotations

import math
import random

import pytest

from mlbench.compare.comparison import Interleaved, compare, parse_rules
from mlbench.compare.paired import hodges_lehmann, min_rounds_for, paired_change, round_ratios, settled
from mlbench.machine_load import LoadSample, describe, load_between, load_warning, sample
from mlbench.records import Latency, Metric
from mlbench.report.markdown.compare import render_comparison_markdown
from tests.report.test_report import record
from tests.report.test_report import report as make_report


def drifting_rounds(slowdown: float, seed: int, rounds: int = 20) -> tuple[list[float], list[float]]:
    """Per-round medians of two sides on a machine whose speed drifts 5× over the run, both sides
    hit alike within a round, with 2% noise per block."""
    rng = random.Random(seed)
    base, head = [], []
    for r in range(rounds):
        machine = 1.0 + 4.0 * math.sin(r / 3) ** 2
        base.append(10.0 * machine * rng.gauss(1, 0.02))
        head.append(10.0 * slowdown * machine * rng.gauss(1, 0.02))
    return base, head


def test_a_paired_change_sees_through_drift():
    base, head = drifting_rounds(1.05, seed=3)
    change = paired_change(base, head, alpha=0.01)
    assert change.ratio == pytest.approx(1.05, abs=0.015)
    assert change.noise.significant and change.noise.p_value < 1e-4
    assert change.noise.test == "Wilcoxon signed-rank (paired over 20 interleaved rounds)"
    low, high = change.noise.interval
    assert 1.0 < low < 1.05 < high < 1.1


def test_no_change_is_within_noise():
    base, head = drifting_rounds(1.0, seed=4)
    change = paired_change(base, head)
    assert not change.noise.significant and change.noise.p_value > 0.01
    assert change.noise.interval[0] < 1.0 < change.noise.interval[1]
    same = paired_change(base, base)
    assert (same.ratio, same.noise.p_value, same.noise.significant) == (1.0, 1.0, False)


def test_wilcoxon_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    base, head = drifting_rounds(1.02, seed=5, rounds=12)
    logs = [math.log(r) for r in round_ratios(base, head)]
    assert paired_change(base, head).noise.p_value == pytest.approx(scipy_stats.wilcoxon(logs).pvalue)


def test_too_few_rounds_say_so():
    change = paired_change([1.0, 1.1], [1.2, 1.3])
    assert change.noise.p_value is None
    assert change.noise.reason == "too few rounds (2; the paired test needs 5)"
    assert min_rounds_for(0.01) == 8 and min_rounds_for(0.05) == 6
    with pytest.raises(ValueError, match="paired rounds differ in number: 2 base, 1 head"):
        round_ratios([1.0, 1.0], [1.0])


def test_hodges_lehmann_is_the_median_of_walsh_averages_with_the_textbook_interval():
    # Hollander & Wolfe's signed-rank critical values: n = 10, two-sided α = 0.05 → the interval runs from
    # the 9th smallest to the 9th largest of the 55 Walsh averages; n = 20 → the 53rd of 210.
    rng = random.Random(7)
    for n, position in ((10, 8), (20, 52)):
        ratios = [math.exp(rng.gauss(0.05, 0.1)) for _ in range(n)]
        logs = [math.log(r) for r in ratios]
        walsh = sorted((logs[i] + logs[j]) / 2 for i in range(n) for j in range(i, n))
        estimate, (low, high) = hodges_lehmann(ratios, alpha=0.05)
        assert math.log(estimate) == pytest.approx((walsh[len(walsh) // 2 - 1] + walsh[len(walsh) // 2]) / 2
                                                   if len(walsh) % 2 == 0 else walsh[len(walsh) // 2])
        assert (math.log(low), math.log(high)) == pytest.approx((walsh[position], walsh[-1 - position]))


def test_the_normal_interval_beyond_the_exact_range_agrees_with_the_exact_one(monkeypatch):
    import mlbench.compare.paired as paired

    ratios = [math.exp(random.Random(8).gauss(0.0, 0.1)) for _ in range(60)]
    exact = hodges_lehmann(ratios, alpha=0.01)[1]
    monkeypatch.setattr(paired, "EXACT_UP_TO", 0)
    assert hodges_lehmann(ratios, alpha=0.01)[1] == pytest.approx(exact, rel=2e-3)


def test_a_verdict_is_settled_when_the_interval_clears_or_stays_within_the_threshold():
    base, head = drifting_rounds(1.10, seed=3, rounds=30)
    assert settled(paired_change(base, head), 2.0)  # wholly above +2%
    assert settled(paired_change(head, base), 2.0)  # wholly below -2%
    same_base, same_head = drifting_rounds(1.0, seed=4, rounds=60)
    same = paired_change(same_base, same_head)
    assert same.noise.interval[0] > 0.98 and same.noise.interval[1] < 1.02
    assert settled(same, 2.0)  # wholly within ±2%: more rounds cannot make it cross
    assert not settled(same, 0.1)  # the interval straddles ±0.1%
    assert not settled(paired_change(base[:3], head[:3]), 2.0)  # too few rounds to say anything


def _sample(wall: float, busy: float, steal: float, own: float, load: float) -> LoadSample:
    return LoadSample(wall=wall, load_average=(load, load, load), busy_s=busy, steal_s=steal, own_s=own)


def test_load_between_counts_other_processes_and_steal(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    start = _sample(100.0, busy=1000.0, steal=50.0, own=10.0, load=0.5)
    end = _sample(110.0, busy=1012.0, steal=52.0, own=18.0, load=1.5)  # 10 s × 2 cores = 20 CPU-s
    load = load_between(start, end, "measurement")
    assert load == {"window": "measurement", "seconds": 10.0, "cores": 2, "load_average_start": [0.5] * 3,
                    "load_average_end": [1.5] * 3, "source": "measured", "other_share": 0.2, "steal_share": 0.1}
    assert describe(load) == "other processes used 20% of the CPU, 10% stolen, load 0.50 per core"


def test_load_off_linux_is_absent_with_a_reason():
    start = LoadSample(wall=0.0, load_average=None, busy_s=None, steal_s=None, own_s=0.0)
    load = load_between(start, start, "measurement")
    assert load["other_share"] is None and load["reason"] == "this OS does not report CPU time per machine (/proc/stat)"
    assert describe(load) == "load not recorded"


def test_a_real_sample_reads_this_machine():
    s = sample()
    assert s.own_s > 0 and (s.busy_s is None or s.busy_s > 0)


def test_compare_warns_when_the_runs_measured_under_very_different_load():
    quiet = {"cores": 2, "other_share": 0.05, "steal_share": 0.0, "load_average_start": [0.2] * 3,
             "load_average_end": [0.2] * 3}
    busy = {**quiet, "other_share": 0.6, "load_average_start": [3.0] * 3, "load_average_end": [3.0] * 3}
    assert load_warning(quiet, dict(quiet, other_share=0.1)) is None
    assert load_warning(quiet, None) is None
    base = make_report([record("m/torch/cpu/float32")])
    head = base.model_copy(update={"machine": {**base.machine, "load": busy}})
    base = base.model_copy(update={"machine": {**base.machine, "load": quiet}})
    warnings = compare(base, head).warnings
    assert warnings == [
        "the runs measured under very different load (base: other processes used 5% of the CPU, load 0.10 per "
        "core; head: other processes used 60% of the CPU, load 1.50 per core): latency differences may be the "
        "machine's; `mlbench ab` measures both sides interleaved"]


def _timed(variant: str, median: float) -> object:
    rec = record(variant, median=median)
    samples = [median] * 5
    latency = Latency(samples=samples, warmup=1, median=median, best=median, p90=median, mean=median, stdev=0.0,
                      cv=0.0, threads=None, total_s=0.1, stopped_by="repeats")
    return rec.model_copy(update={"latency": latency, "metrics": {**rec.metrics,
                                                                  "latency.median": Metric.measured(median, "ms")}})


def test_paired_changes_decide_and_the_output_says_interleaved():
    base = make_report([_timed("m/torch/cpu/float32", 10.0)])
    head = make_report([_timed("m/torch/cpu/float32", 10.0)])  # pooled figures equal ...
    b, h = drifting_rounds(1.05, seed=3)
    paired = {"m/torch/cpu/float32": {"latency.median": paired_change(b, h)}}  # ... the rounds say +5%
    info = Interleaved(rounds=20, calls=10, warmup=2, order="A B, B A, ...", skipped={"x/coreml": "not macOS"})
    result = compare(base, head, parse_rules(["latency.median:+1%"]), paired=paired, interleaved=info)
    assert result.regressed and result.variants[0].findings[0].rule == "latency.median:+1%"
    assert result.noise_test.startswith("Wilcoxon signed-rank (two-sided) on the log ratios head/base of up to 20 "
                                        "interleaved rounds, α=0.01, with the Hodges–Lehmann estimate of the ratio "
                                        "and its 99% signed-rank interval")
    text = render_comparison_markdown(result)
    assert text.startswith("## mlbench ab: p\n\n**Regression**: `m/torch/cpu/float32`")
    assert "Measured interleaved on one machine: 20 rounds; each side 10 timed calls per round after 2 untimed" in text
    assert "### Not timed (1)\n\n- `x/coreml`: not macOS" in text
    assert compare(base, head, parse_rules(["latency.median:+10%"]), paired=paired, interleaved=info).regressed is False
