"""The README's Python API example runs as written (on the tiny pipeline instead of the quickstart) and prints
figures a reader can use: `0.123 ms (measured)`, never a pydantic repr."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.conftest import ROOT


@pytest.mark.torch
def test_the_readme_python_api_example_prints_values(write_pipeline, tiny_pipeline_text, monkeypatch):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = readme.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert '"pipelines/quickstart.yaml"' in code
    path = write_pipeline(tiny_pipeline_text + "history: {enabled: false}\n")
    monkeypatch.chdir(path.parent)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("pipelines/quickstart.yaml", str(path)), "README.md", "exec"), {})
    assert re.fullmatch(r"tiny_cnn/torch/cpu/float32 ok \d+\.\d{3} ms \(measured\) \n", out.getvalue()), out.getvalue()
