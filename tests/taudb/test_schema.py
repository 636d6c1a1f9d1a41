"""The TAUdb schema: created once, the same on both backends, in a schema of one's own."""

from __future__ import annotations

import psycopg2
import pytest
from psycopg2 import errors, sql
from small_trial import small_trial

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.schema import ddl, ensure_schema

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
