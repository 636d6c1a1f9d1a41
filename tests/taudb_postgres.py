"""TAUdb set-ups on the throwaway PostgreSQL server, made as its superuser (the URL's
role)."""

from __future__ import annotations

import psycopg2

from joulehouse.taudb.schema import ddl, ddl_statements


def as_admin(url: str, *statements: str) -> list[tuple]:
    """Run ``statements`` as the server's superuser in one transaction; the last's rows."""
    admin = psycopg2.connect(url)
    try:
        with admin, admin.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
            return cursor.fetchall() if cursor.description else []
    finally:
        admin.close()


def taus_ddl_schema(url: str, schema: str, owner: str = "postgres") -> None:
    """Make the schema ``schema`` with TAU's DDL alone, as TAU or an older Joulehouse made
    it (none of Joulehouse's own indexes), it and its tables owned by ``owner``."""
    as_admin(url, f'CREATE SCHEMA "{schema}" AUTHORIZATION "{owner}"', f'SET LOCAL ROLE "{owner}"',
             f'SET LOCAL search_path = "{schema}"', *ddl_statements(ddl("postgresql")))
