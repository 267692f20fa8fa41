"""The cache key is about the model that was named (issue 24, finding 1): everything that shapes the built
model enters it — the source, the kwargs given to the factory, the factory's file, the inputs — so two models
from one factory, or one model whose kwargs were edited, never share an export."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch

FACTORY = '''
import torch


class Scale(torch.nn.Module):
    """`factor` is a plain attribute: no weight, no repr, nothing a module digest would see."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) * self.factor


def make(factor: float = 1.0) -> Scale:
    return Scale(factor)
'''


def write_factory(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scale.py"
    path.write_text(FACTORY, encoding="utf-8")
    return path


def spec(source: str, **kwargs):
    from mlbench.config.models import ModelSpec

    return ModelSpec.model_validate({"name": "m", "source": source, "kwargs": kwargs,
                                     "inputs": [{"name": "x", "shape": [1, 4]}]})


def test_the_digest_follows_the_kwargs_the_source_and_the_inputs(tmp_path):
    from mlbench.sources.loading import load_model

    write_factory(tmp_path / "models")

    def digest(source="models/scale.py:make", base=tmp_path, seed=0, **kwargs) -> str:
        return load_model(spec(source, **kwargs), seed=seed, base_dir=base).digest

    one, three = digest(factor=1.0), digest(factor=3.0)
    assert one != three  # same weights, same structure, same repr: only the kwarg differs
    assert digest(factor=3.0) == three  # and the same kwargs give the same digest
    assert digest(source="scale.py:make", base=tmp_path / "models", factor=3.0) == three  # the file, not its path
    assert digest(source="models/scale.py:Scale", factor=3.0) != three  # another factory in the file
    assert digest(seed=1, factor=3.0) != three  # other weights and other input values


@pytest.mark.slow
def test_two_models_from_one_factory_never_share_an_export(write_pipeline, tmp_path):
    """Before: the second model hit the first one's .onnx and failed verification (max_rel 0.667)."""
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    write_factory(tmp_path)
    path = write_pipeline(textwrap.dedent("""\
        version: 1
        name: kwargs
        models:
          - {name: once, source: scale.py:make, kwargs: {factor: 1.0}, inputs: [{name: x, shape: [1, 4]}]}
          - {name: thrice, source: scale.py:make, kwargs: {factor: 3.0}, inputs: [{name: x, shape: [1, 4]}]}
        targets:
          - backend: onnxruntime
            precision: [float32]
        latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}
        report: {dir: out}
        history: {enabled: false}
        """))
    report = run(load_pipeline(path))
    by_model = {r.model: r for r in report.records}
    assert [(r.status, r.error) for r in by_model.values()] == [("ok", None), ("ok", None)]
    assert all(r.verify is not None and r.verify.passed for r in by_model.values())
    assert by_model["once"].artifact.key != by_model["thrice"].artifact.key
    assert not by_model["thrice"].artifact.cache_hit

    # the kwarg edited between runs: a new export, not the old model's
    path.write_text(path.read_text().replace("factor: 3.0", "factor: 5.0"))
    again = {r.model: r for r in run(load_pipeline(path)).records}
    assert again["once"].artifact.cache_hit and not again["thrice"].artifact.cache_hit
    assert again["thrice"].artifact.key not in {by_model["once"].artifact.key, by_model["thrice"].artifact.key}
    assert again["thrice"].verify.passed
