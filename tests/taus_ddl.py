"""A TAUdb made by TAU's DDL alone, as TAU or an older Joulehouse made it: none of
Joulehouse's own indexes (``joulehouse.taudb.schema.INDEXES``)."""

from __future__ import annotations

import psycopg2

from joulehouse.taudb.schema import ddl, ddl_statements


def taus_ddl_schema(url: str, schema: str, owner: str = "postgres") -> None:
    """Make the PostgreSQL schema ``schema`` with TAU's DDL alone, it and its tables owned
    by ``owner``; made by the URL's role, a superuser (the throwaway server's)."""
    admin = psycopg2.connect(url)
    try:
        with admin, admin.cursor() as cursor:
            cursor.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{owner}"')
            cursor.execute(f'SET LOCAL ROLE "{owner}"')
            cursor.execute(f'SET LOCAL search_path = "{schema}"')
            for statement in ddl_statements(ddl("postgresql")):
                cursor.execute(statement)
    finally:
        admin.close()
