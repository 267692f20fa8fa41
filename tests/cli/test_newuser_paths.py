"""Smaller things a new user trips on: `python -m mlbench`, `--retry-crashed` alone, compare's JSON without a
base, an `estimate_on`-only change in `plan --diff`, a compact `cache info`, counts in the right number, code
spans GitHub renders as code, an exactly-zero verification that says why, and the schema naming the rules only
`mlbench validate` checks."""

from __future__ import annotations

import json
import subprocess
import sys

from mlbench.cli.main import main
from mlbench.compare.comparison import compare
from mlbench.records import OpPlacement, OutputError, Placement, Verification
from mlbench.report.markdown.compare import render_comparison_markdown
from mlbench.report.markdown.run_report import _verify
from mlbench.report.placement import render_placement_markdown
from mlbench.store.cache import ArtifactCache
from mlbench.store.entry import BuildResult
from tests.compare.test_comparison import rec, run_of
from tests.conftest import ROOT
from tests.report.markdown.test_github import gfm
from tests.report.test_not_finite import record


def test_python_dash_m_mlbench_is_the_command():
    result = subprocess.run([sys.executable, "-m", "mlbench", "--help"], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0 and result.stdout.startswith("usage: mlbench ")


def test_retry_crashed_without_resume_is_refused(write_pipeline, tiny_pipeline_text, capsys):
    path = write_pipeline(tiny_pipeline_text)
    assert main(["run", str(path), "--retry-crashed"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "--retry-crashed: only with --resume (it measures again a variant the last run died on)"]
    assert not (path.parent / "out").exists()


def test_compare_without_a_base_writes_json_when_asked(tmp_path, capsys):
    head = tmp_path / "report.json"
    head.write_text(run_of([rec("m/torch/cpu", [1.0, 1.1, 1.2])], "h1").model_dump_json(), encoding="utf-8")
    db = tmp_path / "history.sqlite"
    assert main(["compare", "last-on-this-machine", str(head), "--db", str(db), "--allow-missing-base",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["base"], data["head"]["run_id"], data["regressed"], data["variants"]) == (None, "h1", False, [])
    assert data["missing_base"].startswith("Nothing to compare with: ") and data["warnings"] == [data["missing_base"]]
    assert main(["compare", "last-on-this-machine", str(head), "--db", str(db), "--allow-missing-base"]) == 0
    assert capsys.readouterr().out.startswith("## mlbench compare: p\n\nNothing to compare with: ")


COREML = """\
version: 1
name: est
models:
  - name: r
    source: torchvision:resnet18
    inputs:
      - {{name: image, shape: [1, 3, 224, 224]}}
targets:
  - backend: coreml
    precision: [float32, float16]
    compute_units: [cpu_only, all]
    estimate_on: {chips}
"""


def test_an_estimate_on_change_changes_variants_not_artifacts(write_pipeline, capsys):
    base = write_pipeline(COREML.format(chips="[a17pro, m1]"), "base.yaml")
    head = write_pipeline(COREML.format(chips="[a17pro]"), "head.yaml")
    assert main(["plan", "--diff", str(base), str(head), "--format", "json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["artifacts"]["changed"] == [] and diff["artifacts"]["unchanged"] == 2
    assert len(diff["variants"]["changed"]) == 4
    assert diff["variants"]["changed"][0]["fields"] == {
        "options.estimate_on": {"base": ["a17pro", "m1"], "head": ["a17pro"]}}


def test_cache_info_is_compact_and_names_no_stale_folder(tmp_path, capsys):
    cache = ArtifactCache(tmp_path / "cache")
    layers = [{"name": f"op{i}", "op_type": "conv", "flops": i} for i in range(400)]

    def build(folder):
        (folder / "model.bin").write_bytes(b"x")
        return BuildResult("model.bin", {"label": "m/coreml/float16", "analysis": {
            "path": str(tmp_path / "tmpabc" / "model.mlpackage"), "layers": layers, "precision": "FLOAT16"}})

    entry, _ = cache.get_or_build("ab" * 32, {"backend": "coreml"}, build)
    assert main(["cache", "info", "--dir", str(tmp_path / "cache"), "abab"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert len(out) < 2000 and "tmpabc" not in out
    assert shown["artifact"] == str(entry.path / "model.bin") and shown["analysis"]["precision"] == "FLOAT16"
    assert shown["analysis"]["layers"].startswith("(400 items, ") and shown["analysis"]["layers"].endswith(
        " characters: in meta.json)")


def _placement(switches: int, note: str | None = None) -> Placement:
    return Placement(source="estimated", method="mlbench rules", compute_ops=1, constants=1,
                     by_count={"cpu": 1.0}, switches=switches, note=note, by_cost=None,
                     ops=[OpPlacement(name="conv", op_type="conv", device="cpu")])


def test_counts_take_the_right_number():
    one = render_placement_markdown(_placement(1), title="m")
    assert "1 compute operation (1 constant counted apart); 1 device switch; " in one
    two = render_placement_markdown(_placement(2).model_copy(update={"compute_ops": 3, "constants": 0}), title="m")
    assert "3 compute operations (0 constants counted apart); 2 device switches; " in two


def test_code_in_notes_and_warnings_renders_as_code_on_github():
    note = ("No operation reached the Neural Engine because the program is float32: Core ML runs only float16 "
            "programs there. Export with `precision: float16` to use it. A model's *name* [x](y) <b>` stays text.")
    html = gfm(render_placement_markdown(_placement(0, note), title="m"))
    assert "Export with <code>precision: float16</code> to use it." in html
    assert "`" in html and "<em>" not in html and "<a " not in html and "<b>" not in html
    base, head = (run_of([rec("m/torch/cpu", [1.0, 1.1, 1.2])], r) for r in ("b", "h"))
    comparison = compare(base, head).model_copy(update={"warnings": [
        "the runs measured under very different load (base: 2 cores; head: 2 cores): latency differences may be "
        "the machine's; `mlbench ab` measures both sides interleaved"]})
    assert "<code>mlbench ab</code> measures both sides interleaved" in gfm(render_comparison_markdown(comparison))


def test_an_exactly_zero_verification_says_why():
    exact = Verification(reference="torch/cpu/float32", max_abs=0.0, max_rel=0.0, tolerance=1e-3, passed=True,
                         source="emulated", outputs=[OutputError(name="y", max_abs=0.0, max_rel=0.0, shape=[1, 1])])
    assert _verify(record("v/coreml/float32", verify=exact)) == (
        "†0.00e+00 (identical outputs: emulated with the reference's own kernels)")
    assert _verify(record("v/onnxruntime/float32", verify=exact.model_copy(update={"source": "measured"}))) == (
        "0.00e+00 (identical outputs)")
    near = exact.model_copy(update={"max_abs": 1e-9, "max_rel": 1e-7})
    assert _verify(record("v/coreml/float32", verify=near)) == "†1.00e-07"


def test_the_schema_says_which_rules_only_validate_checks():
    schema = json.loads((ROOT / "schemas" / "pipeline.schema.json").read_text(encoding="utf-8"))
    description = schema["description"]
    assert "only `mlbench validate` checks" in description
    for rule in ("optimize names a recipe", "model names are unique", "estimate_on names a known chip",
                 "exclude values name models and axis values that exist", "tolerance and min_snr_db keys"):
        assert rule in description
