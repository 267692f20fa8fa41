"""mlbench.config.yaml_positions: plain data with positions, and one exact line for every refusal.

Every test runs on both PyYAML backends (libyaml's CSafeLoader and the pure-Python SafeLoader)
because the fast one is used when installed and the other is the fallback.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from mlbench.config import yaml_positions as loader
from mlbench.config.yaml_positions import LoadedYaml, load_yaml, load_yaml_text
from mlbench.errors import UserError
from tests.conftest import ROOT

BACKENDS = ["C", "Py"] if hasattr(yaml, "CSafeLoader") else ["Py"]


@pytest.fixture(autouse=True, params=BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setattr(loader, "_Loader", yaml.CSafeLoader if request.param == "C"
                        else yaml.SafeLoader)
    return request.param


def err(text: str | bytes, path: str = "p.yaml") -> str:
    with pytest.raises(UserError) as info:
        load_yaml_text(text, path)
    return str(info.value)


PIPELINE = """\
version: 1
name: demo   # a comment
targets:
  - model: m.pt
    precision: [fp16, int8]
    runs: 50
    tol: 1.0e-3
    ok: true
    note: ~
    when: 2024-01-01
    big: .inf
    nan: .nan
"""


# ---------------------------------------------------------------- loading and positions

def test_loads_plain_data_in_order():
    doc = load_yaml_text(PIPELINE, "p.yaml")
    assert doc.path == Path("p.yaml")
    assert doc.data["version"] == 1 and doc.data["name"] == "demo"
    t = doc.data["targets"][0]
    assert list(t) == ["model", "precision", "runs", "tol", "ok", "note", "when", "big", "nan"]
    assert t["precision"] == ["fp16", "int8"]
    assert (t["runs"], t["tol"], t["ok"], t["note"]) == (50, 0.001, True, None)
    assert t["when"] == "2024-01-01" and type(t["when"]) is str  # timestamps stay text
    assert t["big"] == math.inf and math.isnan(t["nan"])


def test_positions_of_values_and_keys():
    doc = load_yaml_text(PIPELINE, "p.yaml")
    assert doc.locate(()) == (1, 1)
    assert doc.locate(["version"]) == (1, 10)
    assert doc.locate(("version",), key=True) == (1, 1)
    assert doc.locate(("targets", 0)) == (4, 5)
    assert doc.locate(("targets", 0, "precision")) == (5, 16)
    assert doc.locate(("targets", 0, "precision", 1)) == (5, 23)
    assert doc.locate(("targets", 0, "precision"), key=True) == (5, 5)
    assert doc.locate(("targets", 0, "tol"), key=True) == (7, 5)


def test_locate_falls_back_to_deepest_known_prefix():
    doc = load_yaml_text(PIPELINE, "p.yaml")
    assert doc.locate(("targets", 0, "missing", 3)) == (4, 5)
    assert doc.locate(("targets", 7)) == (4, 3)  # the list itself
    assert doc.locate(("nope",), key=True) == (1, 1)
    assert doc.locate(("targets", 0), key=True) == (4, 5)  # a list item has no key: its value
    assert LoadedYaml(Path("x"), {}).locate(("a",)) is None


def test_load_yaml_reads_file_and_drops_bom(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_bytes(b"\xef\xbb\xbfname: caf\xc3\xa9\n")
    doc = load_yaml(f)
    assert doc.data == {"name": "café"} and doc.path == f
    assert doc.locate(("name",)) == (1, 7)
    assert load_yaml(str(f)).data == {"name": "café"}


def test_aliases_and_merge_keys_are_copied_with_positions():
    doc = load_yaml_text("base: &b {a: 1, b: [x]}\nd:\n  <<: *b\n  b: 3\ne: *b\n", "p.yaml")
    assert doc.data == {"base": {"a": 1, "b": ["x"]}, "d": {"a": 1, "b": 3},
                        "e": {"a": 1, "b": ["x"]}}
    assert doc.data["e"] is not doc.data["base"]
    assert doc.data["e"]["b"] is not doc.data["base"]["b"]
    assert doc.locate(("e",)) == (5, 4)  # the alias site
    assert doc.locate(("e", "a")) == (1, 14)  # inside: where the anchored text is
    assert doc.locate(("d", "b"), key=True) == (4, 3)
    assert doc.locate(("d", "a"), key=True) == (1, 11)


def test_merge_list_earlier_wins_explicit_beats_all():
    doc = load_yaml_text("a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\n"
                         "c: {<<: [*a, *b], z: 3}\n", "p.yaml")
    assert doc.data["c"] == {"x": 1, "y": 1, "z": 3}


def test_core_tags_allowed_and_quoted_keys():
    doc = load_yaml_text("a: !!str 123\nb: !!float 1\n'on': x\n\"1\": y\nc: !!int '7'\n", "p")
    assert doc.data == {"a": "123", "b": 1.0, "on": "x", "1": "y", "c": 7}


# ---------------------------------------------------------------- reading the file

def test_missing_file(tmp_path):
    f = tmp_path / "nope.yaml"
    with pytest.raises(UserError) as info:
        load_yaml(f)
    assert str(info.value) == f"{f}: cannot read: no such file or directory"


def test_directory(tmp_path):
    with pytest.raises(UserError) as info:
        load_yaml(tmp_path)
    assert str(info.value) == f"{tmp_path}: cannot read: is a directory"


def test_parent_is_a_file(tmp_path):
    f = tmp_path / "file" / "p.yaml"
    f.parent.write_text("x")
    with pytest.raises(UserError) as info:
        load_yaml(f)
    assert str(info.value) == f"{f}: cannot read: not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("a: 1\n")
    f.chmod(0)
    with pytest.raises(UserError) as info:
        load_yaml(f)
    assert str(info.value) == f"{f}: cannot read: permission denied"


def test_too_large(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_bytes(b"a: 1\n" + b"#" * (5 * 1024 * 1024))
    with pytest.raises(UserError) as info:
        load_yaml(f)
    assert str(info.value) == f"{f}: the file is larger than 5 MB; a pipeline file is a few KB"
    assert err("#" * (5 * 1024 * 1024 + 1)) == (
        "p.yaml: the file is larger than 5 MB; a pipeline file is a few KB")


def test_invalid_utf8():
    assert err(b"a: 1\nb: caf\xc3\xa9 \xff\n") == "p.yaml:2:9: not valid UTF-8: byte 0xff at offset 14"
    assert err(b"\xff\xfea\x00:\x00") == "p.yaml:1:1: the file is UTF-16; save it as UTF-8"


def test_control_character():
    assert err("a: 1\nb: x\x07y\n") == (
        "p.yaml:2:5: non-printable character U+0007 is not allowed in YAML")


# ---------------------------------------------------------------- YAML structure

def test_syntax_error_is_one_line_with_pyyaml_problem(backend):
    expected = {"C": "p.yaml:2:5: mapping values are not allowed in this context",
                "Py": "p.yaml:2:5: mapping values are not allowed here"}
    assert err("a: 1\nb: c: d\n") == expected[backend]


def test_syntax_error_mentions_context_on_another_line():
    assert err("a: 1\nb\n") == (
        "p.yaml:3:1: could not find expected ':' (while scanning a simple key at line 2)")


def test_tab_indentation():
    assert err("a:\n\tb: 1\n") == (
        "p.yaml:2:1: found a tab, which cannot start any token; indent YAML with spaces")


def test_multiple_documents():
    assert err("a: 1\n---\nb: 2\n") == (
        "p.yaml:2:1: a second YAML document starts here; a pipeline file holds exactly one")
    assert err("---\na: 1\n...\n---\n") == (
        "p.yaml:4:1: a second YAML document starts here; a pipeline file holds exactly one")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n  # another\n", "---\n"])
def test_empty(text):
    assert err(text) == "p.yaml: the file is empty; a pipeline starts with 'version: 1'"


def test_top_level_not_a_mapping():
    assert err("# c\n- a\n- b\n") == ("p.yaml:2:1: the top level must be a mapping "
                                      "(a pipeline starts with 'version: 1'), not a list")
    assert err("\n  hello\n") == ("p.yaml:2:3: the top level must be a mapping "
                                  "(a pipeline starts with 'version: 1'), not a single value")


def test_duplicate_keys():
    assert err("version: 1\n\nname: a\nname: b\n") == (
        "p.yaml:4:1: duplicate key 'name' (first at line 3)")
    assert err("t:\n  - {x: 1,\n     x: 2}\n") == "p.yaml:3:6: duplicate key 'x' (first at line 2)"


def test_keys_must_be_strings():
    assert err("a: 1\n? [a, b]\n: 2\n") == "p.yaml:2:3: mapping keys must be strings, not a list"
    assert err("? {a: 1}\n: 2\n") == "p.yaml:1:3: mapping keys must be strings, not a mapping"
    assert err("a:\n  1: x\n") == (
        "p.yaml:2:3: mapping keys must be strings; 1 reads as an integer here (quote it: '1')")
    assert err("on: push\n") == (
        "p.yaml:1:1: mapping keys must be strings; on reads as a boolean here (quote it: 'on')")
    assert err("1.5: x\n") == (
        "p.yaml:1:1: mapping keys must be strings; 1.5 reads as a number here (quote it: '1.5')")
    assert err("~: x\n") == (
        "p.yaml:1:1: mapping keys must be strings; ~ reads as null here (quote it: '~')")
    assert err("? \n: x\n") == "p.yaml:1:2: mapping keys must be strings; this key is empty (null)"


# ---------------------------------------------------------------- tags

NOT_PLAIN = "is not allowed; a pipeline file holds plain data (strings, numbers, booleans, lists, mappings)"


def test_python_tag_is_refused_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    f = tmp_path / "p.yaml"
    f.write_text(f'version: 1\nrun: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(UserError) as info:
        load_yaml(f)
    assert str(info.value) == f"{f}:2:6: tag !!python/object/apply:os.system {NOT_PLAIN}"
    assert not marker.exists()


@pytest.mark.parametrize("text, place, tag", [
    ("!!python/name:os.system\n", "1:1", "!!python/name:os.system"),
    ("a: !!python/object:os.stat_result {}\n", "1:4", "!!python/object:os.stat_result"),
    ("a:\n  b: !foo 1\n", "2:6", "!foo"),
    ("a: !foo [1]\n", "1:4", "!foo"),
    ("a: !!set {x, y}\n", "1:4", "!!set"),
    ("a: !!binary aGk=\n", "1:4", "!!binary"),
    ("a: !!map [1]\n", "1:4", "!!map"),
    ("a: !!seq x\n", "1:4", "!!seq"),
])
def test_other_tags_refused(text, place, tag):
    assert err(text) == f"p.yaml:{place}: tag {tag} {NOT_PLAIN}"


def test_bad_explicit_scalar():
    assert err("a: !!int abc\n") == "p.yaml:1:4: 'abc' is not a valid !!int"
    assert err("a: !!bool maybe\n") == "p.yaml:1:4: 'maybe' is not a valid !!bool"


# ---------------------------------------------------------------- limits and aliases

def billion_laughs(levels: int = 9) -> str:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, cur in zip("abcdefghij", "bcdefghijk"[: levels - 1]):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_fails_fast_and_small():
    tracemalloc.start()
    start = time.perf_counter()
    msg = err(billion_laughs())
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # 12,352 nodes before line 5's aliases, 11,111 per *d: the 8th crosses 100,000
    assert msg == ("p.yaml:5:36: too many nodes after expanding aliases (limit 100000): "
                   "an alias bomb?")
    assert elapsed < 1.0 and peak < 5_000_000


def test_many_values_without_aliases():
    assert err("a: [" + "0," * 100_000 + "0]\n") == (
        "p.yaml:1:199999: too many values (limit 100000); a pipeline file is a few KB")


def test_alias_errors():
    assert err("a: *z\n") == "p.yaml:1:4: unknown alias *z: no anchor &z before it"
    assert err("a: &a [1, *a]\n") == "p.yaml:1:11: alias *a refers to a node that contains it"
    assert err("a: &x 1\nb: &x 2\n") == "p.yaml:2:4: duplicate anchor &x (first at line 1)"
    assert err("a: &a 1\nb: {<<: *a}\n") == (
        "p.yaml:2:9: '<<' (merge) needs a mapping or a list of mappings")


def test_deep_block_nesting():
    text = "".join("  " * i + f"k{i}:\n" for i in range(80))
    assert err(text) == "p.yaml:65:129: nesting is deeper than 64 levels"
    ok = "".join("  " * i + f"k{i}:\n" for i in range(64))
    assert load_yaml_text(ok, "p").locate(("k0",) * 1) == (2, 3)


def test_deep_flow_nesting_is_one_line_not_recursion_error(backend):
    # libyaml stops at its own cap (1000 levels) first; both read as the same error
    col = {"C": 1003, "Py": 67}[backend]
    assert err("a: " + "[" * 10_000) == f"p.yaml:1:{col}: nesting is deeper than 64 levels"
    # libyaml scans ahead to its cap before the first event; Python sees the list first
    assert err("[" * 10_000) == {
        "C": "p.yaml:1:1001: nesting is deeper than 64 levels",
        "Py": "p.yaml:1:1: the top level must be a mapping (a pipeline starts with "
              "'version: 1'), not a list"}[backend]


def test_deep_nesting_through_aliases():
    text = "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    assert err(text) == "p.yaml:2:34: nesting is deeper than 64 levels after expanding aliases"


def test_does_not_import_torch(backend):
    if backend == "Py":
        pytest.skip("one run is enough")
    code = "import sys, mlbench.config.yaml_positions; sys.exit('torch' in sys.modules)"
    root = ROOT
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
