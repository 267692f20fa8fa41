"""The order parallel exports start in (longest first), the workers' warm-up, and the load a run records."""

from __future__ import annotations

import pytest

from mlbench.matrix import Plan, expand
from mlbench.run.schedule import longest_first, model_sizes
from mlbench.run.tasks import warm_task
from mlbench.validate import load_pipeline
from tests.conftest import ROOT

pytestmark = pytest.mark.torch

PIPELINE = f"""\
version: 1
name: sizes
models:
  - name: small
    source: {ROOT}/benchmarks/ab/stack.py:Stack
    kwargs: {{blocks: 1, width: 8}}
    inputs: [{{name: x, shape: [1, 8]}}]
  - name: large
    source: {ROOT}/benchmarks/ab/stack.py:Stack
    kwargs: {{blocks: 3, width: 64}}
    inputs: [{{name: x, shape: [1, 64]}}]
  - name: broken
    source: {ROOT}/tests/faulty_models.py:Faulty   # without its `fault` argument: building it fails
    inputs: [{{name: x, shape: [1, 8]}}]
targets:
  - backend: onnxruntime
    precision: [float32, float16]
report: {{dir: out}}
"""


def test_longest_first_by_size_unknown_first(write_pipeline):
    pipeline = load_pipeline(write_pipeline(PIPELINE))
    exports = [g[0] for g in Plan(expand(pipeline.config)).artifact_groups()]
    # leaf modules (a Linear and a ReLU per block) plus 3 per million parameters
    assert model_sizes(pipeline.config, pipeline.base_dir, {"small", "large", "broken"}) == pytest.approx({
        "small": 2 + 3 * (8 * 8 + 8) / 1e6, "large": 6 + 3 * 3 * (64 * 64 + 64) / 1e6})
    ordered = longest_first(exports, pipeline.config, pipeline.base_dir, history=None)
    assert [v.model for v in ordered] == ["broken", "broken", "large", "large", "small", "small"]


def test_longest_first_by_the_last_runs_export_times(write_pipeline, monkeypatch):
    pipeline = load_pipeline(write_pipeline(PIPELINE))
    exports = [g[0] for g in Plan(expand(pipeline.config)).artifact_groups()]
    seconds = {v.artifact_id: float(i) for i, v in enumerate(exports)}  # the plan's last took longest
    monkeypatch.setattr("mlbench.run.schedule.last_export_seconds", lambda history, name: seconds)
    ordered = longest_first(exports, pipeline.config, pipeline.base_dir, history=None)
    assert ordered == exports[::-1]


def test_warm_task_imports_and_names_what_it_could_not():
    assert warm_task(["json", "no_such_package_here", "os:getcwd", "json:dumps"]) == [
        "no_such_package_here", "json:dumps"]  # a call that raises (json.dumps() wants an argument) is named too



def test_a_run_records_the_load_while_it_measured(write_pipeline, tiny_pipeline_text):
    from mlbench.run.runner import run

    report = run(load_pipeline(write_pipeline(tiny_pipeline_text)))
    load = report.machine["load"]
    assert load["window"] == "measurement" and load["source"] == "measured" and load["seconds"] > 0
    assert set(load) >= {"cores", "load_average_start", "load_average_end", "other_share", "steal_share"}
    assert load["other_share"] is None or 0.0 <= load["other_share"] <= 1.0


def test_a_run_orders_its_exports_with_sizes_taken_in_a_child(write_pipeline):
    from mlbench.run.executors import LocalExecutor
    from mlbench.run.runner import Runner

    pipeline = load_pipeline(write_pipeline(PIPELINE))
    runner = Runner(pipeline, jobs=2)
    exports = [g[0] for g in Plan(runner.plan.variants).artifact_groups()]
    executor = LocalExecutor(2)
    try:
        ordered = runner._order_exports(executor, exports)
        assert [v.model for v in ordered] == ["broken", "broken", "large", "large", "small", "small"]
        assert len(executor.pool.children) == 2  # started while the order was worked out, kept for the exports
        assert all(c.process.poll() is None for c in executor.pool.children)
    finally:
        executor.close()


def test_a_model_that_kills_its_process_when_sized_costs_only_the_order(write_pipeline):
    from mlbench.run.executors import LocalExecutor
    from mlbench.run.runner import Runner

    text = PIPELINE.replace(f"{ROOT}/tests/faulty_models.py:Faulty", f"{ROOT}/tests/faulty_models.py:ExitOnBuild")
    pipeline = load_pipeline(write_pipeline(text))
    runner = Runner(pipeline, jobs=2)
    exports = [g[0] for g in Plan(runner.plan.variants).artifact_groups()]
    executor = LocalExecutor(2)
    try:
        assert executor.model_sizes(runner.spec, {"small", "broken"}) == {}  # the sizing child died
        assert runner._order_exports(executor, exports) == exports  # nothing known: the plan's order
    finally:
        executor.close()


def test_sizes_rank_models_as_their_exports_took():
    """benchmarks/parallel_export.py measured resnet50 4.3 s, mobilenet_v3_small 3.4 s, resnet18 2.0 s
    (medians over four recipes): many small layers outweigh a few large ones."""
    import torch
    import torchvision

    from mlbench.run.schedule import size_of

    with torch.device("meta"):
        sizes = {name: size_of(getattr(torchvision.models, name)(weights=None))
                 for name in ("resnet18", "mobilenet_v3_small", "resnet50")}
    assert sorted(sizes, key=sizes.get, reverse=True) == ["resnet50", "mobilenet_v3_small", "resnet18"]
