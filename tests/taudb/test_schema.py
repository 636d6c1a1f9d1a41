"""The TAUdb schema: created once, the same on both backends, in a schema of one's own."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import psycopg2
import pytest
from backends import BACKENDS, place
from psycopg2 import errors, sql
from small_trial import small_trial
from taudb_postgres import as_admin, taus_ddl_schema

from joulehouse.taudb import connect as taudb_connect
from joulehouse.taudb import schema as taudb_schema
from joulehouse.taudb.connect import INDEX_LOCK_CLASS, TaudbDatabase
from joulehouse.taudb.loader import _DELETES, list_trials, load_prepared, load_trial, prepare_trial
from joulehouse.taudb.schema import (
    _LOCK_INDEXES,
    INDEXES,
    LOOKUP_INDEX,
    _builds_of,
    _failure_kind,
    create_index,
    ddl,
    ddl_statements,
    ensure_indexes,
    ensure_schema,
)

TABLES = {
    "schema_version", "data_source", "derived_thread_type", "trial", "thread", "metric", "timer",
    "timer_group", "timer_parameter", "timer_callpath", "time_range", "timer_call_data",
    "timer_value", "counter", "counter_value", "primary_metadata", "secondary_metadata",
    "taudb_view", "taudb_view_parameter", "analysis_settings", "analysis_result",
}
VIEWS = {
    "interval_event", "interval_event_value", "interval_location_profile",
    "interval_total_summary", "interval_mean_summary", "atomic_event", "atomic_event_value",
    "atomic_location_profile", "atomic_total_summary", "atomic_mean_summary",
}
#: Seed rows: table -> row count.
SEED_ROWS = {"schema_version": 1, "data_source": 21, "derived_thread_type": 7,
             "taudb_view": 1, "taudb_view_parameter": 1}


def _columns_sqlite(db: TaudbDatabase) -> dict[str, list[str]]:
    names = [row[0] for row in db.query(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name != 'sqlite_sequence'")]
    return {name: [row[1] for row in db.query(f"PRAGMA table_info({name})")] for name in names}


def _columns_postgres(db: TaudbDatabase) -> dict[str, list[str]]:
    columns: dict[str, list[str]] = {}
    for table, column in db.query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = ? ORDER BY table_name, ordinal_position", (db.schema,)):
        columns.setdefault(table, []).append(column)
    return columns


def test_sqlite_schema_is_created_once_with_taus_tables_views_and_seed_rows(tmp_path):
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        assert ensure_schema(db) is True
        assert ensure_schema(db) is False
        kinds = dict(db.query("SELECT type, count(*) FROM sqlite_master "
                              "WHERE name != 'sqlite_sequence' GROUP BY type"))
        assert (kinds["table"], kinds["view"]) == (21, 10)
        assert set(_columns_sqlite(db)) == TABLES | VIEWS
        for table, count in SEED_ROWS.items():
            assert db.query(f"SELECT count(*) FROM {table}") == [(count,)]
        assert db.query("SELECT version FROM schema_version") == [(2,)]


def test_postgres_schema_is_created_once_and_matches_sqlite(postgres_url, tmp_path):
    with TaudbDatabase(postgres_url, "twice") as db:
        assert ensure_schema(db) is True
        assert ensure_schema(db) is False
        postgres = _columns_postgres(db)
        for table, count in SEED_ROWS.items():
            assert db.query(f"SELECT count(*) FROM {table}") == [(count,)]
        assert db.query("SELECT count(*) FROM information_schema.views WHERE table_schema = ?",
                        ("twice",)) == [(10,)]
        # TAU's DDL itself cannot run twice: that is why presence is detected first
        with pytest.raises(errors.DuplicateTable), db.transaction() as cursor:
            cursor.execute(ddl("postgresql"))
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as lite:
        ensure_schema(lite)
        assert _columns_sqlite(lite) == postgres
    assert set(postgres) == TABLES | VIEWS


def test_a_role_without_create_on_public_uses_its_own_schema(postgres_url):
    with psycopg2.connect(postgres_url) as admin, admin.cursor() as cursor:
        cursor.execute("CREATE ROLE tau_user LOGIN")
        cursor.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO tau_user").format(
            sql.Identifier(admin.info.dbname)))
    role_url = postgres_url.replace("postgres@", "tau_user@")
    with TaudbDatabase(role_url) as public, pytest.raises(errors.InsufficientPrivilege):
        ensure_schema(public)  # PostgreSQL 15: no CREATE on public for ordinary roles
    with TaudbDatabase(role_url, "tau_user_space") as db:
        assert ensure_schema(db) is True
        trial_id = load_trial(db, small_trial())
        assert [t["id"] for t in list_trials(db)] == [trial_id]
        assert db.query("SELECT tableowner FROM pg_tables WHERE schemaname = ? "
                        "AND tablename = 'timer_value'", ("tau_user_space",)) == [("tau_user",)]
        assert db.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' "
                        "AND tableowner = 'tau_user'") == [(0,)]
        # an ordinary role keeps every foreign-key check
        with db.transaction() as cursor:
            assert db.skip_reference_checks(cursor) is False


def test_the_fixed_interval_event_value_view_answers_where_taus_divides_by_zero(postgres_url):
    with TaudbDatabase(postgres_url, "zero_calls") as db:
        trial_id = load_trial(db, small_trial())
        zero = db.query("SELECT count(*) FROM timer_call_data d JOIN thread h ON d.thread = h.id "
                        "WHERE d.calls = 0 AND h.trial = ?", (trial_id,))[0][0]
        assert zero > 0  # a STDDEV thread whose calls truncate to 0
        rows = db.query("SELECT call, inclusive_per_call FROM interval_event_value WHERE call = 0")
        assert len(rows) == 2 * zero  # one per metric
        assert all(per_call is None for _, per_call in rows)
        with pytest.raises(errors.DivisionByZero), db.transaction() as cursor:
            cursor.execute("SELECT tv.inclusive_value / tcd.calls FROM timer_value tv "
                           "JOIN timer_call_data tcd ON tv.timer_call_data = tcd.id")
            cursor.fetchall()


def test_sqlite_refuses_a_schema_name():
    with pytest.raises(ValueError, match="SQLite has no schemas"):
        TaudbDatabase("sqlite://", "tau")


@pytest.fixture(params=BACKENDS)
def taus_ddl_alone(request, tmp_path):
    """A TAUdb made by TAU's DDL alone (as TAU or an older Joulehouse made it)."""
    url, schema = place(request, tmp_path, f"taus_ddl_{tmp_path.name}")
    with TaudbDatabase(url, schema) as db:
        with db.transaction() as cursor:
            if schema is not None:
                cursor.execute(f'CREATE SCHEMA "{schema}"')
            for statement in ddl_statements(ddl(db.backend)):
                cursor.execute(statement)
        yield db


