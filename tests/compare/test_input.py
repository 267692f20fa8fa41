"""What `mlbench compare` reads can be hostile: impossible figures, duplicated variants and deep nesting are
refused in one line naming the file and the place, and huge sample arrays cost bounded memory."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from mlbench.cli.main import main
from mlbench.compare.comparison import compare, parse_rules
from mlbench.records import Metric, RunReport
from tests.compare.test_comparison import rec, run_of


@pytest.mark.parametrize("samples", [20_000, 1_000_000])
@pytest.mark.slow
def test_the_noise_guard_is_bounded_in_memory_whatever_the_sample_count(samples):
    """`max_repeats: 1000000` is valid: its bootstrap once asked for a 2000 × 1,000,000 array (15 GiB)."""
    rng = random.Random(7)
    base = run_of([rec("m/torch/cpu", [rng.gauss(10.0, 0.5) for _ in range(samples)])], "b")
    head = run_of([rec("m/torch/cpu", [rng.gauss(13.0, 0.5) for _ in range(samples)])], "h")
    tracemalloc.start()
    try:
        result = compare(base, head, parse_rules(["latency.median:+10%"]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one float64 copy of each side's samples (16 MB at a million) plus a fixed ~16 MiB working set
    assert peak < 24 * 2**20 + 2 * 8 * samples, f"{peak / 2**20:.0f} MiB"
    variant = result.variants[0]
    assert variant.group == "regressed" and [f.rule for f in variant.findings] == ["latency.median:+10%"]
    noise = next(d.noise for d in variant.deltas if d.metric == "latency.median")
    assert noise is not None and (noise.n_base, noise.n_head) == (samples, samples)
    assert noise.interval is not None and 1.25 < noise.interval[0] < noise.interval[1] < 1.35
    if samples > 100_000:
        assert noise.test == ("Mann–Whitney U (two-sided, normal approximation, a seeded 100,000 samples of a side "
                              "with more)")


def _report_file(tmp_path, name: str, edit=None):
    """A valid report as JSON (3 variants, 30 samples each), after `edit(data)` changes its dict."""
    records = [rec(f"m/torch/{device}", [10.0 + i * 0.01 for i in range(30)], load_time=5.0,
                   placement__cpu=Metric.measured(1.0, "ratio")) for device in ("cpu", "mps", "cuda")]
    data = json.loads(run_of(records, name).model_dump_json())
    if edit is not None:
        edit(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))  # NaN and Infinity as JavaScript writes them, as a hand-edited file may
    return path


def _set(path: str, value):
    """An edit that puts `value` at a dotted path of keys and indexes (metric names are one key)."""
    def edit(data):
        keys = path.split("/")
        node = data
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(keys[-1]) if keys[-1].isdigit() else keys[-1]] = value
    return edit


def compare_error(argv, capsys) -> str:
    assert main(["compare", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    return err.rstrip("\n")


@pytest.mark.parametrize("where, value, message", [
    ("records/1/metrics/latency.median/value", -4.0,
     "records[1].metrics.latency.median: impossible figure -4 ms: a time cannot be negative (variant 'm/torch/mps')"),
    ("records/0/metrics/latency.median/value", float("nan"),
     "records[0].metrics.latency.median: impossible figure nan ms: not a number (variant 'm/torch/cpu')"),
    ("records/2/metrics/load_time/value", float("inf"),
     "records[2].metrics.load_time: impossible figure inf ms: a time cannot be infinite (variant 'm/torch/cuda')"),
    ("records/0/metrics/placement.cpu/value", 1.5,
     "records[0].metrics.placement.cpu: impossible figure 1.5 ratio: a share lies between 0 and 1 "
     "(variant 'm/torch/cpu')"),
    ("records/1/latency/samples/7", -0.5,
     "records[1].latency.samples[7]: impossible figure -0.5 ms: a time cannot be negative (variant 'm/torch/mps')"),
    ("records/1/latency/samples/3", float("nan"),
     "records[1].latency.samples[3]: impossible figure nan ms: not a number (variant 'm/torch/mps')"),
    ("records/0/latency/p90", float("-inf"),
     "records[0].latency.p90: impossible figure -inf ms: a time cannot be negative (variant 'm/torch/cpu')"),
    ("stage_seconds", {"measure": -1.0}, "stage_seconds.measure: impossible figure -1 s: a time cannot be negative"),
])
def test_impossible_figures_are_refused_in_one_line_naming_the_file_and_place(tmp_path, capsys, where, value, message):
    """Negative latencies once read as "No regression (4 improved)", NaN as "+nan%, unchanged"."""
    good = _report_file(tmp_path, "good")
    bad = _report_file(tmp_path, "bad", _set(where, value))
    assert compare_error([str(good), str(bad)], capsys) == f"{bad}: {message}"
    assert compare_error([str(bad), str(good)], capsys) == f"{bad}: {message}"


def test_possible_extremes_are_read(tmp_path, capsys):
    """An output holding NaN is infinitely far from the reference; an SNR may be -inf; a time may be 0."""
    def edit(data):
        record = data["records"][0]
        record["metrics"]["verify.max_rel"] = {"value": float("inf"), "unit": "rel", "source": "measured"}
        record["metrics"]["verify.snr_db"] = {"value": float("-inf"), "unit": "dB", "source": "measured"}
        record["latency"]["samples"][0] = 0.0
    good, odd = _report_file(tmp_path, "good"), _report_file(tmp_path, "odd", edit)
    assert main(["compare", str(good), str(odd), "--fail-on", "latency.median:+10%"]) == 0, capsys.readouterr().err


def test_a_variant_listed_twice_is_refused(tmp_path, capsys):
    """It was counted twice: "5 unchanged" for 4 variants."""
    def twice(data):
        data["records"].append(data["records"][1])
    good, bad = _report_file(tmp_path, "good"), _report_file(tmp_path, "bad", twice)
    assert compare_error([str(good), str(bad)], capsys) == (
        f"{bad}: records[3].variant_id: variant 'm/torch/mps' is also records[1]; a report holds each variant once")
    report = RunReport.model_validate_json(bad.read_text())
    with pytest.raises(ValueError) as info:
        compare(RunReport.model_validate_json(good.read_text()), report)
    assert str(info.value) == "head lists a variant more than once; a report holds each variant once"


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,  # deeper than the JSON reader goes
    None,  # valid JSON whose backend details nest 990 deep: past what the report model reads
])
def test_deeply_nested_json_is_one_line(tmp_path, capsys, text):
    good = _report_file(tmp_path, "good")
    deep = tmp_path / "deep.json"
    if text is None:
        text = good.read_text().replace('"details": {}', '"details": ' + '{"a": ' * 990 + "1" + "}" * 990, 1)
    deep.write_text(text)
    assert compare_error([str(deep), str(good)], capsys) == (
        f"{deep}: not an mlbench report: its JSON is nested too deeply to read")


def test_a_history_run_is_checked_too(tmp_path, capsys):
    """A history reference is read from the database: the check names the database and the run."""
    from mlbench.store.history import record_run

    bad = _report_file(tmp_path, "bad0run1", _set("records/0/latency/cv", -1.0))
    db = tmp_path / "history.sqlite"
    record_run(RunReport.model_validate_json(bad.read_text()), tmp_path / "p.yaml", db)
    good = _report_file(tmp_path, "good")
    assert compare_error(["last", str(good), "--db", str(db)], capsys) == (
        f"{db}: run bad0run1: records[0].latency.cv: impossible figure -1 cv: a coefficient of variation cannot be "
        "negative (variant 'm/torch/cpu')")
