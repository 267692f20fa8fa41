"""The advice round trip through real runs: palettizing one layer breaks accuracy; the run localizes the
failed variant, `explain` advises excluding that layer, the advised pipeline runs, and the advised variant
clears its SNR floor while keeping most of the size reduction."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")

from tests.backends.coreml.localize.known_models import line_of

pytestmark = [pytest.mark.torch, pytest.mark.slow]

MODELS = Path(__file__).with_name("known_models.py")
PIPELINE = """\
version: 1
name: advice
models:
  - name: fv
    source: {models}:four_valued
    inputs: [{{name: x, shape: [4, 64]}}]
targets:
  - backend: coreml
    precision: [float16]
    compute_units: [cpu_only]
    optimize: [none, palettize2]
optimizations:
  palettize2: {{kind: palettize, nbits: 2}}
verify: {{min_snr_db: {{palettize2: 30}}, tolerance: {{palettize2: 0.5}}}}
cache: {{dir: cache}}
report: {{dir: out, formats: [json, markdown, html]}}
"""


def _record(report, variant_id):
    return next(r for r in report.records if r.variant_id == variant_id)


def test_the_advised_override_mends_the_broken_layer_and_keeps_most_of_the_saving(tmp_path, capsys):
    from mlbench.cli.main import main
    from mlbench.run.explain import advised_pipeline, explain
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(models=MODELS), encoding="utf-8")
    report = run(load_pipeline(path))
    broken = _record(report, "fv/coreml/float16/cpu_only/palettize2")
    assert broken.verify is not None and not broken.verify.passed
    assert "localization" in broken.details  # localized during the run: it failed
    report_file = tmp_path / "out" / "report.json"
    for page in ("report.md", "report.html"):  # folded under the model's table in both
        assert "Where fv/coreml/float16/cpu_only/palettize2 loses accuracy" in (tmp_path / "out" / page).read_text()

    found = explain(report_file, broken.variant_id)
    assert found.modules[0].module == "sensitive" and found.modules[0].where == f"known_models.py:{line_of('sensitive')}"
    assert found.advice is not None and found.advice.exclude == ["sensitive"]
    near = [m for m in found.eager if m.snr_db is not None and m.snr_db < 30]  # against eager PyTorch too
    assert max(near, key=lambda m: m.growth_db).module == "sensitive"
    assert found.advice.override == {"palettize2_advised": {"kind": "palettize", "nbits": 2, "mode": "kmeans",
                                                            "granularity": "per_tensor", "exclude": ["sensitive"]}}
    assert found.advice.kept_saving == pytest.approx(0.75, abs=0.01)

    advised = advised_pipeline(report_file, found, tmp_path / "advised.yaml")
    assert main(["run", str(advised), "-q"]) in (0, 1)
    capsys.readouterr()
    from mlbench.compare.report_file import read_report_file

    both = read_report_file(report_file, checked=False)
    mended = _record(both, "fv/coreml/float16/cpu_only/palettize2_advised")
    assert mended.verify.passed and mended.verify.snr_db > 30
    assert _record(both, broken.variant_id).verify.snr_db < 30  # the report shows both
    size = {r.variant_id.rsplit("/", 1)[-1]: r.metrics["size.weights"].value for r in both.records}
    saving, kept = size["none"] - size["palettize2"], size["none"] - size["palettize2_advised"]
    assert kept / saving > 0.7
    print(f"\nSNR {_record(both, broken.variant_id).verify.snr_db:.1f} -> {mended.verify.snr_db:.1f} dB; weights "
          f"{size['none']} -> {size['palettize2']} (all) / {size['palettize2_advised']} (advised) bytes",
          file=__import__("sys").stderr)