@contextmanager
def _timer_value_held(url: str, schema: str) -> Iterator[psycopg2.extensions.connection]:
    """A writer holding ``schema``'s timer_value as a load does (ROW EXCLUSIVE) until it
    rolls back or the block ends."""
    writer = psycopg2.connect(url)
    try:
        with writer.cursor() as cursor:
            cursor.execute(sql.SQL("LOCK TABLE {}.timer_value IN ROW EXCLUSIVE MODE").format(
                sql.Identifier(schema)))
        yield writer
    finally:
        writer.close()


def _built_once_due(db: TaudbDatabase, clock, at_s: float, warnings: list,
                    count: int) -> None:
    """The retry's wait over (``clock`` at ``at_s``): the next ensure builds every index
    and settles, ``warnings`` (caplog's records) still ``count`` long."""
    clock.now = at_s
    ensure_indexes(db)
    assert set(INDEXES) <= _index_names(db)
    assert _builds_of(db).settled and len(warnings) == count


def _index_names(db: TaudbDatabase, schema: str | None = None) -> set[str]:
    """The indexes of ``db``'s TAUdb, on PostgreSQL those in ``schema`` (default: db's)."""
    if db.backend == "postgresql":
        return {row[0] for row in db.query(
            "SELECT indexname FROM pg_indexes WHERE schemaname = ?", (schema or db.schema,))}
    return {row[0] for row in db.query("SELECT name FROM sqlite_master WHERE type = 'index'")}


