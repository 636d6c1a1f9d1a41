"""The Dagster instance's storage, writing a batch of asset events as ONE write.

Dagster hands its event log storage whole batches (``store_event_batch``) where
``DAGSTER_EVENT_BATCH_SIZE`` is set: the planned events of a new run (one per
partition and asset: 20,000 for a backfill of 10,000 GPU repetitions), a step's
materializations of a partition range, and the sensors' hand-outs
(``sensors/tick_budget.py``). Dagster 1.13's storages write most of them one by one
all the same: SQLite every event (two transactions on two new connections each,
12-22 ms here), dagster-postgres every event but a batch of one kind of
materializations or observations (a new connection each, 27-30 ms). Those planned
events are what bounds the first registration of a large tree and the launch of a
large backfill (benchmarks/README.md, issue 11).

The two storages here write such a batch as a batch: every event inserted in one
transaction (SQLite: per run shard, then mirrored into the index shard; PostgreSQL:
one ``INSERT ... RETURNING``), and in the same index transaction their tags, the check
rows, and each asset's row updated once per kind of event, from the batch's last event
of that kind, which is the row the events written one by one would leave. Every event
keeps its own row with its partition, so a failed run still marks exactly the
partitions it planned and did not materialize as failed. Any other batch (a run's
status, a failure) takes Dagster's own path. A planned check's rows, one per partition,
each carry the event narrowed to their partition (Dagster stores the whole event, all
the run's partitions, in each row: quadratic).

They also keep connections open where Dagster opens one per event: SQLite's index
shard (every asset and check event is mirrored there; opening it, then closing it,
which checkpoints its WAL, was half of an event's cost), each thread's run shard of the
run it writes (its file touched after each write: the UI's live run logs watch it), and
PostgreSQL's (:func:`process_engine`). That is what the events Dagster writes one by one
cost: a step's per-partition check evaluations, and its materializations when some
partitions failed.

On PostgreSQL, dagster-postgres opens a new connection for every statement of its three
storages (``NullPool``), and a new instance, three more for its schema reflection: a
code server makes an instance for every sensor tick it evaluates. Each connection is a
new server process for PostgreSQL to start and authenticate; in the soak's short mode
(about 25 a second) that was most of PostgreSQL's CPU, a fifth of the host's: its
statements took 6.5 s of 74 (benchmarks/README.md, "PostgreSQL's connections"). Here the
three storages of every instance of a process share one small pool of that database's
connections, each checked before use (so a restarted server is reconnected to), and an
instance's schema reflection is one query on it, not three on new connections.

And SQLite's storage opens a database already at Dagster's head revision (its runs,
schedules and event index; each run shard) without Dagster's checks, which ask alembic
for that head each time: alembic reads every migration script to tell (about 35 ms of
CPU), found here once per process. Every instance pays that opening: each sensor tick's
in a code server, each run's, each test's. Configured in ``dagster.yaml`` as ``storage:
custom`` (deploy/).

Both keep the True answers of Dagster's schema checks, "is this table or column there?"
(:class:`_KeptTrue`, one helper for the three storages of each): Dagster asks them over
SQLAlchemy's reflection at every instigator state read and write (each sensor tick's
cursor), asset record read, run added or started, each a catalog query on PostgreSQL (27 %
of its busy time in the production soak, benchmarks/README.md "Schema checks") and a new
engine and connection as well on SQLite. A table or column is added by ``dagster instance
migrate`` and never dropped while processes run, so a True answer is kept for the
storage's life and a False one asked again. ``BatchingPostgresStorage`` builds its three
storages itself (Dagster's ``__init__`` would build three more, each reflecting the schema
at every process start, to be replaced).

What here leans on Dagster's private API, to re-check at each Dagster upgrade (the tests
of tests/dagster/test_instance_storage.py fail where one is renamed, re-signed or gone:
``test_every_override_names_a_dagster_method_of_the_same_signature`` for the kept checks):

- ``DagsterSqliteStorage.__init__`` and ``DagsterPostgresStorage.__init__`` replaced
  (their attributes set here: ``test_*_storage_sets_what_dagsters_own_storage_sets``);
- the event logs' private methods overridden: ``_store_asset_check_evaluation_planned``
  (each planned check row's own partition), SQLite's ``_initdb`` (a new run shard copied)
  and PostgreSQL's ``_connect`` (a forked child's own pool); and the private helpers and
  attributes called (``_event_to_row``, ``_store_asset_event_tags``, ``_store_asset_event``,
  ``_event_insert_timestamp``, SQLite's ``_db_lock`` and ``_initialized_dbs``), and
  PostgreSQL's ``_engine`` replaced by the process's pool, and its storages built with
  ``should_autocreate_tables`` off when the reflection here found their tables
  (:data:`POSTGRES_MAIN_TABLES`: the tables whose absence each dagster-postgres storage's
  ``__init__`` checks, ``test_postgres_storage_creates_a_missing_table_as_dagster_does``);
- the schema checks whose True answers are kept: the schedule storages'
  ``_has_instigators_table``, ``has_instigators_table``,
  ``_has_asset_daemon_asset_evaluations_table``, ``has_secondary_index_table``; the run
  storages' ``has_run_stats_index_cols``, ``has_backfill_id_column``,
  ``has_bulk_actions_selector_cols``, ``has_bulk_action_job_name_column``,
  ``has_backfill_tags_table``; the event logs' ``has_table``, ``supports_asset_checks``,
  ``has_asset_key_col`` and ``_has_asset_key_col_on_connection`` (a new such check in Dagster is simply asked each
  time, as before, until it is added here).
"""

