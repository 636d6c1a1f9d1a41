"""A TAUdb database opened from a SQLAlchemy-style URL.

``sqlite:///path/to/taudb.sqlite`` (the embedded default; a URL without a
file name, ``sqlite://`` or ``sqlite:///``, would be an in-memory database
that is gone at the end, so it is refused) or ``postgresql://user@host:port/db`` (also
``postgresql+psycopg2://``). SQLAlchemy only parses the URL; the DBAPI
drivers (``sqlite3``, ``psycopg2``) do the work.

Secrets never live in code or configuration files: a PostgreSQL password
comes from the URL itself (built from the environment by the caller) or
from libpq's own environment (``PGPASSWORD``, ``~/.pgpass``).

``schema`` names a PostgreSQL schema that holds the TAUdb tables (it becomes
the session's ``search_path``, so a role without rights on ``public`` can
use its own); SQLite has no schemas and refuses one.

``read_only`` opens an existing database without the right to change it: a
SQLite file that is not there is an error (nothing is created), and every
PostgreSQL transaction is read-only. :func:`unavailable` turns a driver's
error into one line naming the URL with its password masked.
"""

from __future__ import annotations

import hashlib
import io
import queue
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self
from urllib.parse import unquote

import numpy as np
import pandas as pd
import psycopg2
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
# Joulehouse's PostgreSQL advisory locks, each held until its transaction ends. A one-key
# lock never meets a two-key one (PostgreSQL keeps the two key spaces apart).
#: The one key of the lock serialising TAUdb schema creation in a database
#: (``schema.create_schema``; an older Joulehouse's index builds too).
SCHEMA_LOCK = 0x7A0DB
#: The first key of the loads' locks (:meth:`TaudbDatabase.lock_sources`), the second a
#: bucket of the source key.
SOURCE_LOCK_CLASS = 0x7461  # "ta"
SOURCE_LOCK_BUCKETS = 1024  # a load holds at most this many advisory locks
#: The first key of the index builders' lock (``schema.ensure_indexes``), the second the
#: OID of the schema holding the table indexed.
INDEX_LOCK_CLASS = 0x6A68  # "jh"
#: How long a SQLite load waits for another's write lock before it fails (seconds; the
#: driver's default is 5): the sources' steps load at once (each in its own pool), and a
#: ClusterCockpit block's trials hold the lock for seconds.
SQLITE_LOCK_WAIT_S = 600.0
# Lower case only: PostgreSQL folds the unquoted ``-c search_path=`` name to
# lower case, while schema.py creates and looks up the exact spelling.
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
#: The errors a database driver raises: connecting, reading or writing.
DRIVER_ERRORS = (sqlite3.Error, psycopg2.Error)
# libpq's "connection to server at "host" (address), port N failed: " before its reason
_PG_SERVER_PREFIX = re.compile(r'^connection to server (at|on) .*? failed: ')


class TaudbUnavailable(Exception):
    """A database that cannot be used as asked: ``"<url>: <reason>"``, one line, the URL's
    password masked."""

    def __init__(self, url: str, reason: str):
        self.url = masked_url(url)
        self.reason = reason
        super().__init__(f"{self.url}: {reason}")


def masked_url(url: str) -> str:
    """``url`` as written, with its password (if any) written ``***``."""
    span = _password_span(url)
    return url if span is None else f"{url[:span[0]]}***{url[span[1]:]}"


def _password_span(url: str) -> tuple[int, int] | None:
    """Start and end of the password in ``scheme://user:PASSWORD@host...``, or None.

    The password runs from the first ``:`` after the user to the LAST ``@``:
    it may hold ``/`` and ``@`` (a URL that parsers refuse, or read with part
    of the password as the host, must not show it). The last ``@`` before the
    query (``?``) if there is one, so an ``@`` in the query is not taken;
    else the last of all (a password holding ``?``).
    """
    start = url.find("://")
    query = url.find("?")
    at = url.rfind("@", 0, query) if query >= 0 else -1
    if at < 0:
        at = url.rfind("@")
    if start < 0 or at < start:
        return None
    colon = url.find(":", start + 3, at)
    return None if colon < 0 else (colon + 1, at)


