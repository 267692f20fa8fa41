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

import json
import os
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


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _append(self, entry: dict[str, Any], mode: str = "a") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with open(self.path, mode, encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new journal (an old one is replaced)."""
        self._append({"run": header}, mode="w")

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
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise UserError("no journal to resume from; run without --resume", file=self.path) from None
        contents: JournalContents | None = None
        skipped = 0
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                if "run" in entry and contents is None:
                    contents = JournalContents(header=entry["run"])
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


def _read_record(data: Any, contents: JournalContents) -> RunRecord:
    """The journal's record; one that no longer reads (e.g. written before inf was kept as data) still
    says its variant finished, so a resume measures it again instead of counting it as a crash."""
    try:
        return RunRecord.model_validate(data)
    except ValueError:
        if isinstance(data, dict) and isinstance(data.get("variant_id"), str):
            contents.unfinished.pop(data["variant_id"], None)
        raise