import inspect
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.event_api import EventLogEntry
from dagster._core.events import (
    ASSET_CHECK_EVENTS,
    ASSET_EVENTS,
    EVENT_TYPE_TO_PIPELINE_RUN_STATUS,
    DagsterEventType,
)
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionRecordStatus,
)
from dagster._core.storage.event_log import SqlEventLogStorageTable
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
)
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import (
    SqliteScheduleStorage,
)
from dagster._core.storage.sql import get_alembic_config
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, create_db_conn_string
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._record import copy
from dagster._serdes import serialize_value
from dagster_postgres import (
    DagsterPostgresStorage,
    PostgresEventLogStorage,
    PostgresRunStorage,
    PostgresScheduleStorage,
)
from dagster_postgres.utils import (
    create_pg_engine,
    get_token_provider_from_config,
    pg_url_from_config,
    retry_pg_connection_fn,
)

LOGGER = logging.getLogger(__name__)

#: The events written here as one batch; any other kind in a batch sends it to Dagster.
BATCHED = frozenset({
    DagsterEventType.ASSET_MATERIALIZATION,
    DagsterEventType.ASSET_OBSERVATION,
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
})


def batched(events: Sequence[EventLogEntry]) -> bool:
    """Whether ``events`` are all of the kinds written here as one batch."""
    return bool(events) and all(
        event.is_dagster_event and event.dagster_event_type in BATCHED for event in events)


def is_asset_event(event: EventLogEntry) -> bool:
    """Whether the storage indexes ``event`` by its asset (tags, the asset's row)."""
    return event.dagster_event_type in ASSET_EVENTS and event.get_dagster_event().asset_key is not None


def asset_row_updates(events: Sequence[EventLogEntry], ids: Sequence[int]
                      ) -> list[tuple[EventLogEntry, int]]:
    """The (event, storage id) pairs whose asset-row updates leave the row as writing
    ``events`` one by one would: the last event of each asset and kind, in their order
    (an event of a kind overwrites what the earlier ones of its kind wrote there)."""
    last: dict[tuple[str, DagsterEventType], int] = {}
    for position, event in enumerate(events):
        last[(event.get_dagster_event().asset_key.to_string(), event.dagster_event_type)] = position
    return [(events[position], ids[position]) for position in sorted(last.values())]


def planned_per_partition(event: EventLogEntry) -> Iterator[tuple[str | None, str]]:
    """(partition, serialized event) of each row of a planned check event: the event with
    its partitions subset narrowed to the row's partition (``None`` and the event as it is
    when its subset is missing or empty, as Dagster writes that row).

    Dagster 1.13 stores the whole event, its subset of all the run's partitions included,
    in every row: a run over 10,000 partitions wrote 10,000 rows of 315 KB per check (22 GB
    of index after about 56,000 partitions registered; its creation quadratic in the run's
    partitions: benchmarks/README.md, "Third cut"). Nothing reads a planned row's subset
    (the run's own planned event, in its log, keeps the whole subset); its partition is
    the row's."""
    planned = event.get_dagster_event().event_specific_data
    if not planned.partitions_subset:
        yield None, serialize_value(event)
        return
    empty = planned.partitions_subset.empty_subset()
    for key in planned.partitions_subset.get_partition_keys():
        own = copy(planned, partitions_subset=empty.with_partition_keys([key]))
        yield key, serialize_value(event._replace(
            dagster_event=event.dagster_event._replace(event_specific_data=own)))


