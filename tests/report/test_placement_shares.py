"""The placement shares reports and compare use are shares of the cost (`placement.<device>`); the shares of
the compute operations stay beside them (`placement.count.<device>`). For DistilBERT float32 the two read 8.5%
and 0.06% on the Neural Engine: a gate on the count watched the wrong figure. Records written before the
change (the share by count under `placement.<device>`) are read as such, so compare never weighs a count
against a cost."""

from __future__ import annotations

import pytest

from mlbench.backends.base import placement_metrics
from mlbench.compare.comparison import compare, parse_rules
from mlbench.metrics import catalog, compared_by_default, headline, info, placement_shares
from mlbench.records import Metric, OpPlacement, Placement, RunRecord
from mlbench.report.html.page import render_html
from mlbench.report.markdown.run_report import render_markdown
from tests.compare.test_comparison import rec, run_of


def placement(by_count: dict, by_cost: dict | None, source: str = "estimated") -> Placement:
    return Placement(source=source, method="mlbench rules (placement_rules.yaml)", preferred="neural_engine",
                     compute_ops=200, constants=10, by_count=by_count, by_cost=by_cost,
                     cost_basis="roofline" if by_cost else None, switches=3,
                     ops=[OpPlacement(name="linear_0", op_type="linear", device="cpu")])


DISTILBERT = placement({"neural_engine": 0.085, "cpu": 0.915}, {"neural_engine": 0.0006, "cpu": 0.9994})


def test_the_shares_by_cost_lead_and_the_shares_by_count_stay_beside_them():
    metrics = placement_metrics(DISTILBERT)
    assert {n: m.value for n, m in metrics.items()} == {
        "placement.neural_engine": 0.0006, "placement.gpu": 0.0, "placement.cpu": 0.9994,
        "placement.count.neural_engine": 0.085, "placement.count.gpu": 0.0, "placement.count.cpu": 0.915,
        "placement.switches": 3}
    assert {m.source for m in metrics.values()} == {"estimated"}


def test_without_a_cost_per_operation_the_share_by_cost_is_absent_and_says_why():
    metrics = placement_metrics(placement({"gpu": 0.5, "cpu": 0.5}, None, "measured"))
    assert metrics["placement.gpu"].value is None and metrics["placement.gpu"].source is None
    assert metrics["placement.gpu"].reason == ("mlbench rules (placement_rules.yaml) gave no cost per operation; "
                                               "placement.count.gpu is the share by operation count")
    assert metrics["placement.count.gpu"] == Metric.measured(0.5, "ratio")


def test_the_catalog_knows_both_and_compare_checks_the_cost_by_default():
    assert info("placement.neural_engine").label == "ANE share of cost"
    assert info("placement.count.neural_engine").label == "ANE share of ops"
    assert info("placement.count.cpu").is_fraction and not info("placement.count.cpu").compared
    assert placement_shares() == ["placement.neural_engine", "placement.gpu", "placement.cpu"]
    assert placement_shares(by="count") == ["placement.count.neural_engine", "placement.count.gpu",
                                            "placement.count.cpu"]
    assert headline()[1] == "placement.neural_engine"
    assert "placement.neural_engine" in compared_by_default()
    assert not any(n.startswith("placement.count.") for n in compared_by_default())
    assert all(n in catalog() for n in placement_shares(by="count"))


def record(variant: str, shares: Placement, *, old: bool = False) -> RunRecord:
    """A Core ML record as a report holds it; `old`: as written before the shares went by cost."""
    r = rec(variant)
    r.placement = shares
    metrics = placement_metrics(shares)
    if old:
        metrics = {n.replace("placement.count.", "placement."): m for n, m in metrics.items()
                   if not n.startswith("placement.") or n.startswith("placement.count.") or n == "placement.switches"}
    return RunRecord.model_validate(r.model_dump(mode="json") | {"metrics": {
        n: m.model_dump(mode="json") for n, m in metrics.items()}})


