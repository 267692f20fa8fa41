"""Stable digests of JSON values and of artifacts on disk.

Cache keys must not change between runs, machines or Python versions, so everything that feeds
a key goes through one canonical JSON form, and artifacts are hashed by content (a file's
bytes, or a directory's sorted manifest) rather than by path or timestamp.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import os
import stat
from pathlib import Path, PurePath
from typing import Any

from mlbench.errors import UserError

CHUNK_SIZE = 1 << 20  # 1 MiB: bounded memory for multi-GB weights
KEY_SCHEMA = 1  # bump when the meaning of artifact_key's inputs changes; invalidates every entry


def jsonable(obj: Any, _where: str = "$") -> Any:
    """Return ``obj`` as plain JSON types, or raise TypeError/ValueError naming the bad spot.

    Explicit rather than ``json.dumps(default=...)`` so that what is accepted is a short, fixed
    list: tuples become lists, paths become POSIX strings, enums become their values.
    """
    if obj is None or type(obj) is bool or type(obj) is int or type(obj) is str:
        return obj
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value, _where)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"canonical_json: non-finite float {obj!r} at {_where}")
        return float(obj)
    if isinstance(obj, PurePath):
        return obj.as_posix()
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, f"{_where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"canonical_json: dict key {k!r} at {_where} is {type(k).__name__}, not str"
                )
            out[str.__str__(k)] = jsonable(v, f"{_where}.{k}")
        return out
    raise TypeError(f"canonical_json: unsupported type {type(obj).__name__} at {_where}")


def canonical_json(obj: Any) -> str:
    """The one serialization that keys are hashed from: sorted keys, no spaces, UTF-8 text."""
    return json.dumps(
        jsonable(obj),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def sha256_json(obj: Any) -> str:
    """Hex SHA-256 of ``canonical_json(obj)`` encoded as UTF-8."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def artifact_key(inputs: dict[str, Any]) -> str:
    """Cache key for an artifact built from ``inputs`` (model digest, backend, options, versions).

    The schema number is part of the hashed value so a change in what the inputs mean can
    invalidate old entries without touching the inputs themselves.
    """
    if not isinstance(inputs, dict):
        raise TypeError(f"artifact_key: inputs must be a dict, not {type(inputs).__name__}")
    if "schema" in inputs:
        raise ValueError("artifact_key: 'schema' is reserved; it is added by artifact_key")
    return sha256_json({"schema": KEY_SCHEMA, **inputs})


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes (same value as ``sha256sum``), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            h.update(chunk)
    return h.hexdigest()


def _walk_tree(root: Path, rel: str = "") -> list[tuple[str, str, Path]]:
    """(relative POSIX path, kind, absolute path) for everything under ``root``; no symlinks."""
    out: list[tuple[str, str, Path]] = []
    with os.scandir(root / rel if rel else root) as it:
        for entry in it:
            name = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise UserError(
                    f"contains a symlink ({name}); mlbench hashes real files only", file=root
                )
            if stat.S_ISDIR(st.st_mode):
                out.append((name, "dir", Path(entry.path)))
                out.extend(_walk_tree(root, name))
            elif stat.S_ISREG(st.st_mode):
                out.append((name, "file", Path(entry.path)))
            else:
                raise UserError(f"contains a special file ({name}), not a regular file", file=root)
    return out


def sha256_tree(root: str | os.PathLike[str]) -> str:
    """Digest of a directory (e.g. an .mlpackage) from its contents alone.

    Hashes the canonical JSON of the sorted manifest ``[path, size, sha256]`` per file, plus
    ``[path]`` per directory so empty folders count. Timestamps, permissions and the folder's own
    name are ignored, so a copy or a rebuild with identical bytes has the same digest. Symlinks
    are refused: following them would hash something outside the artifact.
    """
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(f"sha256_tree: {root} is not a directory")
    manifest: list[list[Any]] = []
    for rel, kind, abspath in sorted(_walk_tree(root)):
        if kind == "dir":
            manifest.append([rel])
        else:
            manifest.append([rel, abspath.stat().st_size, sha256_file(abspath)])
    return sha256_json({"tree": manifest})


def sha256_path(path: str | os.PathLike[str]) -> str:
    """Digest of an artifact that may be a file (.onnx) or a directory (.mlpackage)."""
    p = Path(path)
    if p.is_dir():
        return sha256_tree(p)
    if p.is_file():
        return sha256_file(p)
    if not p.exists():
        raise FileNotFoundError(f"sha256_path: {p} does not exist")
    raise UserError("is neither a file nor a directory", file=p)


def path_size(path: str | os.PathLike[str]) -> int:
    """Total bytes of the regular files in a file or directory artifact (no symlinks)."""
    p = Path(path)
    if p.is_dir():
        return sum(a.stat().st_size for _, kind, a in _walk_tree(p) if kind == "file")
    return p.stat().st_size
