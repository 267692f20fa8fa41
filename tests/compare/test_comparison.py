"""`mlbench compare`: rules, the noise guard on raw samples, groups, exit codes and one-line errors."""

from __future__ import annotations

import json
import random

import pytest

from mlbench.cli.main import main
from mlbench.compare.comparison import Comparison, RuleError, compare, parse_rule, parse_rules
from mlbench.compare.noise import mann_whitney_u
from mlbench.metrics import known_names
from mlbench.records import Latency, Metric, RunRecord, RunReport
from mlbench.report.markdown.compare import render_comparison_markdown
from tests.report.test_report import report as make_report

# ---------------------------------------------------------------------------------------------
# Rules


@pytest.mark.parametrize("text, kind, direction, threshold", [
    ("latency.median:+10%", "relative", 1, 10.0),
    ("load_time:-2.5%", "relative", -1, 2.5),
    ("placement.neural_engine:-5pp", "points", -1, 5.0),
    ("placement.switches:+2", "absolute_change", 1, 2.0),
    ("verify.max_rel:>1e-2", "above", 1, 0.01),
    ("placement.cpu:<0.5", "below", -1, 0.5),
    (" status:failed ", "status", 1, 0.0),
])
def test_rules_parse(text, kind, direction, threshold):
    rule = parse_rule(text)
    assert (rule.kind, rule.direction, rule.threshold) == (kind, direction, threshold)


EXAMPLES = "(e.g. latency.median:+10%, placement.neural_engine:-5pp, verify.max_rel:>1e-2, status:failed)"


@pytest.mark.parametrize("text, message", [
    ("latency.median", f"rule 'latency.median' is not METRIC:THRESHOLD {EXAMPLES}"),
    ("latency.median:", f"rule 'latency.median:' is not METRIC:THRESHOLD {EXAMPLES}"),
    (":+10%", f"rule ':+10%' is not METRIC:THRESHOLD {EXAMPLES}"),
    ("latency.medain:+10%", "rule 'latency.medain:+10%': unknown metric 'latency.medain'; did you mean 'latency.median'? "
                            f"(known: {', '.join(known_names())})"),
    ("latency.median:10%", "rule 'latency.median:10%': threshold '10%' is not +N%, -N%, +Npp, -Npp, +N, -N, >N or <N"),
    ("latency.median:+10pp", "rule 'latency.median:+10pp': percentage points apply to fractions (placement.neural_engine, "
                             "placement.gpu, placement.cpu, placement.count.neural_engine, placement.count.gpu, "
                                 "placement.count.cpu, verify.top1_agreement, verify.token_agreement); use % for "
                             "latency.median"),
    ("verify.max_rel:>1%", "rule 'verify.max_rel:>1%': a limit (>N) is a plain number in the metric's unit, without %"),
    ("placement.gpu:<5pp", "rule 'placement.gpu:<5pp': a limit (<N) is a plain number in the metric's unit, without pp"),
    ("status:faild", "rule 'status:faild': status can be failed, skipped, gone, not 'faild'; did you mean 'failed'?"),
    ("placement.gpu:-120pp", "rule 'placement.gpu:-120pp': a fraction cannot move by more than 100 percentage points"),
    (3, "a rule is text like 'latency.median:+10%', got 3"),
])
def test_bad_rules_are_one_line_errors_naming_the_rule(text, message):
    with pytest.raises(RuleError) as info:
        parse_rule(text)
    assert str(info.value) == message


# ---------------------------------------------------------------------------------------------
# The noise test


def test_mann_whitney_matches_scipy_exact_and_approximate():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(1)
    cases = [
        ([rng.gauss(1, 0.1) for _ in range(6)], [rng.gauss(1.3, 0.1) for _ in range(5)]),  # exact
        ([rng.gauss(1, 0.2) for _ in range(30)], [rng.gauss(1.1, 0.2) for _ in range(25)]),  # normal approx.
        ([round(rng.gauss(1, 0.3), 1) for _ in range(20)], [round(rng.gauss(1, 0.3), 1) for _ in range(20)]),  # ties
    ]
    for base, head in cases:
        ours = mann_whitney_u(base, head)
        theirs = scipy_stats.mannwhitneyu(head, base, alternative="two-sided", method="auto")
        assert ours.u == pytest.approx(theirs.statistic)
        assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)
    assert "exact" in mann_whitney_u(*cases[0]).test and "normal" in mann_whitney_u(*cases[1]).test


