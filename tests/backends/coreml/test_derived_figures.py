"""Core ML figures derived from a package are computed once and cached with it (`derived_figures.py`): the four
compute-unit variants of one package make one emulation, with identical figures; a warm rerun emulates nothing
and reports the same figures; a change to the interpreter's version, or a corrupt entry, computes again (with a
note); two runs at once on one cache compute each entry once, and both report it."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")

from mlbench.run import run
from mlbench.store.derived import DERIVED_DETAILS, VALUE_NAME, derived_of
from mlbench.validate import load_pipeline
from tests.conftest import ROOT
from tests.derived_uses import derived_uses

pytestmark = [pytest.mark.torch, pytest.mark.skipif(sys.platform == "darwin", reason="off macOS: estimates cached")]

MODELS = """\
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.body(x))
"""

PIPELINE = """\
version: 1
name: derived
models:
  - name: clf
    source: models.py:Classifier
    inputs: [{{name: image, shape: [1, 3, 16, 16]}}]
targets:
  - backend: coreml
    precision: [float16]
    compute_units: [cpu_only, cpu_and_gpu, cpu_and_ne, all]
    estimate_on: [a17pro]
verify: {{samples: 2}}
cache: {{dir: {cache}}}
report: {{dir: {out}}}
history: {{enabled: false}}
"""
UNITS = ("cpu_only", "cpu_and_gpu", "cpu_and_ne", "all")


def _pipeline(folder, out="out", name="p.yaml"):
    (folder / "models.py").write_text(MODELS, encoding="utf-8")
    path = folder / name
    path.write_text(PIPELINE.format(cache="cache", out=out), encoding="utf-8")
    return path



def _figures(report):
    return {r.variant_id: (r.verify.model_dump(), {n: m.value for n, m in r.metrics.items()}) for r in report.records}


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("derived")
    path = _pipeline(folder)
    cold = run(load_pipeline(path))
    warm = run(load_pipeline(path))
    return folder, cold, warm


@pytest.mark.slow
def test_the_four_compute_unit_variants_of_one_package_make_one_emulation_with_identical_figures(cold_and_warm):
    _, cold, _ = cold_and_warm
    assert [r.status for r in cold.records] == ["ok"] * 4
    assert [derived_uses(r, "coreml.emulated_verify") for r in cold.records] == [["computed"], ["cached"], ["cached"],
                                                                          ["cached"]]
    assert cold.work["emulated"] == {"computed": 1, "cached": 0}
    assert cold.work["exported"] == {"computed": 1, "cached": 0}
    assert cold.work["estimated"] == {"computed": 5, "cached": 0}  # memory once, placement per compute units
    verifies = [r.verify for r in cold.records]
    assert all(v == verifies[0] for v in verifies) and verifies[0].source == "emulated" and verifies[0].samples == 2
    placements = {r.axes["compute_units"]: r.placement.by_count for r in cold.records}
    assert placements["cpu_only"] == {"cpu": 1.0} and placements["cpu_only"] != placements["cpu_and_ne"]


@pytest.mark.slow
def test_a_warm_rerun_emulates_nothing_and_reports_the_same_figures(cold_and_warm):
    _, cold, warm = cold_and_warm
    assert warm.work == {"exported": {"computed": 0, "cached": 1}, "estimated": {"computed": 0, "cached": 5},
                         "emulated": {"computed": 0, "cached": 1}, "timed": {"computed": 0, "cached": 0}}
    assert all(set(derived_uses(r, "coreml.emulated_verify")) == {"cached"} for r in warm.records)
    assert _figures(warm) == _figures(cold)
    assert [r.placement for r in warm.records] == [r.placement for r in cold.records]


def _measure_in_process(folder):
    """One variant measured in this process against the module's cache: what its emulation was (computed or
    found, and the note)."""
    from mlbench.matrix import expand
    from mlbench.run.tasks import WorkContext
    from mlbench.store.cache import ArtifactCache

    pipeline = load_pipeline(folder / "p.yaml")
    ctx = WorkContext(pipeline.config, pipeline.base_dir, ArtifactCache(pipeline.cache_dir))
    variant = expand(pipeline.config)[0]
    backend = ctx.backend(variant)
    model = ctx.model(variant.model)
    exported = backend.export(model, variant)
    derived_of(ctx.cache).take_tally()
    measurement = backend.measure(model, exported, variant)
    ctx.cache.release_pins()
    [emulation] = [o for o in derived_of(ctx.cache).take_tally() if o.kind == "coreml.emulated_verify"]
    return emulation, measurement


@pytest.mark.slow
def test_a_change_to_the_emulators_version_string_computes_again(cold_and_warm, monkeypatch):
    from mlbench.backends.coreml import derived_figures

    folder, cold, _ = cold_and_warm
    emulation, _ = _measure_in_process(folder)
    assert not emulation.computed
    monkeypatch.setattr(derived_figures, "emulator_version", lambda: "interpreter with a new kernel")
    emulation, measurement = _measure_in_process(folder)
    assert emulation.computed and emulation.note is None
    assert measurement.verify == cold.records[0].verify  # the same program, the same figures


@pytest.mark.slow
def test_a_corrupt_derived_entry_is_computed_again_with_a_note(cold_and_warm, caplog):
    from mlbench.store.cache import ArtifactCache

    folder, cold, _ = cold_and_warm
    [key] = {use["key"] for use in cold.records[0].details[DERIVED_DETAILS] if use["kind"] == "coreml.emulated_verify"}
    cache = ArtifactCache(folder / "cache")
    [entry] = [e for e in cache.entries() if e.key.startswith(key)]
    (entry.path / VALUE_NAME).write_text((entry.path / VALUE_NAME).read_text().replace('"samples":2', '"samples":3'))
    with caplog.at_level(logging.WARNING):
        emulation, measurement = _measure_in_process(folder)
    assert emulation.computed and emulation.note == (f"the cached coreml.emulated_verify entry {entry.key[:12]} was "
                                                     "corrupt and is computed again")
    assert f"cache entry {entry.key[:12]} is corrupt (checksum mismatch); rebuilding" in caplog.text
    assert measurement.verify == cold.records[0].verify


@pytest.mark.slow
def test_two_runs_at_once_on_one_cache_compute_each_entry_once_and_both_report_it(tmp_path):
    paths = [_pipeline(tmp_path, out=f"out_{name}", name=f"{name}.yaml") for name in ("a", "b")]
    procs = [subprocess.Popen([sys.executable, "-m", "mlbench", "run", "-q", "--jobs", "1", str(path)],
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for path in paths]
    errs = [proc.communicate(timeout=600)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errs
    from mlbench.records import RunReport

    reports = [RunReport.model_validate_json((tmp_path / f"out_{name}" / "report.json").read_text())
               for name in ("a", "b")]
    for work in ("emulated", "estimated"):  # every entry computed by exactly one of them, found by the other
        computed = [r.work[work]["computed"] for r in reports]
        assert sum(computed) == {"emulated": 1, "estimated": 5}[work], (work, [r.work for r in reports])
        assert [r.work[work]["computed"] + r.work[work]["cached"] for r in reports] == [sum(computed)] * 2
    assert _figures(reports[0]) == _figures(reports[1])
    for err in errs:
        assert err.rstrip().splitlines()[-1].startswith("4 ok; ")


@pytest.mark.slow
def test_two_jobs_emulate_each_package_shared_by_two_compute_unit_variants_once(tmp_path):
    """Two packages exported by two children at once; each child measures its package's variants (nothing is
    timed off macOS), and each package's emulation is computed once and found by its other variant."""
    path = _pipeline(tmp_path)
    path.write_text(path.read_text().replace("[cpu_only, cpu_and_gpu, cpu_and_ne, all]", "[cpu_only, all]")
                    .replace("precision: [float16]", "precision: [float32, float16]"))
    report = run(load_pipeline(path), jobs=2)
    assert [r.status for r in report.records] == ["ok"] * 4
    assert report.work["exported"] == {"computed": 2, "cached": 0}
    assert report.work["emulated"] == {"computed": 2, "cached": 0}
    assert report.work["estimated"] == {"computed": 6, "cached": 0}  # memory per package, placement per units
    for precision in ("float32", "float16"):
        records = [r for r in report.records if r.axes["precision"] == precision]
        assert sorted(o for r in records for o in derived_uses(r, "coreml.emulated_verify")) == ["cached", "computed"]
        assert records[0].verify == records[1].verify
