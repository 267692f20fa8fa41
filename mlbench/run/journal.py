"""The run journal: one JSON line per finished piece of work, flushed to disk as it completes.

A `kill -9` at any moment loses no finished record: each line is written whole and fsynced before
the run goes on, and a line cut short by a crash is ignored when the journal is read back.
`mlbench run --resume` reads it to skip the variants it already holds.

Lines: {"run": {...}} first (run id, pipeline sha256), then in completion order
{"started": {"variant_id", "fingerprint", "at"}} as a measurement begins, {"record": RunRecord,
"fingerprint": ...} as it ends, and {"artifact": {"key": ..., "details": ...}};
{"resumed": {...}} marks a restart (with the pipeline's sha256 at that time). A variant started and
never recorded was being measured when the run died (`JournalContents.unfinished`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbench.errors import UserError
from mlbench.records import RunRecord


@dataclass
class JournalContents:
    header: dict[str, Any]
    records: dict[str, RunRecord] = field(default_factory=dict)  # variant id → its latest record
    fingerprints: dict[str, str | None] = field(default_factory=dict)  # variant id → what shaped its latest record
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    unfinished: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    """Variant id → (fingerprint, starts in a row with no record after them): the run died measuring it."""
    skipped_lines: int = 0


HEADER_FIELDS = ("run_id", "created")  # what a resumed run takes from the header: each a string


def open_own(path: Path, flags: int) -> int:
    """A descriptor for a regular file of mlbench's own, opened without following a symlink and without
    waiting on a FIFO; a symlink or a special file there is refused in one line (nothing outside the report
    folder is ever written or read through it)."""
    fd: int | None
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as exc:
        if path.is_symlink():
            raise UserError("is a symlink; mlbench writes only its own files in the report folder: remove it",
                            file=path) from None
        if exc.errno != errno.ENXIO:  # ENXIO: a FIFO nobody reads
            raise
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise UserError("is not a regular file; mlbench writes only its own files in the report folder: remove it",
                        file=path)
    return fd


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _append(self, entry: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:
            with os.fdopen(open_own(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "w",
                           encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:  # a full disk: the error names the journal, whichever call said it
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new journal: the header goes to a temporary file beside it, renamed over the old one
        (whatever was there, a symlink included, is replaced, never written through)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o666 & ~_umask())
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"run": header}, separators=(",", ":")) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:  # any failure, Ctrl-C included: no half-written journal is left, and it re-raises
            Path(tmp).unlink(missing_ok=True)
            raise

    def resumed(self, info: dict[str, Any]) -> None:
        self._append({"resumed": info})

    def started(self, variant_id: str, fingerprint: str | None, at: str) -> None:
        self._append({"started": {"variant_id": variant_id, "fingerprint": fingerprint, "at": at}})

    def record(self, record: RunRecord, fingerprint: str | None = None) -> None:
        self._append({"record": json.loads(record.model_dump_json()), "fingerprint": fingerprint})

    def artifact(self, key: str, details: dict[str, Any]) -> None:
        self._append({"artifact": {"key": key, "details": details}})

    def load(self) -> JournalContents:
        """What the journal holds; a line cut short by a crash (or garbage) is skipped and counted."""
        try:
            with os.fdopen(open_own(self.path, os.O_RDONLY), "rb") as handle:
                text = handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise UserError("no journal to resume from; run without --resume", file=self.path) from None
        contents: JournalContents | None = None
        skipped = 0
        for number, line in enumerate(text.splitlines(), 1):
            try:
                entry = json.loads(line)
                if "run" in entry and contents is None:
                    contents = JournalContents(header=_checked_header(entry["run"], self.path, number))
                elif contents is not None and "record" in entry:
                    record = _read_record(entry["record"], contents)
                    contents.records[record.variant_id] = record
                    contents.fingerprints[record.variant_id] = entry.get("fingerprint")
                    contents.unfinished.pop(record.variant_id, None)
                elif contents is not None and "started" in entry:
                    started = entry["started"]
                    _, count = contents.unfinished.get(started["variant_id"], (None, 0))
                    contents.unfinished[started["variant_id"]] = (started.get("fingerprint"), count + 1)
                elif contents is not None and "resumed" in entry:
                    if entry["resumed"].get("pipeline_sha256"):
                        contents.header["pipeline_sha256"] = entry["resumed"]["pipeline_sha256"]
                elif contents is not None and "artifact" in entry:
                    contents.artifacts[entry["artifact"]["key"]] = entry["artifact"]["details"]
                elif "resumed" not in entry:
                    skipped += 1
            except (ValueError, KeyError, TypeError):
                skipped += 1
        if contents is None:
            raise UserError("the journal has no run header; run without --resume", file=self.path)
        contents.skipped_lines = skipped
        return contents


def _checked_header(header: Any, path: Path, line: int) -> dict[str, Any]:
    """The run header, or one UserError line: a damaged header cannot say which run this journal is."""
    if not isinstance(header, dict):
        why = f"a {type(header).__name__}, not an object"
    else:
        missing = [name for name in HEADER_FIELDS if not isinstance(header.get(name), str)]
        if not missing:
            return header
        why = f"no {' or '.join(missing)}"
    raise UserError(f"the run header is damaged ({why}); run without --resume to start over", file=path, line=line)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read_record(data: Any, contents: JournalContents) -> RunRecord:
    """The journal's record; one that no longer reads (e.g. written before inf was kept as data) still
    says its variant finished, so a resume measures it again instead of counting it as a crash."""
    try:
        return RunRecord.model_validate(data)
    except ValueError:
        if isinstance(data, dict) and isinstance(data.get("variant_id"), str):
            contents.unfinished.pop(data["variant_id"], None)
        raise
