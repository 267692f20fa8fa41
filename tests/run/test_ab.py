"""`mlbench ab`: real models timed in interleaved rounds through each backend's call timer, judged
by paired statistics, with compare's rules, output and exit codes; `--git-base`; the load record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlbench.backends.base import VariantSkipped
from mlbench.cli.main import main
from mlbench.compare.rules import parse_rules
from mlbench.run.ab import AbSettings, run_ab
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: stack
models:
  - name: stack
    source: {ROOT}/benchmarks/ab/stack.py:Stack
    kwargs: {{blocks: BLOCKS, width: 128}}
    inputs: [{{name: x, shape: [16, 128]}}]
targets:
  - backend: torch
    device: [cpu]
    threads: 1
report: {{dir: out}}
"""
QUICK = AbSettings(rounds=12, calls=5, warmup=1)  # 12 rounds: one round reversed by preemption still leaves p < 0.01


def pipelines(write_pipeline, base_blocks: int, head_blocks: int, extra: str = ""):
    base = write_pipeline(PIPELINE.replace("BLOCKS", str(base_blocks)) + extra, "base.yaml")
    head = write_pipeline(PIPELINE.replace("BLOCKS", str(head_blocks)) + extra, "head.yaml")
    return base, head


def test_a_much_slower_head_is_a_regression(write_pipeline, monkeypatch):
    import mlbench.sources.loading as loading

    built = []
    real_load = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: built.append(real_load(*a, **k)) or built[-1])
    base, head = pipelines(write_pipeline, 2, 40)
    settings = AbSettings(rounds=200, min_rounds=12, calls=5, warmup=1, instances=2)
    result = run_ab(load_pipeline(base), load_pipeline(head), parse_rules(["latency.median:+10%"]), settings=settings)
    assert result.regressed and result.counts["regressed"] == 1
    (variant,) = result.variants
    median = next(d for d in variant.deltas if d.metric == "latency.median")
    assert median.ratio > 2 and median.noise.test == "Wilcoxon signed-rank (paired over 12 interleaved rounds)"
    assert median.noise.significant
    # settled at the first look (12 rounds of 200); two copies per side, each built afresh
    assert result.interleaved is not None and result.interleaved.rounds == 200
    assert result.interleaved.rounds_run == {variant.variant_id: 12} and result.interleaved.instances == 2
    assert len(built) == 4 and len({id(m.module) for m in built}) == 4
    load = result.interleaved.load
    assert load["window"] == "interleaved rounds" and load["source"] == "measured"


def test_the_same_pipeline_on_both_sides_is_no_regression(write_pipeline):
    base, _ = pipelines(write_pipeline, 4, 4)
    result = run_ab(load_pipeline(base), load_pipeline(base), parse_rules(["latency.median:+50%"]), settings=QUICK)
    assert not result.regressed and result.counts["unchanged"] == 1


