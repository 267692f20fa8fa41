"""The pieces of `mlbench compare`, each at its edges: when a change crosses a rule (at the threshold is
not past it), how a change is written, rules described in words, machines told apart, and the noise
test against scipy where the two choose the same method."""

from __future__ import annotations

import random

import pytest

from mlbench.compare.comparison import (
    RuleError,
    _interval_clears,
    compare,
    default_rules,
    describe_change,
    parse_rule,
    parse_rules,
)
from mlbench.compare.noise import NoiseTest, mann_whitney_u, ratio_interval
from mlbench.machine import machine_key, machine_words
from mlbench.metrics import known_names
from mlbench.records import Metric
from tests.compare.test_comparison import rec, run_of


def estimated(metric: str, value: float | None, unit: str) -> dict:
    return {metric.replace(".", "__"): Metric(value=value, unit=unit, source="estimated" if value is not None else None,
                                              reason=None if value is not None else "not analysed")}


@pytest.mark.parametrize("rule, unit, base, head, expected", [
    ("placement.switches:+2", "count", 1, 3, None),             # exactly at the threshold: not past it
    ("placement.switches:+2", "count", 1, 3.5, "regression"),
    ("placement.switches:+2", "count", 3, 1, None),
    ("placement.switches:+2", "count", 3.5, 1, "improvement"),
    ("placement.switches:-2", "count", 3.5, 1, "regression"),   # a fall is what this rule guards against
    ("placement.switches:-2", "count", 1, 3.5, "improvement"),
    ("load_time:+10%", "ms", 10.0, 11.0, None),                 # +10% in floating point is 10.000000000000009
    ("load_time:+10%", "ms", 10.0, 10.995, None),
    ("load_time:+10%", "ms", 10.0, 11.01, "regression"),
    ("load_time:+10%", "ms", 10.0, 8.9, "improvement"),
    ("load_time:+10%", "ms", 10.0, 9.0, None),
    ("load_time:-10%", "ms", 10.0, 8.9, "regression"),
    ("load_time:+10%", "ms", 0.0, 5.0, None),                   # no ratio from zero
    ("load_time:+10%", "ms", None, 5.0, None),                  # a change needs both sides
    ("load_time:+10%", "ms", 5.0, None, None),
    ("placement.neural_engine:-5pp", "ratio", 0.90, 0.85, None),
    ("placement.neural_engine:-5pp", "ratio", 0.90, 0.849, "regression"),
    ("placement.neural_engine:-5pp", "ratio", 0.849, 0.90, "improvement"),
    ("placement.neural_engine:+5pp", "ratio", 0.90, 0.96, "regression"),
    ("verify.max_rel:>1e-2", "rel", None, 0.5, "regression"),
    ("verify.max_rel:>1e-2", "rel", 0.5, None, None),           # nothing in HEAD to judge
    ("placement.cpu:<0.5", "ratio", 0.9, 0.4, "regression"),
    ("placement.cpu:<0.5", "ratio", 0.4, 0.6, "improvement"),
    ("placement.cpu:<0.5", "ratio", None, 0.6, None),
])
def test_when_a_change_crosses_a_rule(rule, unit, base, head, expected):
    metric = parse_rule(rule).metric
    result = compare(run_of([rec("m/torch/cpu", **estimated(metric, base, unit))], "b"),
                     run_of([rec("m/torch/cpu", **estimated(metric, head, unit))], "h"), parse_rules([rule]))
    (variant,) = result.variants
    assert [f.kind for f in variant.findings] == ([expected] if expected else [])
    assert variant.group == {"regression": "regressed", "improvement": "improved", None: "unchanged"}[expected]


def test_a_change_is_written_in_the_metrics_unit():
    def change(metric: str, unit: str, base: float | None, head: float | None) -> str:
        (variant,) = compare(run_of([rec("m/torch/cpu", **estimated(metric, base, unit))], "b"),
                             run_of([rec("m/torch/cpu", **estimated(metric, head, unit))], "h"), []).variants
        return describe_change(next(d for d in variant.deltas if d.metric == metric))

    assert change("load_time", "ms", 10.0, 12.5) == "+25.0%"
    assert change("load_time", "s", 10.0, 7.5) == "-25.0%"
    assert change("size.package", "bytes", 1000.0, 1500.0) == "+50.0%"
    assert change("placement.neural_engine", "ratio", 0.5, 0.25) == "-25.0 pp"
    assert change("placement.switches", "count", 2.0, 3.0) == "×1.5"
    assert change("placement.switches", "count", 0.0, 3.0) == "+3"  # no ratio from zero: the change itself
    assert change("placement.switches", "count", None, 3.0) == "not comparable"
    assert change("placement.switches", "count", 3.0, None) == "not comparable"