def _leading_columns(db: TaudbDatabase) -> set[tuple[str, str]]:
    """(table, column) of each index's first column, the primary keys' included."""
    if db.backend == "postgresql":
        return set(db.query(
            "SELECT t.relname, a.attname FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0] "
            "WHERE t.relnamespace = ?::regnamespace", (db.schema,)))
    leading = set()
    for (table,) in db.query("SELECT name FROM sqlite_master WHERE type = 'table'"):
        # an INTEGER PRIMARY KEY is the rowid, which no index_list names
        leading |= {(table, row[1]) for row in db.query(f"PRAGMA table_info({table})")
                    if row[5] == 1}
        for index in db.query(f"PRAGMA index_list({table})"):
            leading |= {(table, info[2]) for info in db.query(f"PRAGMA index_info({index[1]})")
                        if info[0] == 0}
    return leading


def _foreign_keys(db: TaudbDatabase) -> set[tuple[str, str, str]]:
    """(table, column, referenced table) of every foreign key (all have one column)."""
    if db.backend == "postgresql":
        return set(db.query(
            "SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text "
            "FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid "
            "AND a.attnum = c.conkey[1] WHERE c.contype = 'f' "
            "AND c.connamespace = ?::regnamespace", (db.schema,)))
    return {(table, row[3], row[2])
            for (table,) in db.query("SELECT name FROM sqlite_master WHERE type = 'table'")
            for row in db.query(f"PRAGMA foreign_key_list({table})")}


def _unindexed_by_trial_deletes(db: TaudbDatabase) -> set[tuple[str, str]]:
    """The (table, column) pairs that deleting a trial filters on or checks a foreign key
    of, for each deleted row, and that no index leads with."""
    filtered = {match.groups() for match in (re.match(r"DELETE FROM (\w+) WHERE (\w+)", s)
                                            for s in _DELETES)}
    deleted = {table for table, _ in filtered}
    checked = {(table, column) for table, column, referenced in _foreign_keys(db)
               if referenced in deleted}
    return (filtered | checked) - _leading_columns(db)


def test_trial_deletes_filter_and_check_foreign_keys_through_an_index(taus_ddl_alone):
    """TAU's DDL alone leaves deletes and foreign-key checks that scan every stored trial's
    rows; Joulehouse's indexes, added when the database is first opened for loading,
    cover every one."""
    db = taus_ddl_alone
    assert set(INDEXES).isdisjoint(_index_names(db))
    assert _unindexed_by_trial_deletes(db) == {
        ("timer_callpath", "timer"), ("timer_parameter", "timer"), ("counter_value", "thread"),
        ("metric", "trial"), ("timer_value", "metric"), ("counter_value", "timer_callpath"),
        ("secondary_metadata", "thread"), ("secondary_metadata", "timer_callpath"),
        ("secondary_metadata", "parent"), ("analysis_settings", "trial"),
        ("analysis_settings", "metric")}
    assert ensure_schema(db) is False  # present already: only the indexes are added
    assert set(INDEXES) <= _index_names(db)
    assert _unindexed_by_trial_deletes(db) == set()


def test_a_new_schema_has_joulehouses_indexes(postgres_url, tmp_path):
    for url, schema in ((postgres_url, "new_indexed"), (f"sqlite:///{tmp_path}/t.sqlite", None)):
        with TaudbDatabase(url, schema) as db:
            assert ensure_schema(db) is True
            assert set(INDEXES) <= _index_names(db)
            assert _unindexed_by_trial_deletes(db) == set()


def _wide_trial(source_key: str, timers: int):
    """:func:`small_trial` with ``timers`` flat timers per rank instead of its own."""
    names = [f"t{i}" for i in range(timers)]
    entries = pd.DataFrame({"node_rank": [0] * timers + [1] * timers, "context_rank": 0,
                            "thread_rank": 0, "name": names * 2, "group_names": "TAU_USER",
                            "calls": 1, "subroutines": 0})
    values = pd.concat([entries.assign(metric=metric, inclusive=2, exclusive=1)
                        for metric in ("TIME", "PAPI_TOT_CYC")])
    return small_trial(source_key, timers=entries, timer_values=values.drop(
        columns=["group_names", "calls", "subroutines"]))


