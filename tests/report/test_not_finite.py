"""Inf and nan are data, never a lost report: a metric that is not finite is absent with the reason, a
verification keeps its inf figures as null + `not_finite` and reads them back, and a record that still
breaks the report schema is written failed while every other record and format is written."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from mlbench.records import Metric, OutputError, PipelineInfo, RunRecord, RunReport, Verification
from mlbench.report import write_reports
from mlbench.report.fit import fit_record, fit_report
from mlbench.run.journal import Journal
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

OUTPUTS = "an output holds inf or nan where eager float32's is finite"


def record(variant_id: str, **fields) -> RunRecord:
    return RunRecord(variant_id=variant_id, model=variant_id.split("/")[0], backend="torch",
                     axes={"device": "cpu", "precision": "float32"}, artifact_id=variant_id, status="ok",
                     started="2026-01-01T00:00:00+00:00", seconds=1.0, **fields)


def report(records: list[RunRecord]) -> RunReport:
    return RunReport(mlbench_version="0.1.0", run_id="abc", created="2026-01-01T00:00:00+00:00",
                     finished="2026-01-01T00:01:00+00:00", pipeline=PipelineInfo(name="p", path="p.yaml", sha256="0" * 64),
                     machine={}, settings={}, records=records,
                     summary={s: sum(r.status == s for r in records) for s in ("ok", "failed", "skipped")})


def verification(**update) -> Verification:
    fields = {"reference": "torch/cpu/float32", "max_abs": math.inf, "max_rel": math.inf, "tolerance": 1e-2,
              "passed": False, "snr_db": -math.inf,
              "outputs": [OutputError(name="y", max_abs=math.nan, max_rel=math.inf, shape=[1, 1])]}
    return Verification(**{**fields, **update})


def test_a_metric_that_is_not_finite_is_absent_with_the_reason():
    assert Metric.measured(math.inf, "ms").model_dump() == {
        "value": None, "unit": "ms", "source": None, "reason": "inf: not a finite number"}
    assert Metric(value=-math.inf, unit="dB", source="emulated").reason == "-inf: not a finite number"
    assert Metric.figure(math.nan, "abs", "measured", why_not_finite="why").reason == "nan: why"
    assert Metric.figure(0.5, "abs", "measured", why_not_finite="why") == Metric.measured(0.5, "abs")


def test_a_verification_writes_inf_as_null_with_the_reason_and_reads_it_back():
    overflowed = verification(overflow="float16 overflow: output 'y' reaches 7.5e4 in eager float32 "
                                       "(float16 max 65504)")
    data = json.loads(overflowed.model_dump_json())
    assert (data["max_abs"], data["max_rel"], data["snr_db"]) == (None, None, None)
    assert data["not_finite"] == {
        "max_abs": "inf: float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504)",
        "max_rel": "inf: float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504)",
        "snr_db": "-inf: float16 overflow: output 'y' reaches 7.5e4 in eager float32 (float16 max 65504)"}
    assert data["outputs"][0]["not_finite"] == {"max_abs": f"nan: {OUTPUTS}", "max_rel": f"inf: {OUTPUTS}"}
    back = Verification.model_validate_json(json.dumps(data))
    assert (back.max_abs, back.max_rel, back.snr_db) == (math.inf, math.inf, -math.inf)
    assert math.isnan(back.outputs[0].max_abs)
    assert back.model_dump_json() == overflowed.model_dump_json()
    assert verification().not_finite == {} and verification().why_not_finite == OUTPUTS
    finite = verification(max_abs=0.5, max_rel=0.5, snr_db=None, outputs=[])
    assert "not_finite" not in json.loads(finite.model_dump_json())  # nothing to say: no key


def test_a_null_figure_without_its_reason_does_not_read_back():
    data = json.loads(verification().model_dump_json())
    del data["not_finite"]
    with pytest.raises(ValueError, match="max_abs\n  Input should be a valid number"):
        Verification.model_validate(data)


def test_the_committed_schema_takes_a_report_with_an_overflowed_verification():
    schema = json.loads((ROOT / "schemas" / "report.schema.json").read_text(encoding="utf-8"))
    data = json.loads(report([record("m/torch/cpu/float16", verify=verification())]).model_dump_json())
    jsonschema.validate(data, schema)


def test_a_record_that_breaks_the_schema_is_failed_with_the_schema_error():
    broken = record("m/torch/cpu/float16", error="earlier", details={"scores": [1.0, math.nan]},
                    metrics={"latency.median": Metric.measured(1.0, "ms")})
    fitted = fit_record(broken)
    assert fitted.status == "failed" and fitted.metrics == {} and fitted.details == {}
    assert fitted.error == ("report: this record does not match the report schema at /details/scores/1 is nan, "
                            "which a JSON report cannot hold (its own error: earlier)")
    assert (fitted.variant_id, fitted.axes, fitted.seconds) == (broken.variant_id, broken.axes, broken.seconds)
    fine = record("n/torch/cpu/float32", verify=verification())
    assert fit_record(fine) is fine
    wrong_type = record("w/torch/cpu/float32", metrics={"latency.median": Metric.measured(1.0, "ms")})
    wrong_type.metrics["latency.median"].__dict__["unit"] = 5  # bypass pydantic on purpose: a type it refuses
    assert fit_record(wrong_type).error == ("report: this record does not match the report schema at "
                                            "/metrics/latency.median/unit: Input should be a valid string")
    wrong_type.__dict__["seconds"] = math.nan  # even the record's own fields: the failed record still writes
    assert fit_record(wrong_type).seconds == 0.0
    fitted_report = fit_report(report([broken, fine]))
    assert fitted_report.summary == {"ok": 1, "failed": 1, "skipped": 0}


def test_every_format_is_written_beside_a_record_that_breaks_the_schema(write_pipeline, tmp_path):
    pipeline = load_pipeline(write_pipeline(f"""\
        version: 1
        name: p
        models:
          - name: tiny
            source: {ROOT}/examples/tiny_cnn.py:TinyCNN
            inputs: [{{name: image, shape: [1, 3, 8, 8]}}]
        targets:
          - backend: torch
        history: {{enabled: false}}
        report: {{dir: out, formats: [json, markdown, html]}}
        """))
    broken = record("a/torch/cpu/float32", metrics={"latency.median": Metric.measured(1.0, "ms")})
    broken.metrics["latency.median"].__dict__["value"] = "fast"  # bypass pydantic on purpose
    written = write_reports(report([broken, record("b/torch/cpu/float32", verify=verification())]), pipeline)
    assert sorted(written) == ["html", "json", "markdown"]
    data = json.loads(written["json"].read_text(encoding="utf-8"))
    assert [(r["variant_id"], r["status"]) for r in data["records"]] == [("a/torch/cpu/float32", "failed"),
                                                                        ("b/torch/cpu/float32", "ok")]
    assert data["records"][0]["error"] == ("report: this record does not match the report schema at "
                                           "/metrics/latency.median/value: Input should be a valid number, unable "
                                           "to parse string as a number")
    assert data["summary"] == {"ok": 1, "failed": 1, "skipped": 0}
    assert "does not match the report schema" in written["markdown"].read_text(encoding="utf-8")
    assert "does not match the report schema" in written["html"].read_text(encoding="utf-8")


def test_a_journal_record_that_no_longer_reads_is_measured_again_not_counted_as_a_crash(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.start({"run_id": "r1", "created": "2026-01-01T00:00:00+00:00"})
    journal.started("a/torch/cpu", None, "2026-01-01T00:00:00+00:00")
    line = json.loads(record("a/torch/cpu", verify=verification()).model_dump_json())
    del line["verify"]["not_finite"]  # as the writer before inf was data left it: bare nulls
    with open(journal.path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"record": line, "fingerprint": None}) + "\n")
    contents = journal.load()
    assert contents.records == {} and contents.unfinished == {} and contents.skipped_lines == 1