@pytest.mark.parametrize("text, words", [
    ("latency.median:+10%", "latency.median rises by more than 10%"),
    ("load_time:-2.5%", "load_time falls by more than 2.5%"),
    ("placement.neural_engine:-5pp", "placement.neural_engine falls by more than 5 percentage points"),
    ("placement.switches:+2", "placement.switches rises by more than 2"),
    ("placement.switches:-3", "placement.switches falls by more than 3"),
    ("verify.max_rel:>1e-2", "verify.max_rel is above 0.01"),
    ("placement.cpu:<0.5", "placement.cpu is below 0.5"),
    ("status:failed", "a variant becomes failed"),
])
def test_rules_describe_themselves_in_words(text, words):
    rule = parse_rule(text)
    assert rule.describe() == words and rule.text == text.strip()
    assert rule.metric == ("status" if text.startswith("status") else text.split(":")[0])


def test_rules_split_at_the_first_colon_and_need_all_their_parts():
    rule = parse_rule("status:failed")
    assert (rule.metric, rule.kind, rule.status) == ("status", "status", "failed")
    for text, message in (
            ("latency.median:+10%:", "rule 'latency.median:+10%:': threshold '+10%:' is not +N%, -N%, +Npp, -Npp, +N, "
                                     "-N, >N or <N"),
            ("status::failed", "rule 'status::failed': status can be failed, skipped, gone, not ':failed'; did you "
                               "mean 'failed'?"),
            ("placement.gpu:-100.5pp", "rule 'placement.gpu:-100.5pp': a fraction cannot move by more than 100 "
                                       "percentage points")):
        with pytest.raises(RuleError) as info:
            parse_rule(text)
        assert str(info.value) == message
    assert parse_rule("placement.gpu:-100pp").threshold == 100.0  # a whole fraction is the most it can move
    with pytest.raises(RuleError) as info:
        parse_rule("status")
    assert str(info.value).startswith("rule 'status' is not METRIC:THRESHOLD")
    with pytest.raises(RuleError) as info:
        parse_rule("statsu:+1")
    assert str(info.value) == (f"rule 'statsu:+1': unknown metric 'statsu'; did you mean 'status'? (known: "
                               f"{', '.join(known_names())})")


def test_the_default_gate_is_latency_then_the_backends_rules_then_status():
    assert default_rules() == ["latency.median:+10%", "placement.neural_engine:-5pp", "status:failed"]


def test_machines_are_alike_by_os_architecture_cpu_and_core_count_not_by_name():
    mac = {"os": "macOS 15.1", "arch": "arm64", "cpu": "Apple M3", "cpu_count": 8, "hostname": "runner-1"}
    assert machine_words(mac) == "macOS 15.1 arm64 Apple M3"
    assert machine_words({"arch": "x86_64"}) == "x86_64" and machine_words({}) == "unknown machine"
    assert machine_key(mac) == machine_key({**mac, "hostname": "runner-2"}) == ("macOS 15.1", "arm64", "Apple M3", 8)
    for field, other in (("os", "macOS 14"), ("arch", "x86_64"), ("cpu", "Apple M2"), ("cpu_count", 10)):
        assert machine_key({**mac, field: other}) != machine_key(mac), field


def test_runs_of_other_pipelines_are_warned_about_and_so_are_changed_files():
    base = run_of([rec("a/torch/cpu")], "b")
    other = run_of([rec("a/torch/cpu")], "h")
    other.pipeline.name = "q"
    assert compare(base, other).warnings == ["the runs are of different pipelines (p vs q)"]
    same = run_of([rec("a/torch/cpu")], "h")
    assert compare(base, same).warnings == []
    unfinished = run_of([rec("a/torch/cpu")], "b")
    unfinished.finished = None
    assert compare(unfinished, same).warnings == ["a run was interrupted: its report is partial"]


@pytest.mark.parametrize("interval, clears", [
    ((1.5, 2.0), False),     # the interval's end exactly at +50%: not past the threshold
    ((1.5001, 2.0), True),
    ((1.4, 2.0), False),
    ((2.0, 1.6), True),      # either order
])
def test_a_slowdown_counts_when_its_whole_interval_lies_past_the_threshold(interval, clears):
    assert _interval_clears(parse_rule("latency.median:+50%"), 1, interval) is clears