def test_too_few_samples_say_so():
    result = mann_whitney_u([1.0, 2.0], [3.0, 4.0, 5.0, 6.0, 7.0])
    assert result.p_value is None and not result.significant
    assert "too few raw samples (2 and 5" in result.describe()


# ---------------------------------------------------------------------------------------------
# Hand-built runs


def rec(variant_id: str, samples: list[float] | None = None, status: str = "ok", **metrics: float | Metric) -> RunRecord:
    model, backend, *axes = variant_id.split("/")
    values = {k.replace("__", "."): (v if isinstance(v, Metric) else Metric.measured(v, "ratio" if "placement" in k
              and "switches" not in k else "ms")) for k, v in metrics.items()}
    latency = None
    if samples is not None:
        ordered = sorted(samples)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:][:2]) / 2
        values["latency.median"] = Metric.measured(median, "ms")
        values["latency.best"] = Metric.measured(ordered[0], "ms")
        latency = Latency(samples=samples, warmup=0, median=median, best=ordered[0], p90=ordered[-1], mean=median,
                          stdev=0.0, cv=0.0, threads=1, total_s=1.0, stopped_by="repeats")
    return RunRecord(variant_id=variant_id, model=model, backend=backend, axes={"device": axes[0]},
                     artifact_id=variant_id, status=status, metrics=values, latency=latency,
                     error="measure: boom" if status == "failed" else None,
                     started="2026-01-01T00:00:00+00:00", seconds=1.0)


def run_of(records: list[RunRecord], run_id: str) -> RunReport:
    return make_report(records).model_copy(update={"run_id": run_id})


def test_a_variant_pushed_off_the_neural_engine_regresses():
    ne = lambda v, source="estimated": Metric(value=v, unit="ratio", source=source)  # noqa: E731
    base = run_of([rec("m/coreml/all", placement__neural_engine=ne(0.95), placement__cpu=ne(0.05)),
                   rec("n/coreml/all", placement__neural_engine=ne(0.90, "measured"))], "b1")
    head = run_of([rec("m/coreml/all", placement__neural_engine=ne(0.0), placement__cpu=ne(1.0)),
                   rec("n/coreml/all", placement__neural_engine=ne(0.88, "measured"))], "h1")
    result = compare(base, head)
    groups = {v.variant_id: v.group for v in result.variants}
    assert groups == {"m/coreml/all": "regressed", "n/coreml/all": "unchanged"}  # -2 pp is within -5pp
    finding = result.variants[0].findings[0]
    assert finding.rule == "placement.neural_engine:-5pp"
    assert finding.message == "≈95.0% → ≈0.0% (-95.0 pp)"  # estimates carry ≈
    assert result.regressed and result.counts["regressed"] == 1
    text = render_comparison_markdown(result)
    assert "**Regression**: `m/coreml/all`" in text
    assert "| `m/coreml/all` | `placement.neural_engine:-5pp` | ≈95.0% → ≈0.0% (-95.0 pp) | – |" in text


def test_noise_guard_holds_back_a_threshold_crossing_the_samples_do_not_support():
    noisy = [float(x) for x in range(1, 22)]  # wide spread: median 11
    shifted = noisy[3:] + [22.0, 23.0, 24.0]  # median 14 (+27%), but mostly the same samples
    tight_base = [10.0 + 0.01 * i for i in range(21)]
    tight_head = [12.0 + 0.01 * i for i in range(21)]  # +20%, far beyond the noise
    base = run_of([rec("m/torch/noisy", noisy), rec("m/torch/tight", tight_base)], "b")
    head = run_of([rec("m/torch/noisy", shifted), rec("m/torch/tight", tight_head)], "h")
    result = compare(base, head, parse_rules(["latency.median:+10%"]))
    noisy_cmp, tight_cmp = result.variants
    assert noisy_cmp.group == "unchanged" and not noisy_cmp.findings
    assert noisy_cmp.held_back == [  # held back by the Mann–Whitney test itself, not by the interval
        "latency.median:+10%: 11.00 ms → 14.00 ms (+27.3%), but Mann–Whitney U (two-sided, normal approximation): "
        "p=0.14 (within noise, α=0.01, n=21/21); 99% interval of the change -35.7% to +157.1%"]
    assert tight_cmp.group == "regressed"
    assert tight_cmp.findings[0].noise == ("Mann–Whitney U (two-sided, normal approximation): p=3.1e-08 (beyond noise, "
                                           "α=0.01, n=21/21); 99% interval of the change +18.9% to +20.6%")
    text = render_comparison_markdown(result)
    assert "### Within noise (not counted)" in text and "`m/torch/noisy`: latency.median:+10%" in text


