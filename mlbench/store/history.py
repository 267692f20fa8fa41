"""Run history: every finished run appended to an embedded SQLite database, never rewritten.

Where: the pipeline's `history: {path: ...}` (relative to the file) if set, else
`$MLBENCH_HISTORY`, else `mlbench-history.sqlite` beside the default cache folder
(`~/.cache/mlbench-history.sqlite` on Linux) — beside it, not in it, so `mlbench cache clear`
never touches history.

Schema: versioned by the `schema_migrations` table; `MIGRATIONS` are applied in order, each in
one transaction, when a database is opened. Triggers refuse UPDATE and DELETE on every table:
a later run (or a bug) can only add rows. Each run keeps its whole report (zlib-compressed JSON,
raw samples included) so `mlbench compare last ...` has what a report file would have, plus one
row per record and per metric for trend queries.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from mlbench.errors import UserError
from mlbench.records import RunReport

log = logging.getLogger("mlbench.store.history")

TABLES = ("runs", "records", "metrics")

MIGRATIONS: tuple[str, ...] = (
    # 1: runs, their records and every metric
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        created TEXT NOT NULL,
        finished TEXT,
        recorded TEXT NOT NULL,
        pipeline_name TEXT NOT NULL,
        pipeline_path TEXT NOT NULL,
        pipeline_sha256 TEXT NOT NULL,
        git_commit TEXT,
        machine_key TEXT NOT NULL,
        machine_json TEXT NOT NULL,
        mlbench_version TEXT NOT NULL,
        summary_json TEXT NOT NULL,
        report_zlib BLOB NOT NULL
    );
    CREATE TABLE records (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        variant_id TEXT NOT NULL,
        model TEXT NOT NULL,
        backend TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        PRIMARY KEY (run_id, variant_id)
    );
    CREATE TABLE metrics (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        variant_id TEXT NOT NULL,
        name TEXT NOT NULL,
        value REAL,
        unit TEXT NOT NULL,
        source TEXT,
        reason TEXT,
        PRIMARY KEY (run_id, variant_id, name)
    );
    """,
    # 2: trend queries by metric, and append-only enforced by the database itself
    """
    CREATE INDEX metrics_by_name ON metrics (name, variant_id);
    CREATE INDEX runs_by_pipeline ON runs (pipeline_name, created);
    """
    + "".join(
        f"""
    CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
        BEGIN SELECT RAISE(ABORT, 'mlbench history is append-only'); END;
    CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
        BEGIN SELECT RAISE(ABORT, 'mlbench history is append-only'); END;
    """
        for table in TABLES
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(UserError):
    """A history database that cannot be used (unreadable, newer schema, unknown run)."""


def default_history_path() -> Path:
    """`$MLBENCH_HISTORY`, else `mlbench-history.sqlite` beside the default cache folder."""
    env = os.environ.get("MLBENCH_HISTORY")
    if env:
        return Path(env).expanduser()
    from mlbench.store.cache import default_cache_dir

    return default_cache_dir().parent / "mlbench-history.sqlite"


def machine_key(machine: dict) -> str:
    """One string per kind of machine: OS, architecture, CPU model and count (not the hostname)."""
    from mlbench.machine import machine_key as key

    return json.dumps(list(key(machine)))


def git_commit(path: Path) -> str | None:
    """The commit checked out where `path` lives, or None (not a repo, no git, git too slow)."""
    folder = path if path.is_dir() else path.parent
    try:
        result = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and len(commit) in (40, 64) else None


def _version(conn: sqlite3.Connection) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return row[0] or 0


def migrate(conn: sqlite3.Connection, db_path: Path, upto: int = SCHEMA_VERSION) -> int:
    """Bring the schema to version `upto`, one transaction per migration; returns the version."""
    version = _version(conn)
    if version > SCHEMA_VERSION:
        raise HistoryError(f"history schema version {version} is newer than this mlbench knows "
                           f"({SCHEMA_VERSION}); upgrade mlbench", file=db_path)
    for number in range(version + 1, upto + 1):
        script = MIGRATIONS[number - 1]
        try:
            conn.execute("BEGIN IMMEDIATE")
            if _version(conn) >= number:  # another process got here first
                conn.execute("ROLLBACK")
                continue
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (version, applied) VALUES (?, ?)",
                         (number, datetime.now(timezone.utc).isoformat(timespec="seconds")))
            conn.execute("COMMIT")
        except BaseException:  # any failure, Ctrl-C included: the transaction is rolled back, and it re-raises
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return _version(conn)


