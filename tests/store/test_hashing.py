"""Digests feed cache keys: their exact form is pinned so any change is a deliberate one."""

from __future__ import annotations

import enum
import hashlib
import json
import os
from pathlib import Path, PurePosixPath

import pytest

from mlbench.errors import UserError
from mlbench.store.hashing import (
    artifact_key,
    canonical_json,
    path_size,
    sha256_file,
    sha256_json,
    sha256_path,
    sha256_tree,
)

GOLDEN_INPUTS = {
    "backend": "coreml",
    "model_digest": "abc",
    "options": {"precision": "float16", "optimize": None},
    "versions": {"coremltools": "9.0", "torch": "2.14.1", "mlbench": "0.1.0"},
}
# Checked by hand: printf '%s' "$GOLDEN_CANONICAL" | sha256sum
GOLDEN_CANONICAL = (
    '{"backend":"coreml","model_digest":"abc","options":{"optimize":null,"precision":"float16"},'
    '"schema":1,"versions":{"coremltools":"9.0","mlbench":"0.1.0","torch":"2.14.1"}}'
)
GOLDEN_KEY = "f1168a7bd593aa9ed83824b6177bf49ca738d1607088cdf7cd545d7d70ec6569"


def test_golden_artifact_key() -> None:
    assert canonical_json({"schema": 1, **GOLDEN_INPUTS}) == GOLDEN_CANONICAL
    assert hashlib.sha256(GOLDEN_CANONICAL.encode("utf-8")).hexdigest() == GOLDEN_KEY
    assert artifact_key(GOLDEN_INPUTS) == GOLDEN_KEY


def test_key_ignores_dict_order_but_not_values() -> None:
    reordered = dict(reversed(list(GOLDEN_INPUTS.items())))
    assert artifact_key(reordered) == GOLDEN_KEY
    changed = {**GOLDEN_INPUTS, "options": {"precision": "float32", "optimize": None}}
    assert artifact_key(changed) != GOLDEN_KEY


def test_artifact_key_reserves_schema() -> None:
    with pytest.raises(ValueError, match="'schema' is reserved"):
        artifact_key({"schema": 2})
    with pytest.raises(TypeError):
        artifact_key(["not", "a", "dict"])  # type: ignore[arg-type]


def test_canonical_json_form() -> None:
    assert canonical_json({"b": 1, "a": [1.5, True, None], "é": "ü"}) == (
        '{"a":[1.5,true,null],"b":1,"é":"ü"}'
    )
    assert canonical_json((1, (2, 3))) == "[1,[2,3]]"
    assert canonical_json({"p": PurePosixPath("/m/model.onnx")}) == '{"p":"/m/model.onnx"}'

    class Precision(str, enum.Enum):
        FP16 = "float16"

    assert canonical_json({"precision": Precision.FP16}) == '{"precision":"float16"}'
    assert sha256_json({"precision": Precision.FP16}) == sha256_json({"precision": "float16"})


@pytest.mark.parametrize(
    ("value", "exc", "message"),
    [
        ({"x": {1, 2}}, TypeError, r"unsupported type set at \$\.x"),
        ({"x": [object()]}, TypeError, r"unsupported type object at \$\.x\[0\]"),
        ({1: "a"}, TypeError, r"dict key 1 at \$ is int, not str"),
        ({"x": float("nan")}, ValueError, r"non-finite float nan at \$\.x"),
        ({"x": float("inf")}, ValueError, r"non-finite float inf"),
        (b"bytes", TypeError, r"unsupported type bytes"),
    ],
)
def test_canonical_json_refuses(value: object, exc: type, message: str) -> None:
    with pytest.raises(exc, match=message):
        canonical_json(value)


def test_sha256_json_is_utf8_of_canonical() -> None:
    obj = {"name": "modèle", "n": 3}
    expected = hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()
    assert sha256_json(obj) == expected


def test_sha256_file_matches_hashlib_across_chunks(tmp_path: Path) -> None:
    data = os.urandom((1 << 20) * 2 + 12345)  # spans several 1 MiB chunks
    f = tmp_path / "model.onnx"
    f.write_bytes(data)
    assert sha256_file(f) == hashlib.sha256(data).hexdigest()
    assert sha256_path(f) == hashlib.sha256(data).hexdigest()
    assert path_size(f) == len(data)


def _make_tree(root: Path) -> None:
    (root / "Data" / "weights").mkdir(parents=True)
    (root / "Manifest.json").write_bytes(b'{"v":1}')
    (root / "Data" / "weights" / "weight.bin").write_bytes(b"\x00\x01\x02")
    (root / "Data" / "empty").mkdir()


def test_sha256_tree_golden_form(tmp_path: Path) -> None:
    pkg = tmp_path / "model.mlpackage"
    _make_tree(pkg)
    manifest = [
        ["Data"],
        ["Data/empty"],
        ["Data/weights"],
        ["Data/weights/weight.bin", 3, hashlib.sha256(b"\x00\x01\x02").hexdigest()],
        ["Manifest.json", 7, hashlib.sha256(b'{"v":1}').hexdigest()],
    ]
    text = json.dumps({"tree": manifest}, sort_keys=True, separators=(",", ":"))
    assert sha256_tree(pkg) == hashlib.sha256(text.encode()).hexdigest()
    assert sha256_path(pkg) == sha256_tree(pkg)
    assert path_size(pkg) == 10


def test_sha256_tree_depends_on_content_not_location(tmp_path: Path) -> None:
    a, b = tmp_path / "a.mlpackage", tmp_path / "copy" / "b.mlpackage"
    _make_tree(a)
    _make_tree(b)
    os.utime(b / "Manifest.json", (1, 1))
    assert sha256_tree(a) == sha256_tree(b)

    (b / "Data" / "weights" / "weight.bin").write_bytes(b"\x00\x01\x03")
    assert sha256_tree(a) != sha256_tree(b)

    _make_tree(c := tmp_path / "c.mlpackage")
    (c / "Data" / "weights" / "weight.bin").rename(c / "Data" / "weights" / "renamed.bin")
    assert sha256_tree(a) != sha256_tree(c)

    _make_tree(d := tmp_path / "d.mlpackage")
    (d / "Data" / "empty").rmdir()
    assert sha256_tree(a) != sha256_tree(d)


def test_sha256_tree_refuses_symlinks(tmp_path: Path) -> None:
    pkg = tmp_path / "model.mlpackage"
    _make_tree(pkg)
    (pkg / "Data" / "link.bin").symlink_to(pkg / "Manifest.json")
    with pytest.raises(UserError) as info:
        sha256_path(pkg)
    assert str(info.value) == (
        f"{pkg}: contains a symlink (Data/link.bin); mlbench hashes real files only"
    )


def test_sha256_path_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        sha256_path(tmp_path / "nope.onnx")