def test_deleting_a_trial_reads_its_callpaths_through_the_index_not_every_trials(postgres_url):
    """With a few wide trials stored and analysed, PostgreSQL's plan for deleting a small
    trial's callpaths scans the whole table without Joulehouse's index (dropped, then made
    again) and searches that index with it."""
    index = "joulehouse_timer_callpath_timer"
    statement = next(s for s in _DELETES if s.startswith("DELETE FROM timer_callpath"))
    with TaudbDatabase(postgres_url, "callpath_plan") as db:
        load_prepared(db, [prepare_trial(_wide_trial(f"wide{i}", 2000)) for i in range(3)])
        small = load_trial(db, small_trial())
        with db.transaction() as cursor:
            cursor.execute("ANALYZE timer_callpath, timer")
        plans = []
        with db.transaction() as cursor:
            for change in (f"DROP INDEX {index}", create_index(index)):
                cursor.execute(db.sql(f"EXPLAIN {statement}"), (small,))
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
                cursor.execute(change)
        with_index, without = plans
        assert "Seq Scan on timer_callpath" in without, without
        assert "Seq Scan on timer_callpath" not in with_index, with_index
        assert index in with_index, with_index


def _wait_until_a_session_waits(cursor, lock: str, params: tuple = ()) -> None:
    """Return once a session waits for a lock that ``lock`` (a condition on pg_locks ``l``)
    picks, read with ``cursor``; fail after 10 s, a bound, not a timing."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cursor.execute(f"SELECT count(*) FROM pg_locks l WHERE NOT l.granted AND {lock}", params)
        if cursor.fetchone()[0]:
            return
        time.sleep(0.01)
    pytest.fail(f"no session waited for a lock where {lock} {params}")


def _wait_until_a_session_waits_for(cursor, schema: str, table: str) -> None:
    """Return once a session waits for a lock on ``schema.table``."""
    _wait_until_a_session_waits(cursor, "l.relation = %s::regclass", (f"{schema}.{table}",))


#: A builders' lock (pg_locks ``l``): classid and objid are its two keys.
_BUILDERS_LOCK = f"l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid = {INDEX_LOCK_CLASS}"


def test_threads_ensuring_the_indexes_at_once_each_load_only_once_they_are_built(postgres_url):
    """While one thread builds (held up here by another session holding the builders'
    advisory lock), a second waits for it rather than loading without the indexes."""
    taus_ddl_schema(postgres_url, "two_builders")
    holder = psycopg2.connect(postgres_url)
    seen, failed = [], []

    def build() -> None:
        try:
            with TaudbDatabase(postgres_url, "two_builders") as own:
                ensure_indexes(own)
                seen.append(set(INDEXES) <= _index_names(own))
        except Exception as error:  # noqa: BLE001 - reported below
            failed.append(error)

    threads = [threading.Thread(target=build) for _ in range(2)]
    try:
        with holder.cursor() as cursor:
            cursor.execute("SET search_path = two_builders")
            cursor.execute(_LOCK_INDEXES, (INDEX_LOCK_CLASS, "primary_metadata"))
            for thread in threads:
                thread.start()
            _wait_until_a_session_waits(cursor, _BUILDERS_LOCK)  # one builds, held up
            assert seen == []
        holder.rollback()
        for thread in threads:
            thread.join(30)
    finally:
        holder.close()
    assert failed == [] and seen == [True, True]


class _Clock:
    """A clock that the test sets: ``now`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_lock_timeout_leaves_the_indexes_to_a_later_call_and_loads_go_on(
        postgres_url, caplog, monkeypatch):
    """A writer holding timer_value (ROW EXCLUSIVE, as a load does): building that table's
    index gives up after INDEX_LOCK_TIMEOUT rather than queueing every writer behind it,
    the others are made, a load meanwhile does not try again, and the first call 10 s
    later, once the writer is done, makes it."""
    taus_ddl_schema(postgres_url, "timed_out")
    clock = _Clock()
    monkeypatch.setattr(taudb_schema, "retry_clock", clock)
    writer = psycopg2.connect(postgres_url)
    release = threading.Timer(20.0, writer.rollback)  # the unfixed build would wait for it
    try:
        with writer.cursor() as cursor:
            cursor.execute("LOCK TABLE timed_out.timer_value IN ROW EXCLUSIVE MODE")
        release.start()
        with caplog.at_level("WARNING", logger="joulehouse.taudb.schema"), \
                TaudbDatabase(postgres_url, "timed_out") as db:
            start = time.monotonic()
            ensure_indexes(db)
            assert time.monotonic() - start < 10  # given up at 500 ms, not at the release
            assert not _builds_of(db).settled
            assert set(INDEXES) - _index_names(db) == {"joulehouse_timer_value_metric"}
            assert "tried again at the first load 10 s later" in caplog.records[-1].getMessage()
            assert "joulehouse_timer_value_metric" in caplog.records[-1].getMessage()
            assert "looked up" not in caplog.records[-1].getMessage()  # that index is made
            trial_id = load_trial(db, small_trial())  # the writer still holds timer_value
            assert [t["id"] for t in list_trials(db)] == [trial_id]
            assert len(caplog.records) == 1  # the load did not try again before 10 s
            writer.rollback()
            _built_once_due(db, clock, 10.0, caplog.records, 1)
    finally:
        release.cancel()
        writer.close()


def test_a_lock_timeout_that_recurs_is_tried_again_after_waits_doubling_up_to_ten_minutes(
        postgres_url, caplog, monkeypatch):
    """A writer holding timer_value through many loads: the build is tried again only once
    its wait is over (10 s, doubled after each failure in a row, at most 10 min), with one
    warning per try; the calls meanwhile try nothing. Once the writer is done, the first
    call after the wait makes the index."""
    taus_ddl_schema(postgres_url, "held_long")
    monkeypatch.setattr(taudb_schema, "INDEX_LOCK_TIMEOUT", "50ms")  # the same error, sooner
    clock = _Clock()
    monkeypatch.setattr(taudb_schema, "retry_clock", clock)
    with _timer_value_held(postgres_url, "held_long") as writer, \
            caplog.at_level("WARNING", logger="joulehouse.taudb.schema"), \
            TaudbDatabase(postgres_url, "held_long") as db:
        waits = []
        for _ in range(9):
            ensure_indexes(db)  # due: tried, and timed out
            waits.append(float(re.search(r"tried again at the first load (\d+) s later",
                                         caplog.records[-1].getMessage()).group(1)))
            clock.now += waits[-1] - 0.5
            ensure_indexes(db)  # not due yet: not tried
            clock.now += 0.5
        assert waits == [10, 20, 40, 80, 160, 320, 600, 600, 600]
        assert len(caplog.records) == 9  # one per try, none between
        writer.rollback()
        clock.now -= 0.5
        ensure_indexes(db)  # not due yet, though it could be made now
        assert set(INDEXES) - _index_names(db) == {"joulehouse_timer_value_metric"}
        _built_once_due(db, clock, clock.now + 0.5, caplog.records, 9)


def test_a_writer_locking_tables_in_another_order_never_waits_on_the_builder(
        postgres_url, monkeypatch):
    """The builder holds one table at a time: a writer that holds timer_value and then
    writes primary_metadata (whose index is built first) goes on at once while the
    builder waits for timer_value, instead of waiting for the builder's SHARE lock on
    primary_metadata in a deadlock that PostgreSQL takes up to deadlock_timeout to break."""
    taus_ddl_schema(postgres_url, "other_order")
    # the builder waits for timer_value until the writer commits (a loaded machine may see
    # its wait late): the order is what is tested here, not the timeout
    monkeypatch.setattr(taudb_schema, "INDEX_LOCK_TIMEOUT", "60s")
    writer = psycopg2.connect(postgres_url)
    done = []

    def build() -> None:
        with TaudbDatabase(postgres_url, "other_order") as own:
            ensure_indexes(own)
            done.append(True)

    try:
        with writer.cursor() as cursor:
            cursor.execute("LOCK TABLE other_order.timer_value IN ROW EXCLUSIVE MODE")
            builder = threading.Thread(target=build)
            builder.start()
            _wait_until_a_session_waits_for(cursor, "other_order", "timer_value")
            cursor.execute("SELECT count(*) FROM pg_locks l JOIN pg_class c "
                           "ON c.oid = l.relation WHERE l.granted "
                           "AND l.pid <> pg_backend_pid() AND c.relname = 'primary_metadata' "
                           "AND c.relnamespace = 'other_order'::regnamespace")
            assert cursor.fetchone()[0] == 0  # the builder holds no other table meanwhile
            cursor.execute("DELETE FROM other_order.primary_metadata WHERE trial = -1")
        writer.commit()
        builder.join(30)
        assert done == [True]
        with TaudbDatabase(postgres_url, "other_order") as db:
            assert set(INDEXES) <= _index_names(db)
    finally:
        writer.close()


def test_a_build_held_up_on_one_taudb_never_holds_a_load_of_another(postgres_url, monkeypatch):
    """While the build on one TAUdb waits for a table that a writer holds, a load into
    another TAUdb (a schema of the same PostgreSQL database whose indexes this process has
    not made sure of yet) builds that one's indexes and loads: the process's lock and the
    builders' advisory lock are each TAUdb's own."""
    for schema in ("held_up", "not_held"):
        taus_ddl_schema(postgres_url, schema)
    monkeypatch.setattr(taudb_schema, "INDEX_LOCK_TIMEOUT", "60s")  # held up until released
    writer = psycopg2.connect(postgres_url)
    done: dict[str, object] = {}

    def run(schema: str, work) -> None:
        with TaudbDatabase(postgres_url, schema) as own:
            done[schema] = work(own)

    held = threading.Thread(target=run, args=("held_up", ensure_indexes))
    try:
        with writer.cursor() as cursor:
            cursor.execute("LOCK TABLE held_up.timer_value IN ROW EXCLUSIVE MODE")
            held.start()
            _wait_until_a_session_waits_for(cursor, "held_up", "timer_value")
        other = threading.Thread(target=run, args=(
            "not_held", lambda db: load_trial(db, small_trial())))
        other.start()
        other.join(30)  # a bound: unfixed, the load waits for the writer, released below
        assert list(done) == ["not_held"]  # the build on held_up still waits
        with TaudbDatabase(postgres_url, "not_held") as db:
            assert [t["id"] for t in list_trials(db)] == [done["not_held"]]
            assert set(INDEXES) <= _index_names(db)
    finally:
        writer.rollback()
        held.join(30)
        writer.close()
    assert done["held_up"] is None


def test_builders_whose_search_paths_differ_take_turns_on_the_schema_of_the_tables(
        postgres_url):
    """Without a schema option each role finds the tables through its search_path, here
    ``"$user", searched`` with the TAUdb in ``searched``: alice, who has an empty schema of
    her own (her current_schema()), holding the builders' lock, bob's builder waits for her
    (the lock is keyed by the schema holding the tables), then builds."""
    roles = ("searched_alice", "searched_bob")
    as_admin(postgres_url, *(statement for role in roles for statement in (
        f"CREATE ROLE {role} LOGIN", f'ALTER ROLE {role} SET search_path = "$user", searched')))
    taus_ddl_schema(postgres_url, "searched", owner="searched_bob")
    as_admin(postgres_url, "CREATE SCHEMA searched_alice AUTHORIZATION searched_alice",
              "GRANT USAGE ON SCHEMA searched TO searched_alice")
    alice_url, bob_url = (postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@")
                          for role in roles)
    alice = psycopg2.connect(alice_url)
    done = []

    def build() -> None:
        with TaudbDatabase(bob_url) as bob:
            ensure_indexes(bob)
            done.append(set(INDEXES) <= _index_names(bob, "searched"))

    bob_builds = threading.Thread(target=build)
    try:
        with alice.cursor() as cursor:
            cursor.execute("SELECT current_schema()")
            assert cursor.fetchone() == ("searched_alice",)
            cursor.execute(_LOCK_INDEXES, (INDEX_LOCK_CLASS, "primary_metadata"))
            bob_builds.start()
            _wait_until_a_session_waits(cursor, _BUILDERS_LOCK)
            assert done == []
        alice.rollback()
        bob_builds.join(30)
        assert done == [True]
    finally:
        alice.close()
        bob_builds.join(30)


def test_a_builder_that_another_session_beats_to_an_index_goes_on(postgres_url, caplog,
                                                                     monkeypatch):
    """Another session (an older Joulehouse, an operator) creating the lookup index, not yet
    committed: the builder's CREATE INDEX IF NOT EXISTS waits for its commit and then fails
    on PostgreSQL's catalog (unique_violation, 23505). The index is there: the builder
    makes the others, logging nothing."""
    taus_ddl_schema(postgres_url, "raced")
    monkeypatch.setattr(taudb_schema, "INDEX_LOCK_TIMEOUT", "60s")  # waits for the commit
    other = psycopg2.connect(postgres_url)
    settled = []

    def build() -> None:
        with TaudbDatabase(postgres_url, "raced") as own:
            ensure_indexes(own)
            settled.append(_builds_of(own).settled)

    builder = threading.Thread(target=build)
    try:
        with caplog.at_level("WARNING", logger="joulehouse.taudb.schema"):
            with other.cursor() as cursor:
                cursor.execute("SET search_path = raced")
                cursor.execute(create_index(LOOKUP_INDEX))
                builder.start()
                _wait_until_a_session_waits(cursor, "l.locktype = 'transactionid'")
            other.commit()
            builder.join(30)
    finally:
        other.close()
    assert settled == [True]
    assert [record.getMessage() for record in caplog.records] == []
    with TaudbDatabase(postgres_url, "raced") as db:
        assert set(INDEXES) <= _index_names(db)


def test_a_failure_the_next_load_would_meet_again_is_not_retried(postgres_url, caplog,
                                                                  monkeypatch):
    """A statement timeout (as a production role may set; here met while a writer holds
    timer_value) would come back after each load's build, holding its table meanwhile:
    logged once, not "tried again", the database marked done."""
    taus_ddl_schema(postgres_url, "timing_out")
    monkeypatch.setattr(taudb_schema, "INDEX_LOCK_TIMEOUT", "60s")  # the statement's first
    with _timer_value_held(postgres_url, "timing_out"), \
            caplog.at_level("WARNING", logger="joulehouse.taudb.schema"), \
            TaudbDatabase(postgres_url, "timing_out") as db:
        with db.transaction() as cursor:  # this session's, kept past the commit
            cursor.execute("SET statement_timeout = '2s'")
        ensure_indexes(db)
        assert _builds_of(db).settled
        message = caplog.records[-1].getMessage()
        assert ("(a statement timeout, an operator): run `joulehouse taudb init` without "
                "statement_timeout (PGOPTIONS='-c statement_timeout=0'); not tried again "
                "in this process (without them") in message


@pytest.mark.parametrize("made_read_only", ["session", "role"])
def test_a_read_only_database_is_said_once_and_not_tried_again(postgres_url, caplog,
                                                                 monkeypatch, made_read_only):
    """PostgreSQL refuses CREATE INDEX in a read-only transaction (25006,
    read_only_sql_transaction): in a session opened read-only (default_transaction_read_only
    as a connection option, as ``joulehouse taudb list`` opens one) or as a role the server
    makes read-only. Each load's build would meet it again: logged once, saying to build
    them over a read-write connection, and not tried again in this process, however long
    after."""
    schema = f"read_only_{made_read_only}"
    taus_ddl_schema(postgres_url, schema)
    url = postgres_url
    if made_read_only == "role":
        with psycopg2.connect(postgres_url) as admin, admin.cursor() as cursor:
            cursor.execute("CREATE ROLE read_only_role LOGIN")
            cursor.execute("ALTER ROLE read_only_role SET default_transaction_read_only = on")
            cursor.execute(f"GRANT USAGE ON SCHEMA {schema} TO read_only_role")
        admin.close()
        url = postgres_url.replace("postgresql://postgres@", "postgresql://read_only_role@")
    clock = _Clock()
    monkeypatch.setattr(taudb_schema, "retry_clock", clock)
    with caplog.at_level("WARNING", logger="joulehouse.taudb.schema"), \
            TaudbDatabase(url, schema, read_only=made_read_only == "session") as db:
        ensure_indexes(db)
        clock.now = 86400.0
        ensure_indexes(db)
        assert _builds_of(db).settled
        assert set(INDEXES).isdisjoint(_index_names(db))
        assert len(caplog.records) == 1
        message = caplog.records[0].getMessage()
        assert message.startswith(f"TAUdb {url}: Joulehouse's indexes not built: "
                                  "joulehouse_primary_metadata_name_value on primary_metadata "
                                  "(name, value), ")
        assert ("analysis_settings (metric): cannot execute CREATE INDEX in a read-only "
                "transaction; the database is read-only to this connection (a read-only role, "
                "session or file, a standby server): run `joulehouse taudb init` with a "
                "read-write connection to the primary; not tried again in this process "
                "(without them") in message


def _sqlite_taus_ddl(path) -> str:
    """The URL of a SQLite file ``path`` made by TAU's DDL alone."""
    url = f"sqlite:///{path}"
    with TaudbDatabase(url) as made, made.transaction() as cursor:
        for statement in ddl_statements(ddl("sqlite")):
            cursor.execute(statement)
    return url


def _sqlite_to_hold_up(tmp_path, monkeypatch) -> tuple[str, sqlite3.Connection, _Clock]:
    """A SQLite TAUdb made by TAU's DDL with no wait for its write lock (SQLITE_LOCK_WAIT_S
    0), the retry's clock set: its URL, a second connection (autocommit) to take that lock,
    the clock."""
    path = tmp_path / "taudb.sqlite"
    url = _sqlite_taus_ddl(path)
    monkeypatch.setattr(taudb_connect, "SQLITE_LOCK_WAIT_S", 0.0)
    clock = _Clock()
    monkeypatch.setattr(taudb_schema, "retry_clock", clock)
    return url, sqlite3.connect(path, isolation_level=None), clock


def test_a_sqlite_file_another_connection_writes_is_tried_again_after_the_wait(
        tmp_path, caplog, monkeypatch):
    """SQLite's BUSY: a second connection holds the file's write lock (as another process's
    load does) past this one's wait for it (none here, SQLITE_LOCK_WAIT_S): the indexes are
    not even checked, the warning says so and when they are tried again, and the first call
    after that wait, the lock released, builds them."""
    url, other, clock = _sqlite_to_hold_up(tmp_path, monkeypatch)
    try:
        other.execute("BEGIN IMMEDIATE")
        with caplog.at_level("WARNING", logger="joulehouse.taudb.schema"), \
                TaudbDatabase(url) as db:
            ensure_indexes(db)
            assert not _builds_of(db).settled
            assert [record.getMessage() for record in caplog.records] == [(
                f"TAUdb {url}: Joulehouse's indexes not checked: database is locked; other "
                "sessions were writing these tables (loads, TAU's tools): run `joulehouse "
                "taudb init` when loads are quiet, or wait: it is tried again at the first "
                "load 10 s later (without them trials are looked up by their source key with "
                "a scan and replacing a trial scans tables of every stored trial)")]
            other.execute("ROLLBACK")
            _built_once_due(db, clock, 10.0, caplog.records, 1)
    finally:
        other.close()