def test_a_speedup_counts_when_its_whole_interval_lies_past_the_threshold():
    rule = parse_rule("latency.median:+10%")
    assert _interval_clears(rule, -1, (0.5, 0.8)) and not _interval_clears(rule, -1, (0.5, 0.95))
    assert not _interval_clears(rule, -1, (0.5, 0.9))  # -10% exactly
    assert not _interval_clears(rule, 1, (1.0995, 1.2))


# ---------------------------------------------------------------------------------------------
# The noise test


@pytest.mark.parametrize("n_base, n_head, ties", [
    (5, 5, False), (7, 6, False), (8, 30, False), (30, 8, False),  # exact: one side at most 8, no ties
    (6, 5, True),                                                   # a tie: the normal approximation
    (9, 9, False), (30, 25, False), (20, 20, True),
])
def test_mann_whitney_agrees_with_scipy_where_both_choose_the_same_method(n_base, n_head, ties):
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(n_base * 100 + n_head)
    base = [rng.gauss(1.0, 0.2) for _ in range(n_base)]
    head = [rng.gauss(1.1, 0.2) for _ in range(n_head)]
    if ties:
        head[0] = base[0]
    ours = mann_whitney_u(base, head)
    theirs = scipy_stats.mannwhitneyu(head, base, alternative="two-sided", method="auto")
    assert (ours.u, ours.p_value) == (pytest.approx(theirs.statistic), pytest.approx(theirs.pvalue, rel=1e-9))
    exact = min(n_base, n_head) <= 8 and not ties
    assert ours.test == f"Mann–Whitney U (two-sided, {'exact' if exact else 'normal approximation'})"
    assert (ours.n_base, ours.n_head, ours.alpha) == (n_base, n_head, 0.01)


def test_mann_whitney_counts_exactly_while_one_side_has_at_most_8_samples():
    for sizes, method in (((8, 40), "exact"), ((40, 8), "exact"), ((9, 40), "normal approximation")):
        result = mann_whitney_u([float(i) for i in range(sizes[0])], [i + 0.5 for i in range(sizes[1])])
        assert result.test == f"Mann–Whitney U (two-sided, {method})"


def test_the_exact_p_value_of_the_middle_of_the_distribution_is_one():
    result = mann_whitney_u([1.0, 4.0, 5.0, 8.0, 9.0, 12.0], [2.0, 3.0, 7.0, 10.0, 11.0])
    assert (result.u, result.p_value, result.significant) == (15.0, 1.0, False)
    assert result.test == "Mann–Whitney U (two-sided, exact)"


def test_identical_samples_give_p_one_and_a_change_at_alpha_is_not_significant():
    same = mann_whitney_u([1.0] * 10, [1.0] * 10)
    assert (same.u, same.p_value, same.significant) == (50.0, 1.0, False)
    apart = mann_whitney_u([1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0], alpha=2 / 252)
    assert apart.p_value == pytest.approx(2 / 252) and not apart.significant  # p < alpha, not p <= alpha
    assert mann_whitney_u([1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0], alpha=0.01).significant


def test_too_few_samples_on_either_side_skip_the_test():
    for base, head in (([1.0] * 4, [2.0] * 5), ([1.0] * 5, [2.0] * 4)):
        result = mann_whitney_u(base, head)
        assert (result.p_value, result.u, result.significant) == (None, None, False)
        assert result.reason == (f"too few raw samples ({len(base)} and {len(head)}; the test needs 5 on each side)")
        assert result.describe() == f"no noise test: {result.reason}"
    assert mann_whitney_u([1.0] * 5, [2.0] * 5).p_value is not None
    assert ratio_interval([1.0] * 4, [2.0] * 5) is None and ratio_interval([1.0] * 5, [2.0] * 4) is None


def test_the_noise_verdict_in_words():
    base = NoiseTest(test="Mann–Whitney U (two-sided, exact)", n_base=6, n_head=7, u=3.0, p_value=0.0123,
                     alpha=0.05, significant=True)
    assert base.describe() == "Mann–Whitney U (two-sided, exact): p=0.012 (beyond noise, α=0.05, n=6/7)"
    held = base.model_copy(update={"significant": False, "interval": (0.95, 1.234)})
    assert held.describe() == ("Mann–Whitney U (two-sided, exact): p=0.012 (within noise, α=0.05, n=6/7); 95% interval "
                               "of the change -5.0% to +23.4%")