def test_cli_output_exit_codes_and_variants_on_one_side(write_pipeline, capsys):
    extra = "  - backend: torch\n    device: [cpu]\n    precision: [float16]\n"
    base, head = pipelines(write_pipeline, 2, 40)
    head.write_text(head.read_text().replace("report:", "latency: {warmup: 1}\nreport:"))
    base.write_text(base.read_text().replace("targets:\n", "targets:\n" + extra))
    code = main(["ab", str(base), str(head), "--rounds", "12", "--calls", "5", "--warmup", "0", "--format", "json",
                 "--fail-on", "latency.median:+10%"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    data = json.loads(captured.out)
    assert data["interleaved"]["skipped"] == {"stack/torch/cpu/float16": "only in BASE: nothing to interleave with"}
    assert [v["variant_id"] for v in data["variants"]] == ["stack/torch/cpu/float32"]
    assert captured.err == "ab: stack/torch/cpu/float32: measured\n"

    assert main(["ab", str(base), str(head), "--fail-on", "latency.medain:+10%"]) == 2
    assert capsys.readouterr().err.startswith("--fail-on: rule 'latency.medain:+10%': unknown metric")
    assert main(["ab", str(base)]) == 2
    assert capsys.readouterr().err == ("mlbench ab: give BASE and HEAD pipeline files, or one file and "
                                       "--git-base REF\n")
    assert main(["ab", str(base), str(head), "--rounds", "0"]) == 2
    assert capsys.readouterr().err == "--rounds must be at least 1, got 0\n"
    assert main(["ab", str(base), str(head), "--rounds", "30", "--min-rounds", "31"]) == 2
    assert capsys.readouterr().err == "--min-rounds must be between 1 and --rounds (30), got 31\n"
    assert main(["ab", str(base), str(head), "--instances", "0"]) == 2
    assert capsys.readouterr().err == "--instances must be at least 1, got 0\n"


def test_a_stalled_thread_pool_puts_both_sides_on_one_thread_before_the_rounds(write_pipeline, monkeypatch):
    """The check's factor set so that any pool reads as stalled (the stall itself is reproduced under a busy loop
    in tests/test_thread_check.py): both sides are then timed with one thread, and the records and the console
    say so."""
    import mlbench.run.ab as ab
    import mlbench.thread_check as thread_check

    monkeypatch.setattr(thread_check, "STALL_FACTOR", 0.0)
    records = []
    real_record = ab._timed_record
    monkeypatch.setattr(ab, "_timed_record", lambda *a, **k: records.append(real_record(*a, **k)) or records[-1])
    base, _ = pipelines(write_pipeline, 2, 2)
    base.write_text(base.read_text().replace("threads: 1", "threads: 2"))
    outcomes: list[str] = []
    run_ab(load_pipeline(base), load_pipeline(base), parse_rules(["latency.median:+50%"]), settings=QUICK,
           on_variant=lambda vid, outcome: outcomes.append(outcome))
    assert len(records) == 2
    for record in records:
        assert record.latency is not None and record.latency.threads == 1
        checks = record.details["ab_thread_check"]
        assert checks["base"]["configured"] == checks["head"]["configured"] == 2 and checks["base"]["stalled"]
    assert outcomes == [f"measured; {records[1].details['ab_threads']}"]
    assert outcomes[0].startswith("measured; both sides measured with 1 thread: 2 threads read ")


@pytest.mark.skipif(sys.platform == "darwin", reason="Core ML times on macOS")
def test_core_ml_variants_are_skipped_with_the_reason_off_macos(write_pipeline):
    extra = "  - backend: coreml\n    precision: float16\n    compute_units: cpu_only\n"
    base, _ = pipelines(write_pipeline, 2, 2)
    base.write_text(base.read_text().replace("targets:\n", "targets:\n" + extra))
    result = run_ab(load_pipeline(base), load_pipeline(base), settings=QUICK, select=lambda v: "coreml" in v)
    reason = "Core ML runs only on macOS; this machine runs Linux"
    assert result.interleaved.skipped == {"stack/coreml/float16/cpu_only/none": reason}
    (variant,) = result.variants
    assert (variant.base_status, variant.head_status, variant.group) == ("skipped", "skipped", "unchanged")
    assert not (base.parent / "cache").exists() or not any((base.parent / "cache").rglob("*.mlpackage"))


def test_onnxruntime_times_calls_of_a_loaded_session(write_pipeline):
    from mlbench.backends.onnxruntime.backend import OnnxruntimeBackend
    from mlbench.matrix import expand
    from mlbench.run.tasks import WorkContext
    from mlbench.store.cache import ArtifactCache

    base, _ = pipelines(write_pipeline, 2, 2, "")
    base.write_text(base.read_text().replace("  - backend: torch\n    device: [cpu]\n    threads: 1\n",
                                             "  - backend: onnxruntime\n"))
    pipeline = load_pipeline(base)
    (variant,) = expand(pipeline.config)
    ctx = WorkContext(pipeline.config, pipeline.base_dir, ArtifactCache(pipeline.cache_dir))
    backend = ctx.backend(variant)
    assert isinstance(backend, OnnxruntimeBackend)
    model = ctx.model("stack")
    timer = backend.call_timer(model, backend.export(model, variant), variant)
    samples = timer.time(calls=5, warmup=1)
    assert len(samples) == 5 and all(s > 0 for s in samples)
    timer.close()
    with pytest.raises(RuntimeError, match="this timer was closed"):
        timer.time(calls=1, warmup=0)


def test_a_backend_without_a_timer_skips_with_the_reason():
    from mlbench.backends.base import Backend

    class Plain(Backend):
        name = "plain"

    with pytest.raises(VariantSkipped, match="the plain backend cannot time an artifact's calls on demand"):
        Plain.call_timer(Plain.__new__(Plain), None, None, None)  # type: ignore[arg-type]


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_git_base_measures_the_file_at_a_revision(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "models" / "stack.py").write_text((ROOT / "benchmarks" / "ab" / "stack.py").read_text())
    text = PIPELINE.replace(f"{ROOT}/benchmarks/ab/stack.py", "../models/stack.py").replace("report: {dir: out}",
                                                                                          "report: {dir: out}\ncache: {dir: cache}")
    (repo / "pipelines").mkdir()
    pipeline = repo / "pipelines" / "p.yaml"
    pipeline.write_text(text.replace("BLOCKS", "2"))
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "base", "--allow-empty")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two blocks")
    pipeline.write_text(text.replace("BLOCKS", "40"))  # the working tree: 20× the work

    code = main(["ab", str(pipeline), "--git-base", "HEAD", "--rounds", "12", "--calls", "5", "-q",
                 "--fail-on", "latency.median:+10%"])
    out = capsys.readouterr().out
    assert code == 1, out
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert f"from `{pipeline} at HEAD`" in out and f"commit `{sha[:10]}`" in out

    assert main(["ab", str(pipeline), "--git-base", "no-such-ref"]) == 2
    assert capsys.readouterr().err == f"--git-base: git knows no commit 'no-such-ref' in {repo}\n"
    outside = tmp_path / "outside.yaml"
    outside.write_text(text.replace("BLOCKS", "2").replace("../models/stack.py", str(repo / "models" / "stack.py")))
    assert main(["ab", str(outside), "--git-base", "HEAD"]) == 2
    assert capsys.readouterr().err == f"{outside}: not inside a git repository: --git-base needs one\n"
