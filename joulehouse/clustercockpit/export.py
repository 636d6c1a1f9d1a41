"""``export_db``: cc_jobs rows into a SQLite database ClusterCockpit can open.

The database is built by cc-backend's own migration files (01-11, bundled in
``sql/``, see PROVENANCE.md), so its ``job`` table, CHECK and UNIQUE
constraints and indexes are cc-backend's at DB version 11; golang-migrate's
``schema_migrations`` table records version 11, clean, as cc-backend expects.
The file is written under a temporary name and renamed: a failed export
never leaves a half-written database at ``sqlite_path``.
"""

from __future__ import annotations

import os
import sqlite3
from importlib import resources
from pathlib import Path

import pandas as pd

from joulehouse.clustercockpit.jobs import CC_BACKEND_COLUMNS, read_jobs

DB_VERSION = 11


def migrations() -> list[tuple[int, str]]:
    """(version, SQL) of the bundled cc-backend migrations, in order."""
    folder = resources.files("joulehouse.clustercockpit") / "sql"
    found = sorted((int(entry.name.split("_", 1)[0]), entry.read_text())
                   for entry in folder.iterdir() if entry.name.endswith(".up.sql"))
    return found


def create_db(connection: sqlite3.Connection) -> None:
    """Run every migration on an empty database, as cc-backend's -migrate-db would."""
    for _, sql in migrations():
        connection.executescript(sql)
    connection.executescript(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version uint64, dirty bool);"
        "CREATE UNIQUE INDEX IF NOT EXISTS version_unique ON schema_migrations (version);")
    connection.execute("INSERT INTO schema_migrations VALUES (?, 0)", (DB_VERSION,))


def insert_jobs(connection: sqlite3.Connection, jobs: pd.DataFrame) -> int:
    """Insert cc_jobs rows (cc-backend's columns only) into ``job``; returns the count."""
    frame = jobs[CC_BACKEND_COLUMNS].astype(object).where(jobs[CC_BACKEND_COLUMNS].notna(), None)
    placeholders = ", ".join("?" * len(CC_BACKEND_COLUMNS))
    connection.executemany(
        f"INSERT INTO job ({', '.join(CC_BACKEND_COLUMNS)}) VALUES ({placeholders})",
        frame.itertuples(index=False, name=None))
    return len(frame)


def export_db(archive: str | os.PathLike[str], sqlite_path: str | os.PathLike[str],
              jobs: pd.DataFrame | None = None) -> int:
    """Write the archive's cc_jobs (or ``jobs``) into a new cc-backend database.

    Replaces ``sqlite_path`` atomically; returns the number of jobs written.
    Jobs that cannot be read are left out (see :func:`~.jobs.read_jobs`).
    """
    if jobs is None:
        jobs = read_jobs(archive).jobs
    target = Path(sqlite_path)
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    try:
        connection = sqlite3.connect(temporary)
        try:
            with connection:
                create_db(connection)
                count = insert_jobs(connection, jobs)
        finally:
            connection.close()
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return count