def test_the_bootstrap_interval_is_seeded_and_follows_the_statistic():
    base = [10.0 + (i % 7) for i in range(30)]
    head = [x * 1.5 for x in base]
    low, high = ratio_interval(base, head, "median")
    assert (low, high) == ratio_interval(base, head, "median")  # the same reports, the same verdict
    assert 1.2 < low <= 1.5 <= high < 1.8
    p90 = ratio_interval(base, head, "p90")
    assert p90 != (low, high) and p90[0] <= 1.5 <= p90[1]
    wide = ratio_interval(base, head, "median", alpha=0.5)
    assert low <= wide[0] <= wide[1] <= high  # a 50% interval lies inside the 99% one
    assert wide != (low, high)


def test_a_p90_rule_is_guarded_by_the_interval_of_the_p90_and_compare_passes_its_alpha():
    base_samples = [10.0 + 0.01 * i for i in range(21)]
    head_samples = [x * 1.3 for x in base_samples]

    def with_p90(samples):
        record = rec("m/torch/cpu", samples)
        record.metrics["latency.p90"] = Metric.measured(sorted(samples)[18], "ms")
        return record

    result = compare(run_of([with_p90(base_samples)], "b"), run_of([with_p90(head_samples)], "h"),
                     parse_rules(["latency.p90:+10%"]), alpha=0.05)
    (variant,) = result.variants
    (finding,) = variant.findings
    assert (finding.rule, finding.message) == ("latency.p90:+10%", "10.18 ms → 13.23 ms (+30.0%)")
    assert finding.noise == ("Mann–Whitney U (two-sided, normal approximation): p=3.1e-08 (beyond noise, α=0.05, "
                             "n=21/21); 95% interval of the change +29.5% to +30.5%")
    assert result.alpha == 0.05 and result.base.label == "base" and result.head.label == "head"


def test_intervals_of_sub_millisecond_and_zero_timings():
    fast = [0.05 + 0.001 * i for i in range(20)]  # a tiny model: every sample well under 1 ms
    low, high = ratio_interval(fast, [x * 2 for x in fast])
    assert 1.5 < low <= 2.0 <= high < 2.5
    with_zeros = [0.0] * 8 + [1.0] * 12  # a timer that rounds to zero: some resampled medians are 0
    low, high = ratio_interval(with_zeros, [1.0] * 20)
    assert (low, high) == (1.0, 2.0)  # resamples whose base median is 0 give no ratio and are left out
    assert ratio_interval([1.0] * 5, [2.0] * 5) == (2.0, 2.0)  # five samples are enough
    assert ratio_interval([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0]) == ratio_interval(
        [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0], "median")  # the median is the default


def test_the_p90_is_the_90th_percentile_of_each_resample():
    """Nine samples of 1 ms and one of 11 ms: a resample holding the 11 once has a p90 of exactly 2 ms (numpy's
    linear interpolation at 8.1 of 9), and such resamples fill the middle of the distribution."""
    assert ratio_interval([1.0] * 9 + [11.0], [1.0] * 10, "p90", alpha=0.9) == pytest.approx((0.5, 0.5), abs=1e-12)


def test_an_interleaved_comparison_says_how_it_judged_and_keeps_its_rounds():
    from mlbench.compare.comparison import Interleaved
    from mlbench.compare.paired import paired_change
    from tests.compare.test_paired_and_load import _timed, drifting_rounds
    from tests.report.test_report import report as make_report

    base = make_report([_timed("m/torch/cpu/float32", 10.0)])
    head = make_report([_timed("m/torch/cpu/float32", 10.0)])  # the pooled medians are equal
    b, h = drifting_rounds(1.05, seed=3)
    info = Interleaved(rounds=20, calls=10, warmup=2, order="A B, B A, ...")
    result = compare(base, head, parse_rules(["latency.median:+1%"]), alpha=0.05, interleaved=info,
                     paired={"m/torch/cpu/float32": {"latency.median": paired_change(b, h)}})
    assert result.noise_test == (
        "Wilcoxon signed-rank (two-sided) on the log ratios head/base of up to 20 interleaved rounds, α=0.05, with the "
        "Hodges–Lehmann estimate of the ratio and its 95% signed-rank interval: a latency rule counts a change only when the "
        "threshold is crossed, the test finds the two sides differ, and the whole interval lies past the threshold")
    assert result.interleaved == info
    (finding,) = result.variants[0].findings
    assert finding.message == "10.00 ms → 10.00 ms (+4.8%)"  # the paired ratio, not the pooled medians'