class _KeptTrue:
    """A storage's True answers of its schema checks, kept for the storage's life.

    Dagster asks its storages, at every write and many reads, whether a table or column
    that a migration added is there: an instigator state read or written (every sensor
    tick's cursor), every asset event stored, every run added or updated. Each asking is a
    reflection query (``sqlalchemy.inspect(conn).get_table_names()`` or ``get_columns``;
    PostgreSQL: a query of its catalog, 27 % of its busy time in the production soak;
    SQLite: a new engine and connection as well). A table or column is added by
    ``dagster instance migrate`` and never dropped while processes run (a wipe empties
    tables), so an answer can only turn from False to True: a True answer is kept, a False
    one asked again next time."""

    def _kept_true(self, key: str, ask: Callable[..., bool], *args) -> bool:
        """Whether ``key`` is there: True if a former ``ask(*args)`` said so, else asked."""
        kept = self.__dict__.setdefault("_kept_true_answers", set())
        if key in kept:
            return True
        if ask(*args):
            kept.add(key)  # a set's add: safe across threads (the GIL)
            return True
        return False


class _KeptScheduleSchema(_KeptTrue):
    """A schedule storage's table checks (Dagster's ``SqlScheduleStorage``) with their
    True answers kept (:class:`_KeptTrue`): asked at every instigator state read and write,
    and before every secondary index lookup."""

    def has_instigators_table(self) -> bool:
        return self._kept_true("instigators", super().has_instigators_table)

    def _has_instigators_table(self, conn: sa.Connection) -> bool:
        return self._kept_true("instigators", super()._has_instigators_table, conn)

    def _has_asset_daemon_asset_evaluations_table(self, conn: sa.Connection) -> bool:
        return self._kept_true("asset_daemon_asset_evaluations",
                               super()._has_asset_daemon_asset_evaluations_table, conn)

    def has_secondary_index_table(self) -> bool:
        return self._kept_true("secondary_indexes", super().has_secondary_index_table)


class _KeptRunSchema(_KeptTrue):
    """A run storage's column and table checks (Dagster's ``SqlRunStorage``) with their
    True answers kept (:class:`_KeptTrue`): asked when a run is added, its status changes,
    runs are read, a backfill is added."""

    def has_run_stats_index_cols(self) -> bool:
        return self._kept_true("runs.start_time,end_time", super().has_run_stats_index_cols)

    def has_backfill_id_column(self) -> bool:
        return self._kept_true("runs.backfill_id", super().has_backfill_id_column)

    def has_bulk_actions_selector_cols(self) -> bool:
        return self._kept_true("bulk_actions.selector_id",
                               super().has_bulk_actions_selector_cols)

    def has_bulk_action_job_name_column(self) -> bool:
        return self._kept_true("bulk_actions.job_name", super().has_bulk_action_job_name_column)

    def has_backfill_tags_table(self) -> bool:
        return self._kept_true("backfill_tags", super().has_backfill_tags_table)


