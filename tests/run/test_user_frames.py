"""A failing model says where: the innermost frame in the user's own files leads the error, in the console
line and in the record (`details.error_at`), whether the model fails while loading or while measured."""

from __future__ import annotations

import json

import pytest

from mlbench.cli.main import main
from mlbench.errors import frame_place, located_error, user_frame

MODELS = '''\
import torch


class Net(torch.nn.Module):
    def __init__(self, after: int = 0) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.after, self.calls = after, 0

    def forward(self, x):
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("the shapes do not fit")
        return self.linear(x)
'''

PIPELINE = """\
version: 1
name: frames
models:
  - name: at_load
    source: models.py:Net
    inputs: [{name: x, shape: [1, 8]}]
  - name: at_measure
    source: models.py:Net
    kwargs: {after: 1}
    inputs: [{name: x, shape: [1, 8]}]
targets:
  - backend: torch
latency: {warmup: 1, repeats: 3, min_time_s: 0.0, retry_s: 0}
report: {dir: out}
history: {enabled: false}
"""


@pytest.mark.torch
def test_a_model_raising_in_forward_is_reported_with_its_file_and_line(write_pipeline, tmp_path, capsys):
    (tmp_path / "models.py").write_text(MODELS)
    assert main(["run", str(write_pipeline(PIPELINE))]) == 1
    err = capsys.readouterr().err.splitlines()
    load = ("model: model does not run on its inputs (x[1, 8]): models.py:13 in forward: RuntimeError: the shapes "
            "do not fit")
    measure = "measure: models.py:13 in forward: RuntimeError: the shapes do not fit"
    assert err[0] == "2 variants to run"
    assert [line for line in err if line.startswith("[")] == [f"[1/2] at_load/torch/cpu/float32  failed  {load}",
                                                              f"[2/2] at_measure/torch/cpu/float32  failed  {measure}"]
    records = {r["variant_id"]: r for r in json.loads((tmp_path / "out" / "report.json").read_text())["records"]}
    where = {"file": str(tmp_path / "models.py"), "line": 13, "function": "forward"}
    assert records["at_load/torch/cpu/float32"]["error"] == load
    assert records["at_load/torch/cpu/float32"]["details"]["error_at"] == where
    assert records["at_measure/torch/cpu/float32"]["error"] == measure
    assert records["at_measure/torch/cpu/float32"]["details"]["error_at"] == where


def _helper() -> None:
    raise KeyError("deep")


def test_the_innermost_user_frame_of_the_innermost_exception_is_named(tmp_path):
    try:
        try:
            _helper()
        except KeyError as exc:
            raise ValueError("wrapped") from exc
    except ValueError as exc:
        frame = user_frame(exc)
        text = located_error(exc, base_dir=tmp_path)
    assert frame is not None and frame[0] == __file__ and frame[2] == "_helper"
    assert text == f"{__file__}:{frame[1]} in _helper: ValueError: wrapped"  # outside the pipeline's folder: in full


def test_library_frames_are_never_the_user_s():
    import json as library

    try:
        library.loads("{")
    except ValueError as exc:  # raised inside the standard library, from this file: this file is the place
        assert user_frame(exc)[2] == "test_library_frames_are_never_the_user_s"
    assert user_frame(ValueError("never raised")) is None
    assert frame_place(("/elsewhere/m.py", 3, "f"), "/tmp") == "/elsewhere/m.py:3 in f"


@pytest.mark.torch
def test_an_export_built_ahead_keeps_the_place_in_its_records(write_pipeline, tmp_path):
    """With --jobs 2, the artifacts are built in parallel before any measurement: a model failing there fails its
    variants later, with the same line and the same `error_at`."""
    pytest.importorskip("onnxruntime")
    (tmp_path / "models.py").write_text(MODELS)
    text = PIPELINE.split("  - name: at_measure")[0] + "targets:\n  - backend: onnxruntime\n    precision: " \
        "[float32, float16]\n" + PIPELINE.split("  - backend: torch\n")[1]
    assert main(["run", "-q", "--jobs", "2", str(write_pipeline(text))]) == 1
    records = json.loads((tmp_path / "out" / "report.json").read_text())["records"]
    assert [r["variant_id"] for r in records] == ["at_load/onnxruntime/float32/cpu", "at_load/onnxruntime/float16/cpu"]
    for record in records:
        assert record["error"] == ("model: model does not run on its inputs (x[1, 8]): models.py:13 in forward: "
                                   "RuntimeError: the shapes do not fit")
        assert record["details"]["error_at"] == {"file": str(tmp_path / "models.py"), "line": 13, "function": "forward"}


FORWARDING = '''\
import torch


class Net(torch.nn.Module):
    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, num_classes)


def make(**options):
    return Net(**options)
'''

ONE_MODEL = """\
version: 1
name: keywords
models:
  - name: net
    source: {source}
    kwargs: {{num_class: 3}}
    inputs: [{{name: x, shape: [1, 8]}}]
targets:
  - backend: torch
"""


@pytest.mark.torch
@pytest.mark.parametrize("source, place", [
    ("models.py:make", "models.py:11 in make: "),  # `**options` passed on: only the run can tell
    ("torchvision:resnet18", ""),  # validate imports no torchvision; the run does
])
def test_a_keyword_the_factory_passes_on_to_a_class_that_lacks_it_gets_a_did_you_mean(write_pipeline, tmp_path,
                                                                                      source, place):
    from mlbench.sources.loading import ModelLoadError, build_module
    from mlbench.validate import load_pipeline

    if source.startswith("torchvision"):
        pytest.importorskip("torchvision")
    (tmp_path / "models.py").write_text(FORWARDING)
    pipeline = load_pipeline(write_pipeline(ONE_MODEL.format(source=source)))  # validate lets it pass
    with pytest.raises(ModelLoadError) as info:
        build_module(pipeline.config.models[0], pipeline.base_dir)
    callee = "Net" if source.startswith("models") else "ResNet"
    assert str(info.value) == (f"building '{source}' failed: {place}TypeError: {callee}.__init__() got an "
                               "unexpected keyword argument 'num_class'; did you mean 'num_classes'?")
