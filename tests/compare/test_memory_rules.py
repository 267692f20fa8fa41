"""`mlbench compare` on memory: memory.peak is shown by default, a rule on it fails the gate past its
threshold, and a change within the allocator's noise (max(5%, 4 MB)) never counts."""

from __future__ import annotations

from mlbench.cli.main import main
from mlbench.compare.comparison import compare, parse_rules
from mlbench.metrics import compared_by_default, info
from mlbench.records import Metric
from tests.compare.test_comparison import rec, run_of
from tests.compare.test_gate import write

MB = 1_000_000


def peak(value: float) -> Metric:
    return Metric.measured(value, "bytes")


def test_memory_peak_is_in_the_catalog_lower_is_better_and_compared_by_default():
    known = info("memory.peak")
    assert known is not None and (known.unit, known.better, known.column is not None) == ("bytes", "lower", True)
    assert "memory.peak" in compared_by_default()
    assert known.noise_floor == (0.05, 4e6)
    estimated = info("memory.estimated")
    assert estimated is not None and estimated.better == "lower" and not estimated.compared


def test_fail_on_memory_peak_fails_the_gate_when_it_grows_past_the_threshold(tmp_path, capsys):
    base = run_of([rec("m/torch/cpu", memory__peak=peak(100 * MB))], "b")
    head = run_of([rec("m/torch/cpu", memory__peak=peak(125 * MB))], "h")
    args = ["compare", write(tmp_path, "b.json", base), write(tmp_path, "h.json", head),
            "--fail-on", "memory.peak:+10%"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "**Regression**: `m/torch/cpu` (1 regressed)." in out.splitlines()
    assert "100.0 MB → 125.0 MB (+25.0%)" in out


def test_a_change_within_the_allocators_noise_never_counts(tmp_path, capsys):
    # +20%, but only 2 MB: under the 4 MB floor
    base = run_of([rec("m/torch/cpu", memory__peak=peak(10 * MB))], "b")
    head = run_of([rec("m/torch/cpu", memory__peak=peak(12 * MB))], "h")
    (variant,) = compare(base, head, parse_rules(["memory.peak:+10%"])).variants
    assert variant.group == "unchanged" and variant.findings == []
    assert variant.held_back == ["memory.peak:+10%: 10.0 MB → 12.0 MB, within memory.peak's noise floor "
                                 "(max(5%, 4.0 MB))"]
    args = ["compare", write(tmp_path, "b.json", base), write(tmp_path, "h.json", head),
            "--fail-on", "memory.peak:+10%"]
    assert main(args) == 0
    # 3% of 1 GB is 30 MB, past 4 MB, but under 5%: noise; 8% is past both
    base = run_of([rec("m/torch/cpu", memory__peak=peak(1000 * MB))], "b")
    small = run_of([rec("m/torch/cpu", memory__peak=peak(1030 * MB))], "h")
    large = run_of([rec("m/torch/cpu", memory__peak=peak(1080 * MB))], "h")
    assert compare(base, small, parse_rules(["memory.peak:+1%"])).variants[0].group == "unchanged"
    assert compare(base, large, parse_rules(["memory.peak:+1%"])).variants[0].group == "regressed"