class _AssetEventIndex(_KeptTrue):
    """What both storages share: a batch's index writes (the asset events' tags and rows,
    the check events' rows) in ONE transaction of the index, so nobody sees an event
    whose asset row is not updated yet and a failure leaves none of them. Inside that
    transaction ``index_connection()`` gives its connection again (the storage's
    check-row writes open one themselves)."""

    @contextmanager
    def index_connection(self) -> Iterator[sa.Connection]:
        held = self._held_index.__dict__.get("connection")
        if held is not None:
            yield held
            return
        with self._open_index_connection() as conn:
            self._held_index.connection = conn
            try:
                yield conn
            finally:
                self._held_index.connection = None

    @property
    def _held_index(self) -> threading.local:
        """This thread's index connection while one is open (see the class docstring)."""
        return self.__dict__.setdefault("_held_index_local", threading.local())

    def _open_index_connection(self):
        return super().index_connection()

    @property
    def supports_asset_checks(self) -> bool:
        """Whether the check table exists: Dagster asks at every check event (SQLite: over a
        new engine of the index shard; PostgreSQL: a query). A True answer is kept
        (:class:`_KeptTrue`)."""
        return self._kept_true("asset_check_executions",
                               lambda: super(_AssetEventIndex, self).supports_asset_checks)

    def has_table(self, table_name: str) -> bool:
        """Whether the index has ``table_name``: Dagster asks before every read of a dynamic
        partitions definition's keys, several times per partition when it creates a run
        (SQLite: over a new engine and connection each time, 1,653 times in the 33 runs of
        test_clustercockpit_assets.py). A True answer is kept (:class:`_KeptTrue`)."""
        return self._kept_true(table_name, super().has_table, table_name)

    def has_asset_key_col(self, column_name: str) -> bool:
        """Whether the ``asset_keys`` table has ``column_name`` (the asset status cache's
        column, asked at every read and write of it). A True answer is kept."""
        return self._kept_true(f"asset_keys.{column_name}", super().has_asset_key_col,
                               column_name)

    def _has_asset_key_col_on_connection(self, conn: sa.Connection, column_name: str) -> bool:
        """The same, on ``conn``: Dagster asks at every asset event it stores."""
        return self._kept_true(f"asset_keys.{column_name}",
                               super()._has_asset_key_col_on_connection, conn, column_name)

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry,
                                              event_id: int | None) -> None:
        """Dagster's rows of a planned check, one per partition, each row's event the
        planned event narrowed to that row's partition (:func:`planned_per_partition`)."""
        planned = event.get_dagster_event().event_specific_data
        row = {"asset_key": planned.asset_key.to_string(), "check_name": planned.check_name,
               "run_id": event.run_id,
               "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value,
               "evaluation_event_timestamp": self._event_insert_timestamp(event),
               "evaluation_event_storage_id": event_id}
        with self.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.insert(), [
                {**row, "partition": key, "evaluation_event": serialized}
                for key, serialized in planned_per_partition(event)])

    def _index_rows(self, conn: sa.Connection, events: Sequence[EventLogEntry],
                    ids: Sequence[int]) -> None:
        """The tags, asset rows and check rows of ``events`` (stored with ``ids``), on
        ``conn``, the index transaction they were inserted in."""
        assets = [(event, event_id) for event, event_id in zip(events, ids, strict=True)
                  if is_asset_event(event)]
        if assets:
            asset_events, asset_ids = zip(*assets, strict=True)
            self._store_asset_event_tags(conn, list(asset_events), list(asset_ids))
            for event, event_id in asset_row_updates(asset_events, asset_ids):
                self._store_asset_event(conn, event, event_id)
        for event, event_id in zip(events, ids, strict=True):
            if event.dagster_event_type in ASSET_CHECK_EVENTS:
                self.store_asset_check_event(event, event_id)


#: Most events in one SQLite transaction (about 0.5 s of writing), so that another
#: process waiting for the shard's lock is never near SQLite's 30 s busy timeout.
SQLITE_CHUNK = 1000


def _chunks(events: Sequence[EventLogEntry]) -> list[slice]:
    """``events`` cut into runs of one run's events, at most :data:`SQLITE_CHUNK` each (a
    chunk is one transaction of its run shard: all of it stored, or none)."""
    chunks, start = [], 0
    for position in range(1, len(events) + 1):
        if (position == len(events) or position - start == SQLITE_CHUNK
                or events[position].run_id != events[start].run_id):
            chunks.append(slice(start, position))
            start = position
    return chunks


@cache
def _alembic_head() -> str:
    """The head revision of Dagster's storage migrations (one script location for its run,
    event log and schedule storages), found once per process. Dagster asks alembic for it
    at every SQLite database it opens (a storage's runs, schedules and event index, each run
    shard), and alembic reads every migration script to tell (about 35 ms of CPU each)."""
    config = get_alembic_config(inspect.getfile(SqliteRunStorage))
    return ScriptDirectory.from_config(config).as_revision_number("head")


