"""A real run on small models: records, failures that don't stop the sweep, reports, journal."""

from __future__ import annotations

import json

import jsonschema
import pytest

from mlbench.cli.main import main
from mlbench.report.json_report import report_schema
from mlbench.run.runner import run
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch


def test_run_writes_valid_reports_and_keeps_going(write_pipeline, tiny_pipeline_text, tmp_path, capsys):
    broken_models = f"""\
  - name: missing_module
    source: broken_import.py:Net
    inputs: [{{name: x, shape: [1, 3]}}]
  - name: wrong_shape
    source: {ROOT}/examples/tiny_cnn.py:TinyCNN
    inputs: [{{name: image, shape: [1, 5, 32, 32]}}]
targets:"""
    text = tiny_pipeline_text.replace("targets:", broken_models, 1).replace(
        "precision: [float32]", "precision: [float32, bfloat16]")
    path = write_pipeline(text)
    # found by validate (it exists and defines Net), failing only when imported
    (tmp_path / "broken_import.py").write_text("import no_such_package\n\n\nclass Net:\n    pass\n")

    assert main(["run", str(path)]) == 1  # some variants failed
    err = capsys.readouterr().err
    assert "[1/6] tiny_cnn/torch/cpu/float32  ok  median" in err
    assert err.startswith("6 variants to run\n") and "2 ok, 4 failed; 2 timed; reports in" in err

    data = json.loads((tmp_path / "out" / "report.json").read_text())
    jsonschema.validate(data, report_schema())
    records = {r["variant_id"]: r for r in data["records"]}
    ok = records["tiny_cnn/torch/cpu/float32"]
    assert ok["status"] == "ok"
    assert ok["latency"]["warmup"] == 1 and len(ok["latency"]["samples"]) >= 3
    assert ok["metrics"]["latency.median"]["source"] == "measured"
    assert ok["details"]["verify"].startswith("this variant is the reference")
    bf16 = records["tiny_cnn/torch/cpu/bfloat16"]
    assert bf16["verify"]["reference"] == "torch/cpu/float32" and bf16["verify"]["passed"]
    assert 0 < bf16["verify"]["max_rel"] < 5e-2
    assert records["missing_module/torch/cpu/float32"]["error"] == (
        "model: cannot import broken_import.py: broken_import.py:1 in <module>: ModuleNotFoundError: No module "
        "named 'no_such_package'"
    )
    assert records["wrong_shape/torch/cpu/bfloat16"]["error"].startswith(
        f"model: model does not run on its inputs (image[1, 5, 32, 32]): {ROOT}/pipelines/models/tiny_cnn.py:25 in forward: "
        "RuntimeError: ")
    assert data["summary"] == {"ok": 2, "failed": 4, "skipped": 0}
    assert data["machine"]["packages"]["torch"]
    # the measuring child's start (interpreter and imports) is its own stage, not hidden in the others
    assert data["stage_seconds"]["child_start"] > 0

    journal = [json.loads(line) for line in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["run"]["run_id"] == data["run_id"]
    journaled = [e["record"]["variant_id"] for e in journal[1:] if "record" in e]  # a figure measured again at the
    assert list(dict.fromkeys(journaled)) == [r["variant_id"] for r in data["records"]]  # end is journaled again
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "### tiny_cnn" in markdown and "| `torch/cpu/float32` | ok |" in markdown


def test_same_seed_same_weights_and_outputs(write_pipeline, tiny_pipeline_text):
    from mlbench.sources.loading import load_model

    spec = load_pipeline(write_pipeline(tiny_pipeline_text)).config.models[0]
    first, second = (load_model(spec, seed=0, base_dir=ROOT) for _ in range(2))
    other = load_model(spec, seed=1, base_dir=ROOT)
    assert first.digest == second.digest != other.digest
    assert (first.reference[0][1] == second.reference[0][1]).all()


def test_unavailable_device_is_skipped_not_failed(write_pipeline, tiny_pipeline_text):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    text = tiny_pipeline_text.replace("device: [cpu]", "device: [cuda]")
    report = run(load_pipeline(write_pipeline(text)))
    assert [(r.status, r.error) for r in report.records] == [("skipped", "CUDA is not available on this machine")]


@pytest.mark.slow
def test_verify_samples_run_on_every_backend(write_pipeline, tiny_pipeline_text):
    text = tiny_pipeline_text.replace(
        "    precision: [float32]\n",
        "    precision: [float32, float16]\n  - backend: onnxruntime\n    precision: [float32]\n",
    ) + "verify: {samples: 3}\n"
    report = run(load_pipeline(write_pipeline(text)))
    by_id = {r.variant_id: r for r in report.records}
    for variant_id in ("tiny_cnn/torch/cpu/float16", "tiny_cnn/onnxruntime/float32/cpu"):
        verify = by_id[variant_id].verify
        assert by_id[variant_id].status == "ok" and verify.samples == 3 and verify.source == "measured"
        assert verify.top1_agreement == 1.0 and verify.snr_db is not None
        assert by_id[variant_id].metrics["verify.snr_db"].value == verify.snr_db
    assert by_id["tiny_cnn/torch/cpu/float32"].verify is None  # the reference itself


def test_digest_follows_an_edit_to_a_helper_beside_the_model_class(tmp_path):
    """The model's source file is hashed whole: a helper function its forward() calls is part of it."""
    import importlib.util
    import sys

    import torch

    from mlbench.sources.loading import module_digest

    path = tmp_path / "helper_model.py"

    def build(scale: str) -> torch.nn.Module:
        path.write_text("import torch\n\ndef scaled(x):\n    return x * " + scale + "\n\n"
                        "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                        "        self.linear = torch.nn.Linear(4, 2)\n\n"
                        "    def forward(self, x):\n        return scaled(self.linear(x))\n")
        spec = importlib.util.spec_from_file_location("helper_model", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["helper_model"] = module
        spec.loader.exec_module(module)
        torch.manual_seed(0)
        return module.M()

    inputs = [torch.zeros(1, 4)]
    try:
        first, again, edited = (module_digest(build(scale), inputs) for scale in ("2", "2", "3"))
    finally:
        sys.modules.pop("helper_model", None)
    assert first == again != edited
