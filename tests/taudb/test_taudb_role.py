"""TAUdb needs no superuser: a plain role that owns its database creates TAU's schema and
loads trials through the resource the assets use (deploy/README.md gives the same SQL)."""

from __future__ import annotations

from urllib.parse import urlparse

import psycopg2
from small_trial import small_trial

from joulehouse.taudb.loader import list_trials, load_trial, trials_by_source_key
from joulehouse.taudb.schema import LOOKUP_INDEX
from resources import TaudbResource

ROLE, DATABASE = "taudb_owner", "taudb_plain_role"


def test_a_plain_role_owning_its_database_loads_trials(postgres_url):
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True  # CREATE DATABASE runs outside a transaction
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            cursor.execute(f"DROP ROLE IF EXISTS {ROLE}")
            # What deploy/README.md tells the operator to run (plus a password there).
            cursor.execute(f"CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
            cursor.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
            cursor.execute("SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls "
                           "FROM pg_roles WHERE rolname = %s", (ROLE,))
            assert cursor.fetchone() == (False, False, False, False)
    finally:
        admin.close()
    url = urlparse(postgres_url)
    role_url = f"postgresql://{ROLE}@{url.hostname}:{url.port}/{DATABASE}"

    with TaudbResource(url=role_url).open() as db:
        assert list_trials(db) == []  # no schema yet: TAU's DDL runs as the role
        first = load_trial(db, small_trial())
        second = load_trial(db, small_trial(source_key="other", fingerprint="fp-2"))
        again = load_trial(db, small_trial())  # replaces its source's trial
        assert trials_by_source_key(db, ["small", "other"]) == {
            "small": {"id": again, "fingerprint": small_trial().fingerprint},
            "other": {"id": second, "fingerprint": "fp-2"}}
        assert first != again
        assert [trial["id"] for trial in list_trials(db)] == [second, again]
        assert db.query("SELECT count(*) FROM pg_indexes WHERE indexname = %s",
                        (LOOKUP_INDEX,)) == [(1,)]  # the owner may create joulehouse's index
        assert db.query("SELECT tableowner FROM pg_tables WHERE tablename = 'trial'") == [
            (ROLE,)]
