"""The compare gate's decisions, each pinned where a wrong one would go unnoticed: the noise test on its
own, status changes both ways, limits on variants new in HEAD, and the exit code `mlbench compare` gives.

Every case here kills a mutant that the rest of the suite let through (benchmarks/mutation.py).
"""

from __future__ import annotations

import pytest

from mlbench.cli.main import main
from mlbench.compare.comparison import Finding, compare, parse_rule, parse_rules
from mlbench.records import Metric, RunReport
from tests.compare.test_comparison import rec, run_of

NOISY = [10.0, *[float(x) for x in range(20, 40)]]      # best 10 ms, the rest spread over 20..39 ms
NOISY_BEST_UP = [12.0, *[float(x) for x in range(20, 40)]]  # best +20%, every other sample the same


def write(tmp_path, name: str, report: RunReport) -> str:
    path = tmp_path / name
    path.write_text(report.model_dump_json(), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------
# The Mann–Whitney step on its own (latency.best has no bootstrap interval: the test is its only guard)


def test_mann_whitney_alone_holds_back_a_best_latency_jump_the_samples_do_not_support(tmp_path, capsys):
    base = run_of([rec("m/torch/cpu", NOISY)], "b")
    head = run_of([rec("m/torch/cpu", NOISY_BEST_UP)], "h")
    (variant,) = compare(base, head, parse_rules(["latency.best:+10%"])).variants
    assert variant.group == "unchanged" and variant.findings == []
    assert variant.held_back == [
        "latency.best:+10%: 10.00 ms → 12.00 ms (+20.0%), but Mann–Whitney U (two-sided, normal approximation): "
        "p=1 (within noise, α=0.01, n=21/21)"]

    args = ["compare", write(tmp_path, "b.json", base), write(tmp_path, "h.json", head), "--fail-on", "latency.best:+10%"]
    assert main(args) == 0
    assert "**No regression** (1 unchanged)." in capsys.readouterr().out.splitlines()


def test_a_best_latency_jump_beyond_noise_regresses_and_fails_the_gate(tmp_path, capsys):
    tight = [10.0 + 0.01 * i for i in range(21)]
    slower = [12.0 + 0.01 * i for i in range(21)]
    base, head = run_of([rec("m/torch/cpu", tight)], "b"), run_of([rec("m/torch/cpu", slower)], "h")
    (variant,) = compare(base, head, parse_rules(["latency.best:+10%"])).variants
    assert variant.group == "regressed" and variant.held_back == []
    (finding,) = variant.findings
    assert (finding.rule, finding.kind, finding.message) == ("latency.best:+10%", "regression",
                                                            "10.00 ms → 12.00 ms (+20.0%)")
    assert finding.noise == "Mann–Whitney U (two-sided, normal approximation): p=3.1e-08 (beyond noise, α=0.01, n=21/21)"
    args = ["compare", write(tmp_path, "b.json", base), write(tmp_path, "h.json", head), "--fail-on", "latency.best:+10%"]
    assert main(args) == 1
    assert "**Regression**: `m/torch/cpu` (1 regressed)." in capsys.readouterr().out.splitlines()


# ---------------------------------------------------------------------------------------------
# Status rules, both ways


def test_a_failed_variant_that_runs_again_is_an_improvement():
    base = run_of([rec("a/torch/cpu", status="failed"), rec("b/torch/cpu", status="failed"),
                   rec("c/torch/cpu", status="skipped"), rec("d/torch/cpu", status="failed")], "b")
    head = run_of([rec("a/torch/cpu"), rec("b/torch/cpu", status="skipped"), rec("c/torch/cpu")], "h")
    result = compare(base, head, parse_rules(["status:failed"]))
    by_id = {v.variant_id: v for v in result.variants}
    assert by_id["a/torch/cpu"].group == "improved"
    assert by_id["a/torch/cpu"].findings == [Finding(rule="status:failed", metric="status", kind="improvement",
                                                     message="failed → ok")]
    assert by_id["b/torch/cpu"].findings == [Finding(rule="status:failed", metric="status", kind="improvement",
                                                     message="failed → skipped")]
    assert by_id["c/torch/cpu"].group == "unchanged" and by_id["c/torch/cpu"].findings == []  # not the rule's status
    assert by_id["d/torch/cpu"].group == "gone" and by_id["d/torch/cpu"].findings == []  # gone is not better
    assert not result.regressed and result.counts == {"regressed": 0, "improved": 2, "unchanged": 1, "new": 0,
                                                      "gone": 1}


def test_status_regressions_name_where_the_variant_came_from():
    base = run_of([rec("a/torch/cpu"), rec("b/torch/cpu", status="skipped")], "b")
    head = run_of([rec("a/torch/cpu", status="skipped"), rec("b/torch/cpu", status="skipped"),
                   rec("n/torch/cpu", status="failed")], "h")
    result = compare(base, head, parse_rules(["status:failed", "status:skipped", "status:gone"]))
    findings = {v.variant_id: [(f.rule, f.kind, f.message) for f in v.findings] for v in result.variants}
    assert findings == {
        "a/torch/cpu": [("status:skipped", "regression", "ok → skipped")],
        "b/torch/cpu": [],  # skipped before and after: not a change
        "n/torch/cpu": [("status:failed", "regression", "new → failed: measure: boom")],
    }
    gone = compare(head, base, parse_rules(["status:gone"]))
    assert {v.variant_id: [f.message for f in v.findings] for v in gone.variants} == {
        "a/torch/cpu": [], "b/torch/cpu": [], "n/torch/cpu": ["failed → gone"]}
    assert [v.group for v in gone.variants] == ["unchanged", "unchanged", "regressed"]


# ---------------------------------------------------------------------------------------------
# Limits apply to a variant that is new in HEAD


def test_a_limit_applies_to_a_variant_new_in_head(tmp_path, capsys):
    max_rel = lambda v: Metric.measured(v, "rel")  # noqa: E731
    base = run_of([rec("a/torch/cpu", verify__max_rel=max_rel(1e-3))], "b")
    head = run_of([rec("a/torch/cpu", verify__max_rel=max_rel(1e-3)), rec("new/torch/cpu", verify__max_rel=max_rel(0.5)),
                   rec("fine/torch/cpu", verify__max_rel=max_rel(1e-3))], "h")
    result = compare(base, head, parse_rules(["verify.max_rel:>1e-2"]))
    by_id = {v.variant_id: v for v in result.variants}
    assert by_id["new/torch/cpu"].group == "regressed"
    assert [(f.rule, f.kind, f.message) for f in by_id["new/torch/cpu"].findings] == [
        ("verify.max_rel:>1e-2", "regression", "– → 0.5 (not comparable); base: not reported")]
    assert by_id["fine/torch/cpu"].group == "new" and by_id["fine/torch/cpu"].findings == []
    assert result.regressed and result.counts["regressed"] == 1

    b, h = write(tmp_path, "b.json", base), write(tmp_path, "h.json", head)
    assert main(["compare", b, h, "--fail-on", "verify.max_rel:>1e-2"]) == 1
    assert "**Regression**: `new/torch/cpu` (1 regressed, 1 unchanged, 1 new)." in capsys.readouterr().out.splitlines()
    assert main(["compare", b, h, "--fail-on", "verify.max_rel:>0.6"]) == 0


def test_a_lower_limit_applies_to_a_new_variant_and_only_to_figures_it_has():
    ne = lambda v: Metric.estimated(v, "ratio")  # noqa: E731
    base = run_of([rec("a/coreml/all")], "b")
    head = run_of([rec("low/coreml/all", placement__neural_engine=ne(0.2)),
                   rec("none/coreml/all", placement__neural_engine=Metric.absent("ratio", "not analysed")),
                   rec("other/coreml/all")], "h")
    result = compare(base, head, parse_rules(["placement.neural_engine:<0.5", "latency.median:+10%"]))
    by_id = {v.variant_id: v for v in result.variants}
    assert [(f.rule, f.message) for f in by_id["low/coreml/all"].findings] == [
        ("placement.neural_engine:<0.5", "– → ≈20.0% (not comparable); base: not reported")]
    assert by_id["none/coreml/all"].group == "new" and by_id["none/coreml/all"].findings == []
    assert by_id["other/coreml/all"].group == "new"


@pytest.mark.parametrize("rule, base_value, head_value, expected", [
    ("verify.max_rel:>1e-2", 0.5, 1e-3, "improvement"),   # was above the limit, is not now
    ("verify.max_rel:>1e-2", 1e-3, 0.5, "regression"),
    ("verify.max_rel:>1e-2", 0.5, 0.6, "regression"),     # above before and after: still breaks it
    ("verify.max_rel:>1e-2", 1e-2, 1e-2, None),           # at the limit is not above it
    ("placement.neural_engine:<0.5", 0.2, 0.9, "improvement"),
    ("placement.neural_engine:<0.5", 0.9, 0.2, "regression"),
    ("placement.neural_engine:<0.5", 0.5, 0.5, None),
])
def test_limits_judge_heads_value_and_credit_leaving_the_bad_side(rule, base_value, head_value, expected):
    unit = "ratio" if "placement" in rule else "rel"
    metric = parse_rule(rule).metric.replace(".", "__")
    base = run_of([rec("a/torch/cpu", **{metric: Metric.measured(base_value, unit)})], "b")
    head = run_of([rec("a/torch/cpu", **{metric: Metric.measured(head_value, unit)})], "h")
    (variant,) = compare(base, head, parse_rules([rule])).variants
    assert [f.kind for f in variant.findings] == ([expected] if expected else [])
