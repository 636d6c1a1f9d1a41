"""Create the TAUdb schema on first use; leave an existing one alone.

TAU's DDL (``sql/taudb.sql``, seed 004) fails when run twice, so the schema
counts as present once its ``schema_version`` table exists. PostgreSQL gets
the DDL verbatim (plus the fixed ``interval_event_value`` view) inside the
configured schema, created if missing; SQLite gets the same script with the
types mapped (:data:`SQLITE_REWRITES`), so both have the same tables, columns,
indexes, seed rows and views.
Creation is one transaction: a failure leaves no half-made schema.

Joulehouse adds indexes of its own, :data:`INDEXES` (TAU's DDL lacks them):
:data:`LOOKUP_INDEX` on ``primary_metadata (name, value)`` finds trials by
their source key without a scan (TAU's only index there is ``(trial, name)``);
the others lead with each column that replacing a trial filters on or that a
foreign key checks for each deleted row (``DELETE ... NO ACTION``), so deleting
one trial reads that trial's rows, not every stored trial's. Made with a new
schema, and on an existing one when first opened for loading
(:func:`ensure_indexes`; on a large existing TAUdb run ``joulehouse taudb init`` once
after upgrading, so they are built there); a build that meets a locked table is tried
again after a wait of 10 s, doubled after each such failure in a row up to 10 min. An
index changes none of TAU's tables, rows or views.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files

from psycopg2.extensions import quote_ident

from joulehouse.taudb.connect import (
    DRIVER_ERRORS,
    INDEX_LOCK_CLASS,
    POSTGRESQL,
    SCHEMA_LOCK,
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
#: Joulehouse's index for looking trials up by a primary metadata value (a source key).
LOOKUP_INDEX = "joulehouse_primary_metadata_name_value"
#: Joulehouse's own indexes, name -> ``table (columns)``; none is in TAU's DDL. After the
#: lookup index, each serves a filter of the loader's trial deletes (``_DELETES``) and/or
#: the foreign-key check made for each deleted row of the table it references.
INDEXES = {
    LOOKUP_INDEX: "primary_metadata (name, value)",
    # delete filter (WHERE column IN / = ...) and foreign key -> the table after "->"
    "joulehouse_timer_callpath_timer": "timer_callpath (timer)",  # -> timer
    "joulehouse_timer_parameter_timer": "timer_parameter (timer)",  # -> timer
    "joulehouse_counter_value_thread": "counter_value (thread)",  # -> thread
    "joulehouse_metric_trial": "metric (trial)",  # -> trial
    # foreign key only
    "joulehouse_timer_value_metric": "timer_value (metric)",  # -> metric
    "joulehouse_counter_value_timer_callpath":
        "counter_value (timer_callpath)",  # -> timer_callpath
    "joulehouse_secondary_metadata_thread": "secondary_metadata (thread)",  # -> thread
    "joulehouse_secondary_metadata_timer_callpath":
        "secondary_metadata (timer_callpath)",  # -> timer_callpath
    "joulehouse_secondary_metadata_parent": "secondary_metadata (parent)",  # -> itself
    "joulehouse_analysis_settings_trial": "analysis_settings (trial)",  # -> trial, CASCADE
    "joulehouse_analysis_settings_metric": "analysis_settings (metric)",  # -> metric, CASCADE
}
# Serialises the index builds of one TAUdb across sessions: INDEX_LOCK_CLASS and the OID of
# the schema holding the table indexed (%s: its name, found as the index's statement finds
# it), so that a build in another schema of the same PostgreSQL database never waits. Not
# current_schema(): through a search_path such as "$user", public, a role with an empty
# schema of its own would find the tables in public under another key.
_LOCK_INDEXES = ("SELECT pg_advisory_xact_lock(%s, (SELECT relnamespace FROM pg_class "
                 "WHERE oid = %s::regclass)::int)")
#: How long building one index waits for its table's lock before it gives up (to be tried
#: again at a later load): shorter than PostgreSQL's ``deadlock_timeout`` (1 s by
#: default), and a waiting CREATE INDEX would hold up every writer queued behind it.
INDEX_LOCK_TIMEOUT = "500ms"


@dataclass(frozen=True)
class _FailureKind:
    """What a failed index build means: whether a later load is to try again (a failure it
    may not meet), and what an operator does about it."""

    again: bool
    advice: str


# Each advice suits `joulehouse taudb init`'s message and a load's warning alike (an operator
# reading the latter may never have run it); the warning adds whether it is tried again.
_INIT = "`joulehouse taudb init`"
_BUSY = _FailureKind(True, "other sessions were writing these tables (loads, TAU's tools): "
                     f"run {_INIT} when loads are quiet")
_LOST = _FailureKind(True, f"the connection was lost: run {_INIT} once the database is "
                     "reachable")
# followed, where they can be read, by the statement granting it (_no_right_on)
_NO_RIGHT = _FailureKind(False, "only a table's owner may index it: run "
                         f"{_INIT} as the role owning TAU's tables, or grant that role to "
                         "this one")
_READ_ONLY = _FailureKind(False, "the database is read-only to this connection (a read-only "
                          f"role, session or file, a standby server): run {_INIT} with a "
                          "read-write connection to the primary")
_CANCELLED = _FailureKind(False, "the build was cancelled (a statement timeout, an operator): "
                          f"run {_INIT} without statement_timeout "
                          "(PGOPTIONS='-c statement_timeout=0')")
_DISK_FULL = _FailureKind(False, f"the disk is full: free space, then run {_INIT}")
_OTHER = _FailureKind(False, f"run {_INIT} once that is mended")
# Failures that a later load may not meet, tried again then: PostgreSQL's lock_not_available
# (the lock timeout), deadlock_detected, serialization_failure, and a connection lost (no
# code); SQLite's BUSY and LOCKED. Any other is not tried again in this process: it would
# come back after each load's build, each holding its table meanwhile.
_PG_KINDS = {"55P03": _BUSY, "40P01": _BUSY, "40001": _BUSY, None: _LOST,
             "42501": _NO_RIGHT, "25006": _READ_ONLY, "57014": _CANCELLED, "53100": _DISK_FULL}
_SQLITE_KINDS = {5: _BUSY, 6: _BUSY, 8: _READ_ONLY, 13: _DISK_FULL}  # primary result codes
# What PostgreSQL's CREATE INDEX IF NOT EXISTS meets when another session (an older
# Joulehouse, an operator) makes the same index at the same time: unique_violation on its
# catalog (pg_class_relname_nsp_index) once that session commits, or duplicate_table.
_BUILT_BY_ANOTHER = {"23505", "42P07"}
#: After such a failure a database's indexes are tried again at its first load at least
#: this long after (seconds), each further failure in a row doubling the wait up to
#: :data:`INDEX_RETRY_MAX_S` (10 s, 20 s, 40 s ... 10 min): a table that stays locked
#: costs a load the :data:`INDEX_LOCK_TIMEOUT` wait, and the log a warning, once per wait,
#: not at every load.
INDEX_RETRY_FIRST_S = 10.0
INDEX_RETRY_MAX_S = 600.0
#: The clock of those waits (seconds); tests set one of their own.
retry_clock: Callable[[], float] = time.monotonic


def create_index(name: str) -> str:
    """The statement creating one of :data:`INDEXES` unless it exists."""
    return f"CREATE INDEX IF NOT EXISTS {name} ON {INDEXES[name]}"


def _table_of(name: str) -> str:
    """The table of one of :data:`INDEXES`."""
    return INDEXES[name].split(" ", 1)[0]


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
    """Create the TAUdb schema unless present (with :data:`INDEXES`, which an existing one
    gets too: :func:`ensure_indexes`); True when this call created the schema."""
    created = create_schema(db)
    ensure_indexes(db)
    return created


def create_schema(db: TaudbDatabase) -> bool:
    """Create the TAUdb schema with :data:`INDEXES` unless present; True when this call
    created it. An existing one's missing indexes are :func:`ensure_indexes`' and
    :func:`build_indexes`' business."""
    with db.transaction() as cursor:
        if db.backend == POSTGRESQL:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            if db.schema is not None:
                # Checked first: CREATE SCHEMA IF NOT EXISTS still needs CREATE
                # on the database, which a role given a ready schema may lack.
                cursor.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (db.schema,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE SCHEMA "{db.schema}"')
        created = not schema_present(db, cursor)
        if created:
            for statement in [*ddl_statements(ddl(db.backend)), *map(create_index, INDEXES)]:
                cursor.execute(statement)
    if created:
        _builds_of(db).settled = True
    return created


def _index_present(db: TaudbDatabase, cursor, name: str) -> bool:
    if db.backend == POSTGRESQL:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", (name,))
    else:
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?",
                       (name,))
    return bool(cursor.fetchone()[0])