def _statements(script: str) -> list[str]:
    """Split a script into statements, keeping trigger bodies (BEGIN ... END;) whole."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements


@contextmanager
def connect(db_path: Path, *, create: bool = True, upto: int = SCHEMA_VERSION) -> Iterator[sqlite3.Connection]:
    """An open, migrated connection. `create=False`: a missing database is a HistoryError."""
    db_path = Path(db_path)
    if not create and not db_path.exists():
        raise HistoryError("no run history here yet (runs are recorded by `mlbench run`)", file=db_path)
    from mlbench.store.history_guard import open_read_only, read_version, tables_of_ours

    try:
        if create:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        else:  # who only reads never writes: not mlbench's tables into a foreign file, not a migration
            conn = open_read_only(db_path)
    except (OSError, sqlite3.Error) as exc:
        raise HistoryError(f"cannot open the history database: {exc}", file=db_path) from None
    try:
        try:
            tables = tables_of_ours(conn, db_path, HistoryError)
            if create:
                migrate(conn, db_path, upto)
            elif "runs" not in tables:
                raise HistoryError("no run history here yet (runs are recorded by `mlbench run`)", file=db_path)
            elif read_version(conn) > SCHEMA_VERSION:
                raise HistoryError(f"history schema version {read_version(conn)} is newer than this mlbench knows "
                                   f"({SCHEMA_VERSION}); upgrade mlbench", file=db_path)
            yield conn
        except (sqlite3.DatabaseError, ValueError, TypeError, zlib.error) as exc:  # damaged pages, text, reports
            raise HistoryError(f"not a usable history database: {_first_line(exc)}", file=db_path) from None
    finally:
        conn.close()


def _first_line(exc: BaseException) -> str:
    """The error's first line, its control characters shown as '?' (a damaged database's text is shown)."""
    lines = str(exc).strip().splitlines()
    return "".join(c if c.isprintable() else "?" for c in lines[0]) if lines else type(exc).__name__


def record_run(report: RunReport, pipeline_path: str | Path, db_path: str | Path) -> str:
    """Append a finished run (its report, records and metrics) in one transaction; returns its id.

    A run already in the history is refused: nothing recorded is ever replaced.
    """
    pipeline_path = Path(pipeline_path)
    commit = git_commit(pipeline_path)
    report_json = report.model_dump_json()
    with connect(Path(db_path)) as conn:
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (report.run_id, report.created, report.finished,
                 datetime.now(timezone.utc).isoformat(timespec="seconds"), report.pipeline.name,
                 str(pipeline_path), report.pipeline.sha256, commit, machine_key(report.machine),
                 json.dumps(report.machine, sort_keys=True), report.mlbench_version,
                 json.dumps(report.summary), zlib.compress(report_json.encode("utf-8"), 6)),
            )
            conn.executemany(
                "INSERT INTO records VALUES (?,?,?,?,?,?)",
                [(report.run_id, r.variant_id, r.model, r.backend, r.status, r.error) for r in report.records],
            )
            conn.executemany(
                "INSERT INTO metrics VALUES (?,?,?,?,?,?,?)",
                [(report.run_id, r.variant_id, name, m.value, m.unit, m.source, m.reason)
                 for r in report.records for name, m in r.metrics.items()],
            )
            conn.execute("COMMIT")
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK")
            raise HistoryError(f"run {report.run_id} is already in the history; it is kept as it was",
                               file=db_path) from None
        except BaseException:  # any failure, Ctrl-C included: the transaction is rolled back, and it re-raises
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return report.run_id


# ---------------------------------------------------------------------------------------------
# Queries


@dataclass(frozen=True)
class RunRow:
    run_id: str
    created: str
    pipeline_name: str
    pipeline_path: str
    git_commit: str | None
    machine: dict
    machine_key: str
    summary: dict[str, int]

    @property
    def machine_words(self) -> str:
        from mlbench.machine import machine_words

        return machine_words(self.machine)


_RUN_COLUMNS = "run_id, created, pipeline_name, pipeline_path, git_commit, machine_json, machine_key, summary_json"


def _run_row(row: tuple) -> RunRow:
    """A row of `runs`; ValueError (json's) or TypeError when its JSON columns are damaged."""
    machine, summary = json.loads(row[5]), json.loads(row[7])
    if not (isinstance(machine, dict) and isinstance(summary, dict)):
        raise ValueError(f"run {row[0]}: machine_json or summary_json is not an object")
    return RunRow(row[0], row[1], row[2], row[3], row[4], machine, row[6], summary)


def list_runs(db_path: Path, *, pipeline: str | None = None, model: str | None = None,
              machine: str | None = None, limit: int | None = None) -> list[RunRow]:
    """Runs, oldest first (the newest `limit` of them), optionally of one pipeline, model, machine key."""
    where, args = [], []
    if pipeline:
        where.append("pipeline_name = ?")
        args.append(pipeline)
    if model:
        where.append("run_id IN (SELECT run_id FROM records WHERE model = ?)")
        args.append(model)
    if machine:
        where.append("machine_key = ?")
        args.append(machine)
    sql = f"SELECT {_RUN_COLUMNS} FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY created DESC, rowid DESC"
    if limit:
        sql += f" LIMIT {int(limit)}"
    with connect(db_path, create=False) as conn:
        rows = [_run_row(r) for r in conn.execute(sql, args)]
    return rows[::-1]


def load_report(db_path: Path, run_id: str) -> tuple[RunReport, RunRow]:
    """The full report of a run, by id or a unique prefix of 4+ characters."""
    if len(run_id) < 4:
        raise HistoryError(f"run id '{run_id}' is too short: give at least 4 characters", file=db_path)
    with connect(db_path, create=False) as conn:
        rows = conn.execute(f"SELECT {_RUN_COLUMNS}, report_zlib FROM runs WHERE run_id LIKE ? ESCAPE '\\' "
                            "ORDER BY created", (run_id.replace("%", "\\%").replace("_", "\\_") + "%",)).fetchall()
    if not rows:
        raise HistoryError(f"no run '{run_id}' in the history", file=db_path)
    if len(rows) > 1:
        raise HistoryError(f"run id '{run_id}' is ambiguous: {', '.join(r[0] for r in rows[:5])}", file=db_path)
    try:
        report = RunReport.model_validate_json(zlib.decompress(rows[0][-1]).decode("utf-8"))
        return report, _run_row(rows[0][:-1])
    except (ValueError, TypeError, zlib.error) as exc:  # a damaged row: pydantic's and json's errors are ValueErrors
        raise HistoryError(f"run {rows[0][0]} is damaged in the history: {_first_line(exc)}", file=db_path) from None


@dataclass(frozen=True)
class TrendPoint:
    run_id: str
    created: str
    value: float | None
    source: str | None


class SeriesKey(NamedTuple):
    """One trend: a variant of one pipeline. The same variant id in two pipelines is two trends (their
    settings, models' sources and gates differ), never one line zig-zagging between them."""

    pipeline: str
    variant_id: str


def metric_series(db_path: Path, metric: str, *, pipeline: str | None = None, model: str | None = None,
                  limit: int | None = None) -> dict[SeriesKey, list[TrendPoint]]:
    """Per pipeline and variant, the metric across runs, oldest first (runs of the newest `limit` only)."""
    runs = list_runs(db_path, pipeline=pipeline, model=model, limit=limit)
    ids = [r.run_id for r in runs]
    if not ids:
        return {}
    series: dict[SeriesKey, list[TrendPoint]] = {}
    with connect(db_path, create=False) as conn:
        marks = ",".join("?" * len(ids))
        sql = (f"SELECT r.pipeline_name, m.variant_id, m.run_id, r.created, m.value, m.source FROM metrics m "
               f"JOIN runs r ON r.run_id = m.run_id WHERE m.name = ? AND m.run_id IN ({marks})")
        args: list = [metric, *ids]
        if model:
            sql += " AND m.variant_id IN (SELECT variant_id FROM records WHERE run_id = m.run_id AND model = ?)"
            args.append(model)
        rows = conn.execute(sql + " ORDER BY r.created, r.rowid, m.rowid", args)
        damaged: dict[str, str] = {}
        for name, variant_id, run_id, created, value, source in rows:
            if isinstance(value, bool) or not isinstance(value, (int, float, type(None))) or not isinstance(created, str):
                damaged.setdefault(run_id, f"{metric} of {variant_id} is {value!r:.40}")  # SQLite keeps what it is given
                continue
            series.setdefault(SeriesKey(name, variant_id), []).append(
                TrendPoint(run_id, created, None if value is None else float(value), source))
    for run_id, what in damaged.items():
        log.warning("run %s in the history %s: %s, not a number; left out of the trends", run_id, db_path, what)
    return series


REFERENCES = ("last", "last-on-this-machine")


def resolve(db_path: Path, ref: str, *, pipeline: str | None = None, exclude: tuple[str, ...] = ()) -> tuple[RunReport, RunRow]:
    """A history reference → (report, row).

    `last`: the newest run (of `pipeline`, when given) not in `exclude`; `last-on-this-machine`:
    the same, among runs on a machine like this one (same OS, architecture, CPU model and count);
    anything else: a run id or a unique prefix of it.
    """
    if ref not in REFERENCES:
        return load_report(db_path, ref)
    machine = None
    if ref == "last-on-this-machine":
        from mlbench.machine import snapshot

        machine = machine_key(snapshot())
    runs = [r for r in list_runs(db_path, pipeline=pipeline, machine=machine) if r.run_id not in exclude]
    if not runs:
        scope = f" of pipeline '{pipeline}'" if pipeline else ""
        scope += " on this machine" if machine else ""
        other = " other than the one being compared" if exclude else ""
        raise HistoryError(f"no earlier run{scope}{other} in the history", file=db_path)
    return load_report(db_path, runs[-1].run_id)