def test_a_real_but_small_shift_must_clear_the_threshold_with_its_whole_interval():
    """A busy machine moves a median 12% between runs, and with 100 samples Mann–Whitney calls that
    real; the rule asks for more than 10% worse, so the whole bootstrap interval must lie past it."""
    rng = random.Random(1)
    base_samples = [10.0 * (1 + rng.random()) for _ in range(100)]   # 10..20 ms, median ~15
    drift = [x * 1.12 for x in base_samples]                          # +12%: beyond noise, not past +10% for sure
    slower = [x * 1.30 for x in base_samples]                         # +30%: clears +10% with its interval
    base = run_of([rec("m/torch/drift", base_samples), rec("m/torch/slow", base_samples)], "b")
    head = run_of([rec("m/torch/drift", drift), rec("m/torch/slow", slower)], "h")
    drift_cmp, slow_cmp = compare(base, head, parse_rules(["latency.median:+10%"])).variants
    assert drift_cmp.group == "unchanged"
    assert drift_cmp.held_back == [
        "latency.median:+10%: 15.11 ms → 16.92 ms (+12.0%), but the interval does not clear the threshold "
        "(Mann–Whitney U (two-sided, normal approximation): p=0.00013 (beyond noise, α=0.01, n=100/100); 99% interval "
        "of the change +3.2% to +22.2%)"]
    assert slow_cmp.group == "regressed"
    assert slow_cmp.findings[0].noise == ("Mann–Whitney U (two-sided, normal approximation): p=2e-15 (beyond noise, "
                                          "α=0.01, n=100/100); 99% interval of the change +19.8% to +41.9%")


def test_groups_status_limits_and_improvements():
    base = run_of([rec("a/torch/cpu", [1.0] * 10), rec("b/torch/cpu", status="ok", verify__max_rel=Metric.measured(1e-3, "ratio")),
                   rec("c/torch/cpu", [1.0 + i * 0.001 for i in range(10)]), rec("gone/torch/cpu")], "b")
    head = run_of([rec("a/torch/cpu", status="failed"), rec("b/torch/cpu", verify__max_rel=Metric.measured(0.5, "ratio")),
                   rec("c/torch/cpu", [0.5 + i * 0.001 for i in range(10)]), rec("new/torch/cpu")], "h")
    result = compare(base, head, parse_rules(["latency.median:+10%", "verify.max_rel:>1e-2", "status:failed"]))
    groups = {v.variant_id: v.group for v in result.variants}
    assert groups == {"a/torch/cpu": "regressed", "b/torch/cpu": "regressed", "c/torch/cpu": "improved",
                      "new/torch/cpu": "new", "gone/torch/cpu": "gone"}
    by_id = {v.variant_id: v for v in result.variants}
    assert by_id["a/torch/cpu"].findings[0].message == "ok → failed: measure: boom"
    assert by_id["b/torch/cpu"].findings[0].rule == "verify.max_rel:>1e-2"
    assert by_id["c/torch/cpu"].findings[0].kind == "improvement"
    text = render_comparison_markdown(result)
    for title in ("### Regressed (2)", "### Improved (1)", "### New (1)", "### Gone (1)"):
        assert title in text


def test_different_machines_are_warned_about():
    base = run_of([rec("a/torch/cpu", [1.0] * 5)], "b")
    head = run_of([rec("a/torch/cpu", [1.0] * 5)], "h")
    head.machine["cpu"] = "Apple M3"
    assert "different machines" in compare(base, head).warnings[0]


# ---------------------------------------------------------------------------------------------
# Real runs of the tiny pipeline, through the command line


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline
    from tests.conftest import ROOT, TINY_PIPELINE

    folder = tmp_path_factory.mktemp("runs")
    # One intra-op thread: on a shared 2-core machine, two OpenMP threads contending with another
    # process make every call ~200x slower for seconds at a time — a real change, not sample noise;
    # a 1 s window per run averages over shorter bursts of load from other processes.
    text = TINY_PIPELINE.format(root=ROOT).replace(
        "latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}", "latency: {warmup: 2, repeats: 20, min_time_s: 1.0}"
    ).replace("precision: [float32]", "precision: [float32]\n    threads: 1") + "history: {path: history.sqlite}\n"
    path = folder / "tiny.yaml"
    path.write_text(text)
    paths = []
    for name in ("first.json", "second.json"):
        run(load_pipeline(path))
        paths.append(folder / name)
        (folder / "out" / "report.json").rename(paths[-1])
    return folder, paths


