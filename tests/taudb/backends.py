"""The two backends the TAUdb tests run on: a SQLite file, or a schema of the throwaway
PostgreSQL server."""

from __future__ import annotations

BACKENDS = ["sqlite", "postgresql"]


def place(request, tmp_path, schema: str) -> tuple[str, str | None]:
    """The URL and schema of the backend ``request.param``: a SQLite file in ``tmp_path``
    (SQLite has no schemas), or ``schema`` on the throwaway PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/taudb.sqlite", None
    return request.getfixturevalue("postgres_url"), schema