def _at_head(engine: sa.Engine, *tables: str) -> bool:
    """Whether ``engine``'s SQLite database exists, stamped with :func:`_alembic_head` and
    holding ``tables``: then Dagster's checks when it opens it find nothing to create, stamp
    or migrate."""
    database = engine.url.database
    if database in (None, "", ":memory:") or not Path(database).exists():
        return False
    with engine.connect() as conn:
        return (MigrationContext.configure(conn).get_current_revision() == _alembic_head()
                and all(sa.inspect(conn).has_table(table) for table in tables))


def _opened(storage: type, folder: str, name: str, *tables: str):
    """Dagster's SQLite run or schedule storage of the database ``name`` in ``folder``
    (``storage.from_local``), made without its checks where the database is
    :func:`_at_head` with ``tables``."""
    conn_string = create_db_conn_string(folder, name)
    engine = sa.create_engine(conn_string, poolclass=sa.pool.NullPool)
    try:
        ready = _at_head(engine, *tables)
    finally:
        engine.dispose()
    return storage(conn_string) if ready else storage.from_local(folder)


@cache
def _empty_run_shard() -> bytes:
    """The file of an empty run shard as Dagster's ``_initdb`` creates it (its tables, WAL
    journal mode, alembic's head revision stamped, no rows), made once per process."""
    with tempfile.TemporaryDirectory(prefix="joulehouse-run-shard-") as folder:
        path = Path(folder) / "empty.db"
        engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.NullPool)
        try:
            SqliteEventLogStorage._initdb(None, engine)  # uses no state of its storage
        finally:
            engine.dispose()  # the last connection closed: the WAL checkpointed into the file
        return path.read_bytes()