def test_an_older_record_is_read_with_its_share_by_count_where_it_belongs():
    old = record("m/coreml/all", DISTILBERT, old=True)
    assert old.metrics["placement.count.neural_engine"].value == 0.085
    assert old.metrics["placement.neural_engine"].value == 0.0006  # from the record's own placement
    assert old.model_dump() == record("m/coreml/all", DISTILBERT).model_dump()
    without_cost = record("m/coreml/all", placement({"neural_engine": 0.9, "cpu": 0.1}, None), old=True)
    assert without_cost.metrics["placement.count.neural_engine"].value == 0.9
    assert without_cost.metrics["placement.neural_engine"] == Metric.absent(
        "ratio", "this record's placement gave no cost per operation; placement.count.neural_engine is the share "
        "by count")


def test_compare_gates_on_the_cost_by_default_and_on_the_count_when_a_rule_says_so():
    same_cost = placement({"neural_engine": 0.2, "cpu": 0.8}, {"neural_engine": 0.0006, "cpu": 0.9994})
    big = placement({"neural_engine": 0.9, "cpu": 0.1}, {"neural_engine": 0.99, "cpu": 0.01})
    big_less = placement({"neural_engine": 0.9, "cpu": 0.1}, {"neural_engine": 0.80, "cpu": 0.20})
    base = run_of([record("a/coreml/all", DISTILBERT, old=True), record("b/coreml/all", big)], "b")
    head = run_of([record("a/coreml/all", same_cost), record("b/coreml/all", big_less)], "h")
    result = compare(base, head)  # the defaults: the Neural Engine's share of the cost must not fall by 5 pp
    groups = {v.variant_id: v.group for v in result.variants}
    assert groups == {"a/coreml/all": "unchanged", "b/coreml/all": "regressed"}  # 0.06% -> 0.06%; 99% -> 80%
    (finding,) = [f for v in result.variants for f in v.findings]
    assert (finding.rule, finding.message) == ("placement.neural_engine:-5pp", "≈99.0% → ≈80.0% (-19.0 pp)")
    by_count = compare(base, head, parse_rules(["placement.count.neural_engine:+5pp"]))
    assert {v.variant_id: v.group for v in by_count.variants} == {"a/coreml/all": "regressed",
                                                                  "b/coreml/all": "unchanged"}
    (finding,) = [f for v in by_count.variants for f in v.findings]
    assert finding.message == "≈8.5% → ≈20.0% (+11.5 pp)"


def test_the_reports_say_which_share_they_show():
    no_cost = placement({"neural_engine": 0.75, "cpu": 0.25}, None, "measured")
    report = run_of([record("m/coreml/all", DISTILBERT), record("m/coreml/plan", no_cost)], "r1")
    text = render_markdown(report, limit=None)
    assert "| ANE / GPU / CPU % of cost |" in text and "| ANE / GPU / CPU % of ops |" in text
    assert "| ≈0 / 0 / 100 | ≈8 / 0 / 92 |" in text  # DistilBERT: by cost, then by count
    assert "| – |" in text and "| 75 / 0 / 25 |" in text  # no cost known: – by cost, its count beside it
    assert "_% of cost_: each device's share of the work" in text
    html = render_html(report)
    assert '<th class="num">Neural Engine % of cost</th>' in html
    assert "≈ANE 0% CPU 100%, 3 switches" in html  # the bar of the estimate: shares of the cost
    assert "ANE 75% CPU 25% of ops, 3 switches" in html  # no cost known: the bar says it shows the ops
    assert "bars: share of the cost (of ops where the label says so)" in html


@pytest.mark.parametrize("rule", ["placement.count.neural_engine:-5pp", "placement.count.cpu:<0.5"])
def test_rules_may_name_the_share_by_count(rule):
    assert parse_rules([rule])[0].metric == rule.split(":")[0]
