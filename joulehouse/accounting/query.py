"""SQL over every table of the warehouse with DuckDB, without copying: the Python entry point.

Each table folder of the warehouse (``joulehouse/warehouse.py``: one Parquet file
per partition) is a view over its files, read in place by DuckDB when a query
runs: ``energy_facts``, ``accounting_daily``, ``carbon_per_fact`` ... A table
nested one level (``gpu_validated_frames/gpu_power``) is the view ``gpu_power`` in
the schema ``gpu_validated_frames``; deeper levels are joined with ``__``. The
files of a view are those present when the connection was opened (hidden files,
writes in progress, are left out); partitions whose columns differ are united by
name. Timestamps are shown in UTC.

    >>> from joulehouse.accounting.query import query
    >>> query("warehouse", "SELECT source, sum(energy_j) FROM energy_facts GROUP BY 1")
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd

from joulehouse.warehouse import SUFFIX


def tables(root: str | os.PathLike[str]) -> dict[str, list[Path]]:
    """Each table under ``root`` (its path relative to ``root``, '/'-separated) and its
    visible Parquet files, sorted."""
    root = Path(root)
    found: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("*" + SUFFIX)):
        relative = path.relative_to(root)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            found.setdefault(relative.parent.as_posix(), []).append(path)
    return {name: files for name, files in found.items() if name != "."}


def view_name(table: str) -> tuple[str | None, str]:
    """(schema or None, view) of a warehouse table (see module)."""
    parts = table.split("/")
    return (None, parts[0]) if len(parts) == 1 else (parts[0], "__".join(parts[1:]))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect(root: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per warehouse table under ``root``."""
    connection = duckdb.connect(":memory:")
    connection.execute("SET TimeZone = 'UTC'")
    for table, files in tables(root).items():
        schema, view = view_name(table)
        if schema is not None:
            connection.execute(f"CREATE SCHEMA IF NOT EXISTS {_quoted(schema)}")
        name = f"{_quoted(schema)}.{_quoted(view)}" if schema else _quoted(view)
        listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        connection.execute(f"CREATE VIEW {name} AS SELECT * FROM "
                           f"read_parquet([{listed}], union_by_name = true)")
    return connection


def query(root: str | os.PathLike[str], sql: str) -> pd.DataFrame:
    """The result of ``sql`` over the warehouse at ``root``, through Arrow (timestamps keep
    their UTC zone); raises duckdb.Error on a bad query, ValueError on a statement that
    returns no rows (a query is a SELECT)."""
    with connect(root) as connection:
        relation = connection.sql(sql)
        if relation is None:
            raise ValueError("not a query: the statement returns no rows (give a SELECT)")
        return relation.to_arrow_table().to_pandas()
