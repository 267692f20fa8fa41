"""`mlbench validate` catches what the run would fail on or silently ignore, without running the user's code
or importing an ML framework: misspelled verify keys, exclude values naming nothing, model files and modules
that are not there, factories a file does not define. One line each, FILE:LINE:COL, with a did-you-mean;
exit 2 for validate and for run."""

from __future__ import annotations

import json
import subprocess
import sys

from mlbench.cli.main import main
from tests.conftest import ROOT

PIPELINE = """\
version: 1
name: names
models:
  - name: cnn
    source: {source}
    inputs:
      - {{name: image, shape: [1, 3, 32, 32]}}
targets:
  - backend: torch
    precision: [float32, bfloat16]
report: {{dir: out}}
"""


def write(tmp_path, source="models/tiny_cnn.py:TinyCNN", extra=""):
    (tmp_path / "models").mkdir(exist_ok=True)
    (tmp_path / "models" / "tiny_cnn.py").write_text((ROOT / "pipelines" / "models" / "tiny_cnn.py").read_text())
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(source=source) + extra, encoding="utf-8")
    return path


def validate(capsys, path) -> tuple[int, list[str]]:
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err.splitlines()


def test_a_misspelled_verify_key_is_refused_with_the_precision_it_meant(tmp_path, capsys):
    path = write(tmp_path, extra="verify: {tolerance: {flaot16: 1.0e-2, w4: 0.5}, min_snr_db: {float32: 50}}\n"
                                 "optimizations: {w4: {kind: palettize, nbits: 4}}\n")
    assert validate(capsys, path) == (2, [
        f"{path}:12:22: verify.tolerance.flaot16: 'flaot16' is neither a precision nor a recipe in optimizations; "
        "did you mean 'float16'? (precisions: float32, float16, bfloat16; recipes: w4)"])
    path = write(tmp_path, extra="verify: {min_snr_db: {palettize4: 20}}\n")
    assert validate(capsys, path) == (2, [
        f"{path}:12:23: verify.min_snr_db.palettize4: 'palettize4' is neither a precision nor a recipe in optimizations "
        "(precisions: float32, float16, bfloat16)"])


def test_an_exclude_naming_nothing_is_refused(tmp_path, capsys):
    path = write(tmp_path, extra="exclude:\n  - {model: [cnn, cnm], precision: bfloat61}\n  - {device: cuda}\n")
    assert validate(capsys, path) == (2, [
        f"{path}:13:19: exclude[0].model[1]: no variant can have model 'cnm', so this excludes nothing; "
        "did you mean 'cnn'? (model values here: cnn)",
        f"{path}:13:36: exclude[0].precision: no variant can have precision 'bfloat61', so this excludes nothing; "
        "did you mean 'bfloat16'? (precision values here: float32, bfloat16)"])  # a cuda device here: harmless


def test_a_missing_model_file_or_factory_is_found_before_the_run(tmp_path, capsys):
    path = write(tmp_path, source="models/tiny_cn.py:TinyCNN")
    line = (f"{path}:5:13: models[0].source: model file not found: {tmp_path / 'models' / 'tiny_cn.py'}; "
            "did you mean 'tiny_cnn.py'?")
    assert validate(capsys, path) == (2, [line])
    assert main(["run", str(path)]) == 2  # the run refuses it the same way, before any work
    assert capsys.readouterr().err.splitlines() == [line]
    assert not (tmp_path / "out").exists()
    path = write(tmp_path, source="models/tiny_cnn.py:TinyCN")
    assert validate(capsys, path) == (2, [
        f"{path}:5:13: models[0].source: tiny_cnn.py has no top-level definition of 'TinyCN'; did you mean 'TinyCNN'?"])


def test_a_file_is_read_not_run(tmp_path, capsys):
    """A factory defined under `if`/`try`, assigned or imported counts; a star import may define anything; a
    file is never executed (this one would write a marker)."""
    marker = tmp_path / "ran"
    (tmp_path / "m.py").write_text(
        f"open({str(marker)!r}, 'w')\ntry:\n    from os import path as Net\nexcept ImportError:\n    Net = None\n"
        "if True:\n    def make():\n        pass\n")
    path = write(tmp_path, source="m.py:make")
    assert main(["validate", "-q", str(path)]) == 0
    path = write(tmp_path, source="m.py:Net")
    assert main(["validate", "-q", str(path)]) == 0
    assert not marker.exists()
    (tmp_path / "star.py").write_text("from os.path import *\n")
    assert main(["validate", "-q", str(write(tmp_path, source="star.py:anything"))]) == 0
    (tmp_path / "broken.py").write_text("def f(:\n")
    code, lines = validate(capsys, write(tmp_path, source="broken.py:f"))
    assert code == 2 and lines == [f"{tmp_path / 'pipeline.yaml'}:5:13: models[0].source: broken.py line 1: "
                                   "invalid syntax: Python cannot read it"]


def test_a_misspelled_module_is_found_by_its_spec(tmp_path, capsys):
    path = write(tmp_path, source="json.decodr:JSONDecoder")
    assert validate(capsys, path) == (2, [
        f"{path}:5:13: models[0].source: package 'json' has no module 'decodr'; did you mean 'decoder'?"])
    path = write(tmp_path, source="jsn.decoder:JSONDecoder")
    assert validate(capsys, path) == (2, [
        f"{path}:5:13: models[0].source: no module named 'jsn' in the current folder or on the Python path; "
        "did you mean 'json'?"])
    path = write(tmp_path, source="json.decoder:JSONDecodr")
    assert validate(capsys, path) == (2, [
        f"{path}:5:13: models[0].source: decoder.py has no top-level definition of 'JSONDecodr'; "
        "did you mean 'JSONDecoder'?"])
    assert main(["validate", "-q", str(write(tmp_path, source="json.decoder:JSONDecoder"))]) == 0


def test_validate_imports_no_framework_and_no_user_package(tmp_path):
    """A package's __init__ is user code: validate walks search paths instead of importing it."""
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")
    (package / "nets.py").write_text("class Net:\n    pass\n")
    path = write(tmp_path, source="userpkg.nets:Net")
    script = ("import sys, json\nfrom mlbench.cli.main import main\ncode = main(['validate', '-q', sys.argv[1]])\n"
              "print(json.dumps([code, [m for m in ('torch', 'numpy', 'userpkg') if m in sys.modules]]))")
    result = subprocess.run([sys.executable, "-c", script, str(path)], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert json.loads(result.stdout.splitlines()[-1]) == [0, []], result.stderr
    (package / "nets.py").write_text("class Nett:\n    pass\n")
    result = subprocess.run([sys.executable, "-c", script, str(path)], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert json.loads(result.stdout.splitlines()[-1]) == [2, []]
    assert result.stderr.splitlines() == [
        f"{path}:5:13: models[0].source: nets.py has no top-level definition of 'Net'; did you mean 'Nett'?"]