class _IndexBuilds:
    """The index builds of one database in this process: the lock a build holds (the other
    threads loading into that database wait for it; those of other databases never do),
    whether the database is settled (its indexes made, or not makeable in this process),
    and when, after failures a later load may not meet, a build is due again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.settled = False
        self.retry_after_s = 0.0  # the wait after the last failure in a row; 0: none
        self.due_at = -math.inf  # when a build is due again: seconds on retry_clock

    def due(self, now: float) -> bool:
        """Whether a build is to be tried at ``now``."""
        return not self.settled and now >= self.due_at

    def note(self, failure: IndexFailure | None, now: float) -> float | None:
        """Note what a build ended at ``now`` met; the wait (seconds) before the next try
        after a failure to be tried again (:data:`INDEX_RETRY_FIRST_S`, doubled after each
        failure in a row up to :data:`INDEX_RETRY_MAX_S`), else None: settled."""
        if failure is None or not failure.kind.again:
            self.settled = True
            return None
        self.retry_after_s = min(2 * self.retry_after_s or INDEX_RETRY_FIRST_S,
                                 INDEX_RETRY_MAX_S)
        self.due_at = now + self.retry_after_s
        return self.retry_after_s


# Per database (URL, schema); the guard is held only to find or add an entry.
_builds: dict[tuple[str, str | None], _IndexBuilds] = {}
_builds_guard = threading.Lock()


def _builds_of(db: TaudbDatabase) -> _IndexBuilds:
    with _builds_guard:
        builds = _builds.get((db.url, db.schema))
        if builds is None:
            builds = _builds[(db.url, db.schema)] = _IndexBuilds()
        return builds


def ensure_indexes(db: TaudbDatabase) -> None:
    """Create those of :data:`INDEXES` missing from ``db``'s existing TAUdb schema; made
    sure of once per database in a process, the other threads loading into that database
    waiting meanwhile (a build never holds up another database's loads: each database has
    its lock, and on PostgreSQL its advisory lock is the schema's).

    Each index is made in a transaction of its own, which locks its one table (SHARE,
    until commit) and waits at most :data:`INDEX_LOCK_TIMEOUT` for it: the builder never
    holds one table while waiting for another, so it cannot deadlock with a writer
    (another thread, an older Joulehouse, TAU's loader) whatever order that one locks
    tables in, and it is the builder that gives up, never a load (on PostgreSQL; SQLite's
    ``BEGIN IMMEDIATE`` waits for the file's one write lock as a load does,
    ``SQLITE_LOCK_WAIT_S``, and the try ends at the first index it fails, the others
    waiting as long in vain). Indexes made stay made, those another session makes
    meanwhile too (its race with this one is no failure).
    A failure a later load may not meet (a lock timeout, a deadlock, a connection lost)
    is logged, and the first call at least :data:`INDEX_RETRY_FIRST_S` later tries again,
    the wait doubling after each failure in a row up to :data:`INDEX_RETRY_MAX_S` (the
    calls meanwhile return at once, logging nothing); any other (no right to create them: a
    role that does not own TAU's tables, a read-only database; a statement timeout; a full
    disk) is logged and not tried again in this process: loading goes on without them
    (lookups then scan ``primary_metadata``, replacing a trial scans tables of every
    stored trial). On a large existing database the first call builds them
    (plain CREATE INDEX: writes to each table wait while its index is built)."""
    builds = _builds_of(db)
    if not builds.due(retry_clock()):
        return
    with builds.lock:
        if not builds.due(retry_clock()):  # built, or failed, by the thread this one waited for
            return
        failure = _build_missing(db)
        retry_after_s = builds.note(failure, retry_clock())
    if failure is not None:
        when = ("; not tried again in this process" if retry_after_s is None else
                f", or wait: it is tried again at the first load {retry_after_s:g} s later")
        log.warning("TAUdb %s: %s", masked_url(db.url), failure.describe(when))


def build_indexes(db: TaudbDatabase) -> IndexFailure | None:
    """Create those of :data:`INDEXES` missing from ``db``'s TAUdb schema now, whatever
    earlier tries in this process met (``joulehouse taudb init``); why some are still
    missing, None when none is. Built as by :func:`ensure_indexes`, and noted as its
    tries are; nothing is logged."""
    builds = _builds_of(db)
    with builds.lock:
        failure = _build_missing(db)
        builds.note(failure, retry_clock())
    return failure


@dataclass(frozen=True)
class IndexFailure:
    """Why a build left some of :data:`INDEXES` missing: their names (None: not known, the
    check for them failed), the driver's error (its first line), and the kind of
    failure."""

    missing: tuple[str, ...] | None
    error: str
    kind: _FailureKind

    def describe(self, when: str = "") -> str:
        """One line for an operator: each index missing and its table, the error, what to
        do (followed by ``when``: whether and when a load tries again), and what lacking
        them costs."""
        if self.missing is None:
            what = "Joulehouse's indexes not checked"
        else:
            what = "Joulehouse's indexes not built: " + ", ".join(
                f"{name} on {INDEXES[name]}" for name in self.missing)
        return f"{what}: {self.error}; {self.kind.advice}{when} ({_without(self.missing)})"


def _build_missing(db: TaudbDatabase) -> IndexFailure | None:
    """Create those of :data:`INDEXES` missing from ``db``, each in a transaction of its own
    (see :func:`ensure_indexes`); why some are still missing, None when none is."""
    missing: list[str] | None = None  # None: not known yet
    error: Exception | None = None
    failed_on: str | None = None  # the index whose build met error
    try:
        with db.transaction() as cursor:
            # checked first: IF NOT EXISTS needs owning the table
            missing = [name for name in INDEXES if not _index_present(db, cursor, name)]
        for name in list(missing):
            try:
                with db.transaction() as cursor:
                    if db.backend == POSTGRESQL:
                        cursor.execute(_LOCK_INDEXES, (INDEX_LOCK_CLASS, _table_of(name)))
                        # after the advisory lock: a second builder waits for the first
                        cursor.execute(f"SET LOCAL lock_timeout = '{INDEX_LOCK_TIMEOUT}'")
                    cursor.execute(create_index(name))
            except DRIVER_ERRORS as failed:
                if not _built_by_another(db, name, failed):
                    error, failed_on = failed, name
                    if not _failure_kind(failed).again or db.backend != POSTGRESQL:
                        # the others would fail alike; on SQLite a conflict too: its write
                        # lock is the whole file's, which each BEGIN IMMEDIATE would wait
                        # SQLITE_LOCK_WAIT_S for (a later try makes them)
                        break
                    continue
            missing.remove(name)
    except DRIVER_ERRORS as failed:
        error = failed
    if error is None:
        return None
    kind = _failure_kind(error)
    if kind is _NO_RIGHT and failed_on is not None:
        kind = _no_right_on(db, failed_on)
    return IndexFailure(None if missing is None else tuple(missing),
                        str(error).strip().splitlines()[0], kind)


def _no_right_on(db: TaudbDatabase, name: str) -> _FailureKind:
    """:data:`_NO_RIGHT`, its advice followed by the statement granting the role owning the
    table of index ``name`` to this session's role (PostgreSQL); as it is when they cannot
    be read."""
    try:
        with db.transaction() as cursor:
            cursor.execute("SELECT pg_get_userbyid(relowner), current_user FROM pg_class "
                           "WHERE oid = %s::regclass", (_table_of(name),))
            owner, user = (quote_ident(role, cursor) for role in cursor.fetchone())
    except DRIVER_ERRORS:
        return _NO_RIGHT
    return _FailureKind(False, f"{_NO_RIGHT.advice}: GRANT {owner} TO {user}")


def _built_by_another(db: TaudbDatabase, name: str, error: Exception) -> bool:
    """Whether building index ``name`` failed with ``error`` because another session built
    it meanwhile (:data:`_BUILT_BY_ANOTHER`), the index now there."""
    if getattr(error, "pgcode", None) not in _BUILT_BY_ANOTHER:
        return False
    with db.transaction() as cursor:
        return _index_present(db, cursor, name)


def _failure_kind(error: Exception) -> _FailureKind:
    """What a driver's error met by a build means (:data:`_PG_KINDS`, :data:`_SQLITE_KINDS`)."""
    if isinstance(error, sqlite3.Error):
        return _SQLITE_KINDS.get(getattr(error, "sqlite_errorcode", 0) & 0xFF, _OTHER)
    return _PG_KINDS.get(getattr(error, "pgcode", None), _OTHER)


def _without(missing: tuple[str, ...] | None) -> str:
    """What lacking the ``missing`` indexes (None: not known) costs."""
    lookup = missing is None or LOOKUP_INDEX in missing
    deletes = missing is None or bool(set(missing) - {LOOKUP_INDEX})
    costs = (["trials are looked up by their source key with a scan"] if lookup else []) + \
        (["replacing a trial scans tables of every stored trial"] if deletes else [])
    return "without them " + " and ".join(costs)