@pytest.mark.torch
def test_two_runs_of_one_pipeline_compare_as_unchanged(two_runs, capsys):
    _folder, (first, second) = two_runs
    # two runs minutes apart on a shared machine differ by more than the default 10% whenever other work
    # starts between them (benchmarks/ab_noise.py counts how often; `mlbench ab` is the tool for that):
    # this test is about the command's output on real runs, so its rule leaves room for the machine
    assert main(["compare", str(first), str(second), "--fail-on", "latency.median:+300%"]) == 0
    out = capsys.readouterr().out
    # a busy machine may grade a run's figures unreliable: the rule is then inconclusive, still no regression
    assert next(line for line in out.splitlines() if line.startswith("**")).startswith("**No regression** (1 unchanged")
    assert "Noise guard: Mann–Whitney U (two-sided) on the raw latency samples, α=0.01" in out
    assert "| `tiny_cnn/torch/cpu/float32` | ok → ok |" in out and "p=" in out


def ungraded(data: dict) -> dict:
    """A report's JSON without the stability grades of its figures."""
    for record in data["records"]:
        for figure in [record.get("latency") or {}, *record["metrics"].values()]:
            figure.pop("stability", None)
    return data


@pytest.mark.torch
def test_every_latency_raised_30_percent_fails_and_names_the_variant(two_runs, tmp_path, capsys):
    _, (measured, _) = two_runs
    # figures raised by hand carry no measured grade (a busy machine may have graded the real ones unreliable,
    # which would make the rule inconclusive): both sides read as records written before grading
    data = ungraded(json.loads(measured.read_text()))
    first = tmp_path / "first.json"
    first.write_text(json.dumps(data))
    for record in data["records"]:
        latency = record["latency"]
        latency["samples"] = [s * 1.3 for s in latency["samples"]]
        for key in ("median", "best", "p90", "mean", "stdev"):
            latency[key] *= 1.3
        for name, metric in record["metrics"].items():
            if name.startswith("latency.") and metric["value"] is not None:
                metric["value"] *= 1.3
    data["run_id"] = "slower000001"
    slower = tmp_path / "slower.json"
    slower.write_text(json.dumps(data))

    assert main(["compare", str(first), str(slower)]) == 1
    out = capsys.readouterr().out
    assert "**Regression**: `tiny_cnn/torch/cpu/float32`" in out
    assert "| `tiny_cnn/torch/cpu/float32` | `latency.median:+10%` |" in out and "(+30.0%)" in out
    assert "Mann–Whitney U (two-sided, normal approximation): p=" in out

    assert main(["compare", str(first), str(slower), "--format", "json", "--fail-on", "latency.median:+40%"]) == 0
    comparison = Comparison.model_validate_json(capsys.readouterr().out)
    assert comparison.rules == ["latency.median:+40%"] and not comparison.regressed


