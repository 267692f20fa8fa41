"""A typo in a factory keyword (`num_class` for `num_classes`) is refused by `mlbench validate` from the
factory's signature, read with `ast` (nothing imported, nothing run): one FILE:LINE:COL line at the key, with
a did-you-mean. What the file does not write down for certain (**kwargs, an inherited __init__, a decorator)
passes, for the run to judge."""

from __future__ import annotations

import textwrap

from mlbench.cli.main import main

MODELS = '''\
import torch


class Net(torch.nn.Module):
    def __init__(self, num_classes: int = 4, *, width: int = 8) -> None:
        super().__init__()


def build(depth, /, num_classes=4):
    return Net(num_classes)


def loose(**options):
    return Net()


class Inherited(Net):
    pass
'''

PIPELINE = """\
version: 1
name: kwargs
models:
  - name: net
    source: {source}
    kwargs: {kwargs}
    inputs: [{{name: x, shape: [1, 8]}}]
targets:
  - backend: torch
"""


def validate(capsys, tmp_path, source: str, kwargs: str, models: str = MODELS) -> tuple[int, list[str]]:
    (tmp_path / "models.py").write_text(models)
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(source=source, kwargs=kwargs))
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err.splitlines()


def test_a_misspelled_class_keyword_is_one_line_at_the_key(tmp_path, capsys):
    code, err = validate(capsys, tmp_path, "models.py:Net", "{num_class: 10}")
    assert code == 2
    assert err == [f"{tmp_path / 'pipeline.yaml'}:6:14: models[0].kwargs.num_class: 'Net' in models.py has no "
                   "parameter 'num_class'; did you mean 'num_classes'? (it takes: num_classes, width)"]


def test_a_function_s_positional_only_parameter_takes_no_keyword(tmp_path, capsys):
    code, err = validate(capsys, tmp_path, "models.py:build", "{depth: 2, num_classes: 3}")
    assert code == 2
    assert err == [f"{tmp_path / 'pipeline.yaml'}:6:14: models[0].kwargs.depth: 'build' in models.py has no "
                   "parameter 'depth' (it takes: num_classes)"]


def test_a_module_source_s_factory_is_read_from_its_file(tmp_path, capsys, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "nets.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)  # a module source is found from the current folder, as the run's child finds it
    code, err = validate(capsys, tmp_path, "pkg.nets:Net", "{widht: 3}")
    assert code == 2
    assert err == [f"{tmp_path / 'pipeline.yaml'}:6:14: models[0].kwargs.widht: 'Net' in nets.py has no "
                   "parameter 'widht'; did you mean 'width'? (it takes: num_classes, width)"]


def test_keywords_the_file_does_not_pin_down_pass(tmp_path, capsys):
    for source in ("models.py:loose", "models.py:Inherited"):  # **options; an __init__ from elsewhere
        assert validate(capsys, tmp_path, source, "{anything: 1}") == (0, [])
    decorated = MODELS + textwrap.dedent('''
        import dataclasses


        @dataclasses.dataclass
        class Config:
            size: int = 1
        ''')
    assert validate(capsys, tmp_path, "models.py:Config", "{size: 2}", decorated) == (0, [])
    assert validate(capsys, tmp_path, "models.py:Net", "{num_classes: 10, width: 2}") == (0, [])