class BatchedSqliteEventLogStorage(_AssetEventIndex, SqliteEventLogStorage):
    """SQLite's event log with batches written in one transaction per shard (and per
    :data:`SQLITE_CHUNK` events).

    A failure stores nothing twice: Dagster stores a batch whose write raised again one
    event at a time, so a write that fails before anything of the batch is stored
    raises; once some of it is in a run shard, nothing is raised any more: the rest is
    finished here (the index writes event by event, the events not stored by
    Dagster's own ``store_event``), and what still fails is logged, never stored twice
    (a planned check's rows twice would fail its run's evaluations)."""

    def store_event(self, event: EventLogEntry) -> None:
        """Dagster's, over this thread's kept connection of the run shard
        (:meth:`_run_shard`), an asset or check event's copy in the index with its rows in
        ONE index transaction (Dagster: two for a check event)."""
        row = self._event_to_row(event)
        with self._run_shard(event.run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), row)
        if event.is_dagster_event and event.dagster_event_type in EVENT_TYPE_TO_PIPELINE_RUN_STATUS:
            with self.index_connection() as conn:  # the runs' status changes, as Dagster
                conn.execute(SqlEventLogStorageTable.insert(), row)
        else:
            self._index([event], [row])

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not batched(events):
            super().store_event_batch(events)
            return
        rows = [self._event_to_row(event) for event in events]
        for position, chunk in enumerate(_chunks(events)):
            try:
                with self._run_shard(events[chunk.start].run_id) as conn:
                    conn.execute(SqlEventLogStorageTable.insert(), rows[chunk])
            except Exception:
                if position == 0:
                    raise  # nothing stored: Dagster stores the batch one by one
                self._each(lambda event, _: SqliteEventLogStorage.store_event(self, event),
                           events[chunk.start:], rows[chunk.start:])
                return
            try:
                self._index(events[chunk], rows[chunk])
            except Exception:  # noqa: BLE001 - in the run shard already: never stored twice
                self._each(lambda event, row: self._index([event], [row]),
                           events[chunk], rows[chunk])

    @staticmethod
    def _each(store: Callable[[EventLogEntry, dict], None],
              events: Sequence[EventLogEntry], rows: Sequence[dict]) -> None:
        """``store(event, row)`` for each event; an error is logged, not raised (raised,
        Dagster would store the whole batch again)."""
        for event, row in zip(events, rows, strict=True):
            try:
                store(event, row)
            except Exception:
                LOGGER.exception("event of run %s not stored: %s", event.run_id,
                                 event.dagster_event_type)

    def _index(self, events: Sequence[EventLogEntry], rows: Sequence[dict]) -> None:
        """The index shard's copy of the asset and check events (ids of its own), their
        tags and rows, in one transaction."""
        mirrored = [(event, row) for event, row in zip(events, rows, strict=True)
                    if event.is_dagster_event and (
                        is_asset_event(event) or event.dagster_event_type in ASSET_CHECK_EVENTS)]
        if not mirrored:
            return
        with self.index_transaction() as conn:
            ids = conn.execute(
                SqlEventLogStorageTable.insert().returning(
                    SqlEventLogStorageTable.c.id, sort_by_parameter_order=True),
                [row for _, row in mirrored]).scalars().all()
            self._index_rows(conn, [event for event, _ in mirrored], ids)

    @contextmanager
    def _open_index_connection(self) -> Iterator[sa.Connection]:
        """The index shard in a transaction, over an engine kept for this process."""
        with self._db_lock:
            engine = self._index_engine()
            with engine.connect() as conn, conn.begin():
                yield conn

    def _index_engine(self) -> sa.Engine:
        """This process's engine of the index shard (a forked child makes its own, leaving
        its parent's connections alone)."""
        kept = getattr(self, "_kept_index", None)
        if kept is not None and kept[0] == os.getpid():
            return kept[1]
        if kept is not None:
            kept[1].dispose(close=False)
        engine = self._shard_engine(INDEX_SHARD_NAME)
        self._kept_index = (os.getpid(), engine)
        return engine

    def _initdb(self, engine: sa.Engine, for_index_shard: bool = False) -> None:
        """Dagster's, but a shard that does not exist yet is made a copy of an empty run
        shard (:func:`_empty_run_shard`): Dagster creates its tables and stamps its alembic
        revision, building alembic's revision map from every migration script twice (about
        0.1 s of CPU for each new run, most of it in that map). The copy, written to a
        hidden file with SQLite's own mode (0644 less the umask), is linked into place, so
        a shard another process created meanwhile is never overwritten; then, or where the
        file system has no hard links, Dagster's own path checks or creates it."""
        database = engine.url.database
        if _at_head(engine):
            return  # Dagster's checks would find nothing to do
        if for_index_shard or database in (None, "", ":memory:") or Path(database).exists():
            super()._initdb(engine, for_index_shard)
            return
        path = Path(database)
        empty = _empty_run_shard()
        new = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            with os.fdopen(os.open(new, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644),
                           "wb") as file:
                file.write(empty)
            os.link(new, path)
        except OSError:
            super()._initdb(engine, for_index_shard)
        finally:
            new.unlink(missing_ok=True)

    def _shard_engine(self, shard: str, **options) -> sa.Engine:
        """An engine of ``shard``'s database file as Dagster's ``_connect`` makes one (its
        busy timeout), its tables created at the first use in this storage."""
        connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, **options.pop("connect_args", {})}
        engine = sa.create_engine(self.conn_string_for_shard(shard), connect_args=connect_args,
                                  **options)
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        return engine

    @contextmanager
    def _run_shard(self, run_id: str) -> Iterator[sa.Connection]:
        """A transaction on this thread's connection to ``run_id``'s shard, kept between
        writes (Dagster opens and closes one per event, most of a check evaluation's cost:
        benchmarks/README.md, "Second cut"); a thread writing another run's events closes
        it first, a broken one is dropped, and those of threads that ended are closed when
        a new one opens.

        After each write the shard's file is touched: the UI's live run logs (Dagster's
        watchdog on that file) read the run's new events when it changes, and a write
        stays in the WAL, leaving the file as it was, until a checkpoint copies it (with
        Dagster's connection per event, when the last connection to the shard closed)."""
        key = (os.getpid(), threading.get_ident())
        with self._db_lock:
            kept = self._run_shards.get(key)
            if kept is not None and kept[0] != run_id:
                del self._run_shards[key]
                kept[1].close()
                kept = None
            if kept is None:
                self._close_ended_threads_run_shards()
                engine = self._shard_engine(run_id, poolclass=sa.pool.NullPool,
                                            connect_args={"check_same_thread": False})
                kept = self._run_shards[key] = (run_id, engine.connect())
        conn = kept[1]
        try:
            with conn.begin():
                yield conn
        except BaseException:
            self._close_run_shards(key)
            raise
        try:
            os.utime(self.path_for_shard(run_id))
        except OSError:  # stored all the same: the watchers see it at the next write
            LOGGER.warning("run shard of %s not touched", run_id, exc_info=True)

    def _close_ended_threads_run_shards(self) -> None:
        """Close the kept connections of this process's threads that ended (called with
        ``_db_lock`` held)."""
        alive = {thread.ident for thread in threading.enumerate()}
        for key in [key for key in self._run_shards
                    if key[0] == os.getpid() and key[1] not in alive]:
            self._run_shards.pop(key)[1].close()

    @property
    def _run_shards(self) -> dict[tuple[int, int], tuple[str, sa.Connection]]:
        """(pid, thread) -> the run and connection :meth:`_run_shard` keeps; a forked
        child finds its parent's under another pid and leaves them alone."""
        return self.__dict__.setdefault("_kept_run_shards", {})

    def _close_run_shards(self, *keys: tuple[int, int]) -> None:
        """Close the kept run-shard connections of ``keys`` (default: all of this process)."""
        with self._db_lock:
            for key in keys or [key for key in self._run_shards if key[0] == os.getpid()]:
                kept = self._run_shards.pop(key, None)
                if kept is not None:
                    kept[1].close()

    def wipe(self) -> None:
        self._close_run_shards()
        super().wipe()

    def dispose(self) -> None:
        self._close_run_shards()
        kept = getattr(self, "_kept_index", None)
        if kept is not None and kept[0] == os.getpid():
            kept[1].dispose()
        self._kept_index = None
        super().dispose()