@pytest.mark.torch
def test_history_references_and_pipeline_gate(two_runs, capsys, write_pipeline, tiny_pipeline_text):
    folder, (first, second) = two_runs
    db = str(folder / "history.sqlite")
    room = ["--fail-on", "latency.median:+300%"]  # two real runs: see the test above
    assert main(["compare", "last", "last", "--db", db, *room]) == 0  # the newest run against the one before
    out = capsys.readouterr().out
    first_id, second_id = (json.loads(p.read_text())["run_id"] for p in (first, second))
    assert f"**Base**: run `{first_id}`" in out and f"**Head**: run `{second_id}`" in out
    assert main(["compare", first_id[:6], str(second), "--db", db, *room]) == 0
    capsys.readouterr()

    gated = folder / "gated.yaml"
    gated.write_text((folder / "tiny.yaml").read_text().replace(
        "report: {dir: out}", "report: {dir: out, gate: ['latency.median:+1000%', 'status:skipped']}"))
    assert main(["compare", "last", str(second), "--pipeline", str(gated), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rules"] == ["latency.median:+1000%", "status:skipped"]


@pytest.mark.torch
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, two_runs):
    folder, (first, _) = two_runs
    not_report = tmp_path / "other.json"
    not_report.write_text('{"hello": 1}')
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    db = str(folder / "history.sqlite")
    cases = [
        (["compare", str(first), str(first), "--fail-on", "latency.median:+10"], None),  # valid: +10 ms
        (["compare", str(first), str(first), "--fail-on", "latency:+10%"],
         "--fail-on: rule 'latency:+10%': unknown metric 'latency'"),
        (["compare", str(tmp_path / "nope.json"), str(first)],
         f"{tmp_path / 'nope.json'}: no such report file, and not a history reference"),
        (["compare", str(not_report), str(first)], f"{not_report}: not an mlbench report: mlbench_version: Field required"),
        (["compare", str(broken), str(first)], f"{broken}: not an mlbench report: invalid JSON at line 1 column 2"),
        (["compare", "abcdef99", str(first), "--db", db], f"{db}: no run 'abcdef99' in the history"),
        (["compare", "last", str(first), "--db", str(tmp_path / "none.sqlite")],
         f"{tmp_path / 'none.sqlite'}: no run history here yet"),
    ]
    for argv, message in cases:
        code = main(argv)
        _out, err = capsys.readouterr()
        if message is None:
            assert code == 0, err
            continue
        assert code == 2, argv
        assert err.startswith(message) and err.count("\n") == 1, err


@pytest.mark.torch
def test_first_run_has_nothing_to_compare_with(two_runs, tmp_path, capsys):
    _, (first, _) = two_runs
    empty = tmp_path / "h.sqlite"
    assert main(["compare", "last-on-this-machine", str(first), "--db", str(empty)]) == 2
    capsys.readouterr()
    from mlbench.store.history import record_run

    record_run(RunReport.model_validate_json(first.read_text()), first, empty)
    assert main(["compare", "last-on-this-machine", str(first), "--db", str(empty), "--allow-missing-base"]) == 0
    assert "Nothing to compare with: no earlier run of pipeline 'tiny' on this machine other than the one being " \
           "compared in the history" in capsys.readouterr().out


def test_gate_rules_in_the_pipeline_are_checked_with_their_place(write_pipeline, tiny_pipeline_text, capsys):
    from mlbench.cli.main import main as cli_main

    text = tiny_pipeline_text.replace("report: {dir: out}", "report:\n  dir: out\n  gate:\n    - status:failed\n"
                                      "    - latency.median:+10")
    good = write_pipeline(text, "good.yaml")
    bad = write_pipeline(text.replace("latency.median:+10", "latency.median:10%"), "bad.yaml")
    assert cli_main(["validate", str(good), str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"{bad}:17:7: report.gate[1]: rule 'latency.median:10%': threshold '10%' is not +N%, -N%, +Npp, -Npp, "
        "+N, -N, >N or <N\n")


def test_a_figure_timed_with_one_thread_after_a_stall_is_inconclusive_against_one_timed_with_two():
    """A busy runner's stall check times the head with 1 thread (27.8 ms) where the quiet base ran 2 (16.4 ms):
    +69%, a change of the machine, not of the model, so the rule is inconclusive, never a regression."""
    from mlbench.stability import Stability

    def timed(samples: list[float], used: int, stalled: bool) -> RunRecord:
        record = rec("resnet18/torch/cpu", samples)
        grade = Stability(grade="stable", iqr_ratio=0.04, cv=0.04, drift=0.05, samples=len(samples), other_share=0.0)
        record.metrics["latency.median"] = record.metrics["latency.median"].model_copy(update={"stability": grade})
        record.details["thread_check"] = {"configured": 2, "configured_ms": 241.0 if stalled else 16.0,
                                          "one_thread_ms": 27.8 if stalled else 30.0, "stalled": stalled,
                                          "factor": 1.5}
        return record

    quiet = [16.4 + 0.01 * i for i in range(30)]
    base = run_of([timed(quiet, 2, stalled=False)], "b1")
    head = run_of([timed([27.8 + 0.01 * i for i in range(30)], 1, stalled=True)], "h1")
    result = compare(base, head, parse_rules(["latency.median:+10%"]))
    variant = result.variants[0]
    assert not result.regressed and variant.findings == []
    assert variant.inconclusive == [
        "latency.median:+10%: 16.54 ms → 27.95 ms (+68.9%), inconclusive: base timed it with 2 threads and head timed "
        "it with 1 thread (its pool of 2 stalled while other processes held the cores): not the same measurement; "
        "measure again on a quieter machine, or both sides interleaved with `mlbench ab`"]
    text = render_comparison_markdown(result)
    assert "**No regression** (1 unchanged; 1 rule inconclusive on figures that cannot be compared)." in text
    # both sides stalled: both timed with 1 thread, the same measurement, judged as usual
    both = run_of([timed([27.8 + 0.01 * i for i in range(30)], 1, stalled=True)], "b2")
    assert compare(both, head, parse_rules(["latency.median:+10%"])).variants[0].inconclusive == []