def test_a_sqlite_file_locked_once_checked_ends_the_try_at_the_first_index(
        tmp_path, caplog, monkeypatch):
    """SQLite's write lock is the whole file's: a second connection taking it once the
    indexes are checked (as a load starting then does), the first index's BEGIN IMMEDIATE
    waits SQLITE_LOCK_WAIT_S (none here) and fails BUSY, and the try ends there instead of
    each other index waiting as long; the first call after the retry wait builds them."""
    url, other, clock = _sqlite_to_hold_up(tmp_path, monkeypatch)
    begun = []  # this connection's BEGIN IMMEDIATE, each waiting for the write lock

    def lock_at_the_first_build(statement: str) -> None:
        if statement == "BEGIN IMMEDIATE":
            begun.append(statement)
            if len(begun) == 2:  # the first index's, after the check's
                other.execute("BEGIN IMMEDIATE")

    try:
        with caplog.at_level("WARNING", logger="joulehouse.taudb.schema"), \
                TaudbDatabase(url) as db:
            db.connection.set_trace_callback(lock_at_the_first_build)
            ensure_indexes(db)
            assert len(begun) == 2
            assert not _builds_of(db).settled
            message = caplog.records[-1].getMessage()
            assert [name for name in INDEXES if f" {name} on " not in message] == []
            assert ": database is locked; " in message
            other.execute("ROLLBACK")
            _built_once_due(db, clock, 10.0, caplog.records, 1)
    finally:
        other.close()


def test_sqlites_locked_is_a_conflict_tried_again_as_busy_is(tmp_path):
    """SQLITE_LOCKED (6; here as its extended code 262, SQLITE_LOCKED_SHAREDCACHE: of two
    connections sharing a cache, one writes the table the other would index) is a conflict
    that a later try may not meet, as BUSY is: tried again, with the same advice."""
    uri = f"file:{tmp_path / 'taudb.sqlite'}?cache=shared"
    writer, builder = (sqlite3.connect(uri, uri=True, isolation_level=None, timeout=0)
                       for _ in range(2))
    try:
        writer.execute("CREATE TABLE timer_value (metric INTEGER)")
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO timer_value VALUES (1)")
        with pytest.raises(sqlite3.OperationalError) as locked:
            builder.execute(create_index("joulehouse_timer_value_metric"))
        assert locked.value.sqlite_errorname == "SQLITE_LOCKED_SHAREDCACHE"
        kind = _failure_kind(locked.value)
        assert kind.again
        assert kind.advice == ("other sessions were writing these tables (loads, TAU's tools): "
                               "run `joulehouse taudb init` when loads are quiet")
    finally:
        writer.close()
        builder.close()
