"""TaudbDatabase: on PostgreSQL, text COPY keeps every string exactly and schema names; on
SQLite, a load waits for another load's write lock."""

from __future__ import annotations

import pandas as pd
import pytest
from small_trial import small_trial

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import load_trial

#: Values that COPY's CSV or text format would mangle unless escaped.
ODD = ["\\N", "a\tb", "line\nbreak", "back\\slash", 'say "hi"', "one,two", "cr\rlf",
       "\\\\N", "\\t", ""]


def test_copy_keeps_odd_strings_exactly(postgres_url):
    rows = []
    for i, value in enumerate(ODD):
        rows += [(0, f"same {i}", value), (1, f"same {i}", value),  # primary: on every rank
                 (0, f"differs {i}", value), (1, f"differs {i}", value + "!")]  # secondary
    metadata = pd.DataFrame(rows, columns=["node_rank", "name", "value"])
    metadata[["context_rank", "thread_rank"]] = 0
    trial = small_trial(metadata=metadata, trial_metadata={"App\\N": "\\N"})
    with TaudbDatabase(postgres_url, "connect_odd") as db:
        trial_id = load_trial(db, trial)
        primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                                (trial_id,)))
        secondary = set(db.query("SELECT name, value FROM secondary_metadata WHERE trial = ?",
                                 (trial_id,)))
    assert primary["App\\N"] == "\\N"
    for i, value in enumerate(ODD):
        assert primary[f"same {i}"] == value
    assert secondary == {(f"differs {i}", v) for i, value in enumerate(ODD)
                         for v in (value, value + "!")}


def test_schema_name_must_be_lower_case(postgres_url):
    with pytest.raises(ValueError, match="lower-case"):
        TaudbDatabase(postgres_url, "MySchema")


@pytest.mark.parametrize("wait_s, held_s, loads", [(0.05, 1.0, False), (30.0, 6.0, True)])
def test_a_sqlite_load_waits_for_another_sources_lock(tmp_path, monkeypatch, wait_s, held_s,
                                                     loads):
    """Two sources' steps load at once (each in its own pool): on SQLite a load waits up to
    ``SQLITE_LOCK_WAIT_S`` for the other's write lock (held here 6 s, over the driver's
    default wait of 5 s), and loads once it is free; with a shorter wait it fails."""
    import sqlite3
    import threading

    from joulehouse.taudb import connect

    monkeypatch.setattr(connect, "SQLITE_LOCK_WAIT_S", wait_s)
    url = f"sqlite:///{tmp_path / 'taudb.sqlite'}"
    with TaudbDatabase(url) as db:
        load_trial(db, small_trial())  # the schema made
    held, released = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with TaudbDatabase(url) as other, other.transaction():
            held.set()
            released.wait(held_s)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    held.wait()
    try:
        with TaudbDatabase(url) as db:
            if loads:
                load_trial(db, small_trial("another"))
                assert db.query("SELECT count(*) FROM trial")[0][0] == 2
            else:
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    load_trial(db, small_trial("another"))
    finally:
        released.set()
        holder.join()