def unavailable(url: str, error: BaseException) -> TaudbUnavailable:
    """A driver's error (:data:`DRIVER_ERRORS`) as one line naming ``url``, password masked.

    libpq's "connection to server at ... failed:" prefix is dropped (the URL
    says where), ``FATAL:``/``ERROR:`` markers too, and its hint follows in
    parentheses; a password that appears in the message is masked.
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return TaudbUnavailable(url, type(error).__name__)
    reason = re.sub(r"^(FATAL|ERROR):\s+", "", _PG_SERVER_PREFIX.sub("", lines[0]))
    if isinstance(error, psycopg2.OperationalError) and len(lines) > 1 \
            and not lines[1].startswith("connection to server"):
        reason += f" ({lines[1][0].lower()}{lines[1][1:]})"
    if isinstance(error, sqlite3.Error):
        reason = f"SQLite: {reason}"
    span = _password_span(url)
    if span is not None and span[1] > span[0]:
        password = url[span[0]:span[1]]
        for written in {password, unquote(password)}:
            reason = reason.replace(written, "***")
    return TaudbUnavailable(url, reason)


class TaudbDatabase:
    """One connection to a TAUdb database; use as a context manager to close it.

    ``backend`` is ``"sqlite"`` or ``"postgresql"``; ``placeholder`` is the
    driver's parameter marker (``?`` or ``%s``). All writes go through
    :meth:`transaction`.
    """

    def __init__(self, url: str, schema: str | None = None, *, read_only: bool = False):
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError) as err:
            raise ValueError("not a database URL (sqlite:///FILE or "
                             f"postgresql://USER@HOST:PORT/DB): {err}") from err
        self.url = url
        self.schema = schema
        if parsed.get_backend_name() == SQLITE:
            if schema is not None:
                raise ValueError("SQLite has no schemas: drop the schema option")
            self.backend = SQLITE
            self.placeholder = "?"
            path = parsed.database
            if not path or path == ":memory:":
                raise ValueError("no database file in URL (an in-memory SQLite database is "
                                 "gone at the end): give sqlite:///FILE")
            # isolation_level=None: no implicit transactions; transaction() opens them.
            if read_only:
                self.connection = _open_sqlite_read_only(url, path)
            else:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                self.connection = sqlite3.connect(path, isolation_level=None,
                                                  timeout=SQLITE_LOCK_WAIT_S)
            self.connection.execute("PRAGMA foreign_keys = ON")
        elif parsed.get_backend_name() == POSTGRESQL:
            if parsed.host is not None and "@" in parsed.host:
                raise ValueError("not a usable PostgreSQL URL: more than one @ before the host "
                                 "(write an @ in the password as %40)")
            self.backend = POSTGRESQL
            self.placeholder = "%s"
            settings = []
            if schema is not None:
                if not _SCHEMA_NAME.match(schema):
                    raise ValueError(f"not a plain schema name: {schema!r} (lower-case letters, "
                                     "digits and underscores, not starting with a digit)")
                settings.append(f"-c search_path={schema}")
            if read_only:
                settings.append("-c default_transaction_read_only=on")
            self.connection = psycopg2.connect(**_pg_arguments(parsed, settings))
        else:
            raise ValueError("unsupported TAUdb URL (sqlite:/// or postgresql://): "
                             f"{masked_url(url)}")

    @contextmanager
    def transaction(self) -> Iterator:
        """A cursor inside one transaction: committed on success, rolled back on any error.

        SQLite takes the write lock at once (``BEGIN IMMEDIATE``), so ids read
        inside the transaction stay free until it ends.
        """
        cursor = self.connection.cursor()
        if self.backend == SQLITE:
            cursor.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            self.connection.rollback()
            raise
        else:
            self.connection.commit()
        finally:
            cursor.close()

    def sql(self, statement: str) -> str:
        """``statement`` written with ``?`` markers, in this driver's marker style."""
        return statement if self.placeholder == "?" else statement.replace("?", "%s")

    def query(self, statement: str, params: tuple = ()) -> list[tuple]:
        """Rows of one read-only statement (``?`` markers), in its own transaction."""
        with self.transaction() as cursor:
            cursor.execute(self.sql(statement), params)
            return cursor.fetchall()

    def lock_sources(self, cursor, source_keys: Iterable[str]) -> None:
        """Hold, until the transaction ends, the locks of loads from ``source_keys``.

        Two loads that replace the same source's trial must not interleave:
        both would delete the old trial and both insert, leaving two. SQLite's
        write lock (:meth:`transaction`) already serialises every load; on
        PostgreSQL transaction-scoped advisory locks serialise the loads of one
        source only. A key's lock is one of :data:`SOURCE_LOCK_BUCKETS` (a digest
        of the key), so a load of many trials holds at most that many locks
        (PostgreSQL's lock table is shared and bounded), taken in ascending order,
        so that two loads of overlapping keys cannot deadlock. Their first key is
        :data:`SOURCE_LOCK_CLASS`, apart from Joulehouse's other advisory locks.
        """
        if self.backend != POSTGRESQL:
            return
        buckets = {int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
                   % SOURCE_LOCK_BUCKETS for key in source_keys}
        for bucket in sorted(buckets):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", (SOURCE_LOCK_CLASS, bucket))

    def skip_reference_checks(self, cursor) -> bool:
        """For the rest of the transaction, skip the per-row foreign-key checks if allowed.

        Only a PostgreSQL superuser may (``SET LOCAL session_replication_role =
        replica``, as ``pg_restore --disable-triggers`` does); the checks are
        most of a COPY's cost. For rows that reference only rows of the same
        transaction, as the loader's do. True when skipped.
        """
        if self.backend != POSTGRESQL:
            return False
        cursor.execute("SELECT current_setting('is_superuser') = 'on'")
        if not cursor.fetchone()[0]:
            return False
        cursor.execute("SET LOCAL session_replication_role = replica")
        return True

    def allocate_ids(self, cursor, counts: dict[str, int]) -> dict[str, np.ndarray]:
        """Fresh ids of each table's ``id`` column, ``counts[table]`` of them, taken inside
        ``cursor``'s transaction.

        PostgreSQL: from the tables' sequences in one statement (a range per
        table when contiguous, else the list). SQLite: the next ids after the
        AUTOINCREMENT counter, which inserting them moves on; the write lock
        of :meth:`transaction` keeps them free meanwhile.
        """
        ids = {table: np.empty(0, dtype="int64") for table, count in counts.items() if count == 0}
        wanted = {table: count for table, count in counts.items() if count > 0}
        if self.backend == POSTGRESQL and wanted:
            cursor.execute(
                "SELECT t, min(v), CASE WHEN max(v) - min(v) + 1 = count(*) THEN NULL "
                "ELSE array_agg(v ORDER BY v) END FROM (SELECT t, nextval(s) AS v "
                "FROM unnest(%s::text[], %s::regclass[], %s::int[]) AS u(t, s, n), "
                "generate_series(1, n)) AS taken GROUP BY t",
                (list(wanted), [f"{table}_id_seq" for table in wanted], list(wanted.values())))
            for table, first, scattered in cursor.fetchall():
                ids[table] = (np.arange(first, first + wanted[table], dtype="int64")
                              if scattered is None else np.array(scattered, dtype="int64"))
        else:
            for table, count in wanted.items():
                cursor.execute("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = ?), "
                               "0)", (table,))
                first = cursor.fetchone()[0] + 1
                ids[table] = np.arange(first, first + count, dtype="int64")
        return ids

    @contextmanager
    def bulk_writer(self, cursor) -> Iterator[Callable[[str, pd.DataFrame], None]]:
        """A ``write(table, frame)`` that hands tables to :meth:`write_rows`, in call order.

        PostgreSQL: a writer thread runs them, so the caller builds the next
        table while the server copies the last (psycopg2 releases the GIL
        while it waits); the caller must not use ``cursor`` inside the block.
        Leaving the block waits for every write and raises the first write's
        error; after an error (of a write or of the caller) the queued tables
        are dropped, so the transaction can only roll back. SQLite writes at
        once (a connection belongs to its thread).
        """
        if self.backend != POSTGRESQL:
            yield lambda table, frame: self.write_rows(cursor, table, frame)
            return
        pending: queue.SimpleQueue = queue.SimpleQueue()
        failed: list[BaseException] = []
        stop = threading.Event()

        def run() -> None:
            while (item := pending.get()) is not None:
                if stop.is_set():
                    continue
                try:
                    self.write_rows(cursor, *item)
                except BaseException as error:  # noqa: BLE001 -- raised in the caller's thread
                    failed.append(error)
                    stop.set()

        def write(table: str, frame: pd.DataFrame) -> None:
            if failed:
                raise failed[0]
            pending.put((table, frame))

        writer = threading.Thread(target=run, name="taudb-bulk-writer", daemon=True)
        writer.start()
        try:
            yield write
        except BaseException:
            stop.set()
            raise
        finally:
            pending.put(None)
            writer.join()
        if failed:
            raise failed[0]

    def write_rows(self, cursor, table: str, frame: pd.DataFrame) -> None:
        """Insert every row of ``frame`` (columns named as ``table``'s) in bulk.

        The one backend-specific write: COPY on PostgreSQL (binary for
        all-numeric frames, text otherwise), ``executemany`` on SQLite. NULLs
        are ``pd.NA`` / ``None``; float NaN is a value.
        """
        if frame.empty:
            return
        if self.backend == SQLITE:
            columns = ", ".join(frame.columns)
            marks = ", ".join("?" * len(frame.columns))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})",
                               zip(*(_python_values(frame[c]) for c in frame.columns)))
        elif all(frame[c].dtype.kind in "iufb" for c in frame.columns):
            _copy_binary(cursor, table, frame)
        else:
            buffer = io.StringIO(_copy_text(frame))
            cursor.copy_expert(f"COPY {table} ({', '.join(frame.columns)}) FROM STDIN",
                               buffer, size=COPY_CHUNK)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pg_arguments(parsed, settings: list[str]) -> dict[str, str | int | None]:
    """psycopg2's keyword arguments for a parsed PostgreSQL URL: its parts, then its query
    keys (libpq's: ``?sslmode=require``, ``?host=/run/postgresql`` for a socket).

    A query ``options`` is kept, followed by ``settings`` (``-c`` options that
    must win: read-only, search_path); a query key that repeats itself or a
    part of the URL (``postgresql://h/db?host=other``) is refused.
    """
    arguments = {"host": parsed.host, "port": parsed.port, "user": parsed.username,
                 "password": parsed.password, "dbname": parsed.database}
    options = list(settings)
    repeated = [(key, len(value)) for key, value in parsed.query.items()
                if isinstance(value, tuple)]  # SQLAlchemy's form of a key given more than once
    if repeated:
        raise ValueError(f"not a usable PostgreSQL URL: query key {repeated[0][0]!r} given "
                         f"{repeated[0][1]} times")
    for key, value in parsed.query.items():
        if key == "options":
            options.insert(0, value)
        elif arguments.get(key) is not None:
            raise ValueError(f"not a usable PostgreSQL URL: query key {key!r} repeats what "
                             "the URL already says")
        else:
            arguments[key] = value
    arguments["options"] = " ".join(options) or None
    return arguments