#: Connections to a PostgreSQL database kept open per process, shared by the three
#: storages of all its instances; more are opened (and closed after use) while that many
#: are in use at once, without limit: the daemon's threads never wait for one.
POSTGRES_KEPT_CONNECTIONS = 4
#: The storages' tables whose absence has dagster-postgres create them (each storage's
#: ``__init__``: the runs, instance_info, jobs and event_logs tables).
POSTGRES_MAIN_TABLES = frozenset({"runs", "instance_info", "jobs", "event_logs"})

_process_engines: dict[str, tuple[int, sa.Engine]] = {}
_process_engines_lock = threading.Lock()


def _new_process_engines_lock() -> None:
    global _process_engines_lock  # the parent's may be held by a thread the child lacks
    _process_engines_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_process_engines_lock)


def process_engine(postgres_url: str, token_provider=None) -> sa.Engine:
    """This process's engine of ``postgres_url``: a pool of
    :data:`POSTGRES_KEPT_CONNECTIONS` connections, each checked before use and renewed
    hourly, shared by every storage of every instance the process makes. A forked child
    makes its own, leaving the parent's connections to the parent."""
    with _process_engines_lock:
        pid, engine = _process_engines.get(postgres_url, (None, None))
        if pid != os.getpid():
            if engine is not None:
                engine.dispose(close=False)
            engine = create_pg_engine(
                postgres_url, token_provider, isolation_level="AUTOCOMMIT",
                poolclass=sa.pool.QueuePool, pool_size=POSTGRES_KEPT_CONNECTIONS,
                max_overflow=-1, pool_pre_ping=True, pool_recycle=3600)
            _process_engines[postgres_url] = (os.getpid(), engine)
        return engine


def _postgres_tables_there(engine: sa.Engine) -> bool:
    """Whether every table of :data:`POSTGRES_MAIN_TABLES` is in ``engine``'s database."""
    def names() -> set[str]:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    return POSTGRES_MAIN_TABLES <= retry_pg_connection_fn(names)


class _ProcessPool:
    """A dagster-postgres storage over :func:`process_engine` in place of its own engine
    (a new connection per statement), until the webserver's ``optimize_for_webserver``
    puts Dagster's pool of its own in its place, which ``dispose`` then closes."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data=None, token_provider=None):
        super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data,
                         token_provider=token_provider)
        self._use_process_engine()

    def _use_process_engine(self) -> None:
        """``_engine`` the process's (called after Dagster's ``__init__``, and in a forked
        child before its first connection)."""
        self._process_engine = self._engine = process_engine(self.postgres_url,
                                                             self._token_provider)
        self._process_engine_pid = os.getpid()

    def _engine_of_this_process(self) -> None:
        """In a forked child, the child's pool (Dagster's own engine during its
        ``__init__``, which creates the tables, and the webserver's are left alone)."""
        if (self._engine is self.__dict__.get("_process_engine")
                and self._process_engine_pid != os.getpid()):
            self._use_process_engine()

    def dispose(self) -> None:
        """The process's pool is kept for the next instance; Dagster's own is closed."""
        if self._engine is not self.__dict__.get("_process_engine"):
            self._engine.dispose()
        super().dispose()


