"""One-line errors stay on one line: a newline in a path (or a place) is written as `\\n`."""

from __future__ import annotations

from mlbench.cli.main import main
from mlbench.errors import UserError


def test_a_newline_in_a_path_is_escaped_in_the_one_line_error(tmp_path, capsys):
    path = tmp_path / "bad\nname\r.yaml"
    path.write_text("version: 1\nname: x\nmodels: []\ntargets: []\nbogus: 1\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    shown = str(path).replace("\n", "\\n").replace("\r", "\\r")
    assert err.startswith(f"{shown}:") and err.count("\n") == len(err.splitlines()) and "\r" not in err
    assert all(line.startswith(shown) for line in err.splitlines())


def test_user_error_escapes_breaks_in_its_file_and_place():
    error = UserError("what went wrong", file="a\nb.yaml", line=3, col=4, where="models[0]\nsource")
    assert str(error) == "a\\nb.yaml:3:4: models[0]\\nsource: what went wrong"