def _open_sqlite_read_only(url: str, path: str) -> sqlite3.Connection:
    """An existing SQLite file opened read-only (``mode=ro``); nothing is created."""
    file = Path(path)
    if not file.is_file():
        what = "a folder, not a database file" if file.is_dir() else (
            "no such database file" if file.parent.is_dir() else
            f"no such database file (no folder {file.parent})")
        raise TaudbUnavailable(url, what)
    return sqlite3.connect(f"{file.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None)


def _python_values(column: pd.Series) -> list:
    """A column as Python values for a DBAPI driver (``pd.NA`` -> None)."""
    if column.dtype.kind in "iufb":
        return column.to_numpy().tolist()
    return column.astype(object).where(column.notna(), None).tolist()


#: COPY text format escapes, backslash first (the others add backslashes).
_TEXT_ESCAPES = [("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")]


def _copy_text(frame: pd.DataFrame) -> str:
    """``frame`` in PostgreSQL's COPY text format, built column by column.

    Fields are tab-separated, rows end in a newline, NULL (``pd.NA`` /
    ``None``) is a bare ``\\N``; in every other non-numeric value backslash,
    tab, newline and carriage return are escaped, so a string ``\\N`` stays a
    string. Numbers are written as ``str`` writes them (floats round-trip
    exactly); float NaN is a value (``nan``).
    """
    fields = []
    for c in frame.columns:
        column = frame[c]
        if isinstance(column.dtype, np.dtype) and column.dtype.kind in "iufb":
            fields.append(pd.Series(column.to_numpy().astype(str), dtype=object))
            continue
        null = column.isna().to_numpy()
        values = column[~null].astype(str)
        for raw, escaped in _TEXT_ESCAPES:
            values = values.str.replace(raw, escaped, regex=False)
        text = np.full(len(frame), "\\N", dtype=object)
        text[~null] = values.to_numpy(dtype=object)
        fields.append(pd.Series(text, dtype=object))
    rows = fields[0].str.cat(fields[1:], sep="\t") if len(fields) > 1 else fields[0]
    return "\n".join(rows.tolist()) + "\n"


# PostgreSQL binary COPY: field types by pandas dtype kind (INT columns, DOUBLE PRECISION, BOOLEAN)
_BINARY_TYPES = {"i": ">i4", "u": ">i4", "f": ">f8", "b": "?"}
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_BINARY_TRAILER = b"\xff\xff"
COPY_CHUNK = 1 << 20  # bytes handed to libpq per call


def _copy_binary(cursor, table: str, frame: pd.DataFrame) -> None:
    """COPY an all-numeric frame in PostgreSQL's binary format, built with numpy.

    Rows are grouped by which columns are NULL (``pd.NA``); each group is
    copied with only its non-NULL columns (the others take their default,
    NULL). Float NaN is a value.
    """
    nullable = [c for c in frame.columns if frame[c].dtype.kind != "f" and frame[c].hasnans]
    if not nullable:
        _copy_packed(cursor, table, frame)
        return
    for pattern, rows in frame.groupby([frame[c].isna() for c in nullable], sort=False):
        pattern = pattern if isinstance(pattern, tuple) else (pattern,)
        null = {c for c, is_null in zip(nullable, pattern) if is_null}
        _copy_packed(cursor, table, rows[[c for c in frame.columns if c not in null]])


def _copy_packed(cursor, table: str, frame: pd.DataFrame) -> None:
    """COPY a frame without NULLs: one numpy record per row (field count, then length + value)."""
    dtype = [("count", ">i2")]
    for i, c in enumerate(frame.columns):
        dtype += [(f"len{i}", ">i4"), (f"val{i}", _BINARY_TYPES[frame[c].dtype.kind])]
    packed = np.empty(len(frame), dtype=np.dtype(dtype))
    packed["count"] = len(frame.columns)
    for i, c in enumerate(frame.columns):
        field = packed.dtype[f"val{i}"]
        packed[f"len{i}"] = field.itemsize
        packed[f"val{i}"] = frame[c].to_numpy(dtype=field.newbyteorder("="))
    payload = io.BytesIO(_BINARY_HEADER + packed.tobytes() + _BINARY_TRAILER)
    cursor.copy_expert(f"COPY {table} ({', '.join(frame.columns)}) FROM STDIN WITH (FORMAT binary)",
                       payload, size=COPY_CHUNK)