class BatchedPostgresEventLogStorage(_ProcessPool, _AssetEventIndex, PostgresEventLogStorage):
    """dagster-postgres's event log with every batch of asset events written in one
    insert, planned events and mixed kinds included, over the process's pool."""

    def _connect(self):
        self._engine_of_this_process()
        return super()._connect()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """The events, their tags and rows in one transaction: a failure leaves none."""
        if not batched(events):
            super().store_event_batch(events)
            return
        insert = self.prepare_insert_event_batch(events)
        with self.index_transaction() as conn:
            ids = [int(row[0]) for row in
                   conn.execute(insert.returning(SqlEventLogStorageTable.c.id)).fetchall()]
            self._index_rows(conn, events, ids)


class KeptSchemaPostgresRunStorage(_ProcessPool, _KeptRunSchema, PostgresRunStorage):
    """dagster-postgres's run storage, its schema checks' True answers kept, over the
    process's pool."""

    def connect(self):
        self._engine_of_this_process()
        return super().connect()


class KeptSchemaPostgresScheduleStorage(_ProcessPool, _KeptScheduleSchema,
                                        PostgresScheduleStorage):
    """dagster-postgres's schedule storage, its schema checks' True answers kept, over the
    process's pool."""

    def connect(self, run_id: str | None = None):
        self._engine_of_this_process()
        return super().connect(run_id)


class KeptSchemaSqliteRunStorage(_KeptRunSchema, SqliteRunStorage):
    """Dagster's SQLite run storage, its schema checks' True answers kept (each check
    there: a new engine, a connection and a reflection query)."""


class KeptSchemaSqliteScheduleStorage(_KeptScheduleSchema, SqliteScheduleStorage):
    """Dagster's SQLite schedule storage, its schema checks' True answers kept."""


class BatchingSqliteStorage(DagsterSqliteStorage):
    """``storage: sqlite`` with :class:`BatchedSqliteEventLogStorage` (same files)."""

    def __init__(self, base_dir: str, inst_data=None):
        # DagsterSqliteStorage.__init__'s storages, those at head opened without alembic's
        # lookup (_opened), and the batching event log in place of Dagster's, not after it
        self.base_dir = base_dir
        self._run_storage = _opened(KeptSchemaSqliteRunStorage, _runs_directory(base_dir),
                                    "runs", "instance_info")
        self._event_log_storage = BatchedSqliteEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = _opened(KeptSchemaSqliteScheduleStorage,
                                         _schedule_directory(base_dir), "schedules")
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "BatchingSqliteStorage":
        return cls.from_local(inst_data=inst_data, **config_value)


class BatchingPostgresStorage(DagsterPostgresStorage):
    """``storage: postgres`` with :class:`BatchedPostgresEventLogStorage` and the run and
    schedule storages keeping their schema checks' True answers (same tables)."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data=None, token_provider=None):
        # DagsterPostgresStorage.__init__'s attributes, its three storages this module's in
        # place of Dagster's, not after them (each of Dagster's would open an engine and
        # reflect the schema once more at every process start, to be thrown away)
        # (and one reflection of the schema here, on the process's pool, in place of each
        # storage's on a new connection: they create their tables only where one is missing)
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        create = should_autocreate_tables and not _postgres_tables_there(
            process_engine(postgres_url, token_provider))
        self._run_storage = KeptSchemaPostgresRunStorage(
            postgres_url, create, token_provider=token_provider)
        self._event_log_storage = BatchedPostgresEventLogStorage(
            postgres_url, create, token_provider=token_provider)
        self._schedule_storage = KeptSchemaPostgresScheduleStorage(
            postgres_url, create, token_provider=token_provider)
        super(DagsterPostgresStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "BatchingPostgresStorage":
        return cls(pg_url_from_config(config_value),
                   config_value.get("should_autocreate_tables", True), inst_data=inst_data,
                   token_provider=get_token_provider_from_config(config_value))
