"""Is this SQLite file mlbench's run history? A file of someone else's (its own `user_version`, its own tables)
is refused in one line and never written: `mlbench history`, `compare --db` and `calibrate` open the history
read-only, and a run refuses to add mlbench's tables to a database that has others."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from mlbench.errors import UserError

OURS = {"schema_migrations", "runs", "records", "metrics"}


def open_read_only(db_path: Path) -> sqlite3.Connection:
    """A connection that cannot write: not a table, not a journal, not a byte."""
    return sqlite3.connect(f"file:{quote(str(db_path.resolve()))}?mode=ro", uri=True, timeout=30,
                           isolation_level=None)


def tables_of_ours(conn: sqlite3.Connection, db_path: Path, error: type[UserError]) -> set[str]:
    """The database's tables; `error` (one line) when the file is not mlbench's."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != 0:
        raise error(f"not an mlbench history database (its user_version is {version}; mlbench leaves it 0): "
                    "give mlbench a file of its own", file=db_path)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
              if not str(row[0]).startswith("sqlite_")}
    if tables and "schema_migrations" not in tables:
        shown = ", ".join(sorted(tables)[:5])
        raise error(f"not an mlbench history database: it holds tables of its own ({shown}); give mlbench a "
                    "file of its own", file=db_path)
    return tables


def read_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return row[0] or 0
