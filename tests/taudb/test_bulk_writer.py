"""TaudbDatabase.bulk_writer on PostgreSQL: errors of the writer thread and of the caller
reach the caller, roll the transaction back and leave no write behind it."""

from __future__ import annotations

import pandas as pd
import pytest
from psycopg2 import errors
from psycopg2.extensions import TRANSACTION_STATUS_IDLE

from joulehouse.taudb.connect import TaudbDatabase


@pytest.fixture
def db(postgres_url):
    with TaudbDatabase(postgres_url, "bulk_writer") as database:
        with database.transaction() as cursor:
            cursor.execute("CREATE SCHEMA IF NOT EXISTS bulk_writer")
            cursor.execute("CREATE TABLE IF NOT EXISTS item (id INT PRIMARY KEY, label TEXT)")
            cursor.execute("TRUNCATE item")
        yield database


def _left_clean(db: TaudbDatabase) -> bool:
    """Nothing written, and no transaction left open by a late write."""
    idle = db.connection.info.transaction_status == TRANSACTION_STATUS_IDLE
    return idle and db.query("SELECT count(*) FROM item") == [(0,)]


def test_the_writes_run_in_order_and_commit_with_the_transaction(db):
    with db.transaction() as cursor, db.bulk_writer(cursor) as write:
        write("item", pd.DataFrame({"id": [1, 2]}))
        write("item", pd.DataFrame({"id": [3], "label": ["three"]}))
    assert db.query("SELECT id, label FROM item ORDER BY id") == [
        (1, None), (2, None), (3, "three")]


def test_a_copy_error_of_the_writer_thread_reaches_the_caller_and_rolls_back(db):
    with (pytest.raises(errors.UniqueViolation), db.transaction() as cursor,
          db.bulk_writer(cursor) as write):
        write("item", pd.DataFrame({"id": [1, 2]}))
        write("item", pd.DataFrame({"id": [2]}))  # the COPY fails on the server
        write("item", pd.DataFrame({"id": [3]}))  # dropped, or raises the error
    assert _left_clean(db)


def test_an_error_of_the_caller_stops_the_writer_and_rolls_back(db):
    with (pytest.raises(RuntimeError, match="caller"), db.transaction() as cursor,
          db.bulk_writer(cursor) as write):
        for start in range(0, 50_000, 10_000):
            write("item", pd.DataFrame({"id": range(start, start + 10_000)}))
        raise RuntimeError("caller")
    assert _left_clean(db)
