"""Create the TAUdb schema on first use; leave an existing one alone.

TAU's DDL (``sql/taudb.sql``, seed 004) fails when run twice, so the schema
counts as present once its ``schema_version`` table exists. PostgreSQL gets
the DDL verbatim (plus the fixed ``interval_event_value`` view) inside the
configured schema, created if missing; SQLite gets the same script with the
types mapped (:data:`SQLITE_REWRITES`), so both have the same tables, columns,
indexes, seed rows and views.
Creation is one transaction: a failure leaves no half-made schema.

Joulehouse adds one index of its own, :data:`LOOKUP_INDEX` on
``primary_metadata (name, value)`` (trials found by their source key without a
scan; TAU's only index there is ``(trial, name)``): with a new schema, and on
an existing one when first opened for loading (:func:`ensure_lookup_index`).
An index changes none of TAU's tables, rows or views.
"""

from __future__ import annotations

import logging
import re
from importlib.resources import files

from joulehouse.taudb.connect import (
    DRIVER_ERRORS,
    POSTGRESQL,
    TaudbDatabase,
    TaudbUnavailable,
    masked_url,
)

log = logging.getLogger(__name__)

#: How TAU's PostgreSQL DDL becomes SQLite's; the scripts differ only in these.
#: SERIAL -> INTEGER PRIMARY KEY AUTOINCREMENT keeps ids unique for ever, as a
#: sequence does; VARCHAR, INT, BOOLEAN and DOUBLE PRECISION keep their names
#: (SQLite's type affinity maps them to TEXT, INTEGER, NUMERIC and REAL).
SQLITE_REWRITES = [
    (re.compile(r"\bSERIAL NOT NULL PRIMARY KEY\b"), "INTEGER PRIMARY KEY AUTOINCREMENT"),
    (re.compile(r"\bBYTEA\b"), "BLOB"),
    (re.compile(r"\bCREATE OR REPLACE VIEW\b"), "CREATE VIEW"),
]
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
# Serialises concurrent first uses on one PostgreSQL database (any constant).
_ADVISORY_LOCK = 0x7A0DB
#: Joulehouse's index for looking trials up by a primary metadata value (a source key).
LOOKUP_INDEX = "joulehouse_primary_metadata_name_value"
_CREATE_LOOKUP_INDEX = (f"CREATE INDEX IF NOT EXISTS {LOOKUP_INDEX} "
                        "ON primary_metadata (name, value)")
# The databases (URL, schema) whose lookup index this process made sure of, or could not.
_indexed: set[tuple[str, str | None]] = set()


def ddl(backend: str) -> str:
    """The DDL script of a backend (``"postgresql"`` or ``"sqlite"``)."""
    script = files("joulehouse.taudb").joinpath("sql", "taudb.sql").read_text()
    if backend == POSTGRESQL:
        return script
    for pattern, replacement in SQLITE_REWRITES:
        script = pattern.sub(replacement, script)
    return script


def ddl_statements(script: str) -> list[str]:
    """The statements of a DDL script, comments removed (they hold stray ``;``)."""
    body = _COMMENT.sub("", script)
    return [stmt.strip() for stmt in body.split(";") if stmt.strip()]


def schema_present(db: TaudbDatabase, cursor) -> bool:
    """Whether the TAUdb tables exist where ``db`` looks for them."""
    if db.backend == POSTGRESQL:
        cursor.execute("SELECT to_regclass('schema_version') IS NOT NULL")
    else:
        cursor.execute("SELECT count(*) FROM sqlite_master "
                       "WHERE type = 'table' AND name = 'schema_version'")
    return bool(cursor.fetchone()[0])


def require_schema(db: TaudbDatabase) -> None:
    """For reading: :class:`TaudbUnavailable` unless the TAUdb tables are there (nothing is
    created, unlike :func:`ensure_schema`)."""
    with db.transaction() as cursor:
        present = schema_present(db, cursor)
    if not present:
        where = f" in schema {db.schema!r}" if db.schema else ""
        raise TaudbUnavailable(db.url, f"no TAUdb schema{where} (no schema_version table); "
                               "`joulehouse taudb init` creates one")


def ensure_schema(db: TaudbDatabase) -> bool:
    """Create the TAUdb schema unless present (with :data:`LOOKUP_INDEX`, which an existing
    one gets too); True when this call created the schema."""
    with db.transaction() as cursor:
        if db.backend == POSTGRESQL:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK,))
            if db.schema is not None:
                # Checked first: CREATE SCHEMA IF NOT EXISTS still needs CREATE
                # on the database, which a role given a ready schema may lack.
                cursor.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (db.schema,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE SCHEMA "{db.schema}"')
        created = not schema_present(db, cursor)
        if created:
            for statement in [*ddl_statements(ddl(db.backend)), _CREATE_LOOKUP_INDEX]:
                cursor.execute(statement)
            _indexed.add((db.url, db.schema))
    ensure_lookup_index(db)
    return created


def _index_present(db: TaudbDatabase, cursor) -> bool:
    if db.backend == POSTGRESQL:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", (LOOKUP_INDEX,))
    else:
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?",
                       (LOOKUP_INDEX,))
    return bool(cursor.fetchone()[0])


def ensure_lookup_index(db: TaudbDatabase) -> None:
    """Create :data:`LOOKUP_INDEX` in ``db``'s existing TAUdb schema unless there; tried
    once per database in a process. Without the right to create it (a PostgreSQL role
    that does not own ``primary_metadata``, a read-only file) a warning is logged and
    loading goes on: lookups then scan ``primary_metadata``."""
    where = (db.url, db.schema)
    if where in _indexed:
        return
    _indexed.add(where)
    try:
        with db.transaction() as cursor:
            if db.backend == POSTGRESQL:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK,))
            if not _index_present(db, cursor):  # checked first: IF NOT EXISTS needs owning
                cursor.execute(_CREATE_LOOKUP_INDEX)
    except DRIVER_ERRORS as error:
        log.warning("TAUdb %s: cannot create the index %s on primary_metadata (%s); "
                    "trials are looked up by their source key without it (a scan)",
                    masked_url(db.url), LOOKUP_INDEX,
                    str(error).strip().splitlines()[0])
