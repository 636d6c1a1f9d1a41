"""SQL over every table of the warehouse with DuckDB, without copying: the Python entry point.

Each table folder of the warehouse (``joulehouse/warehouse.py``: one Parquet file
per partition) is a view over its files, read in place by DuckDB when a query
runs: ``energy_facts``, ``accounting_daily``, ``carbon_per_fact`` ... A table
nested one level (``gpu_validated_frames/gpu_power``) is the view ``gpu_power`` in
the schema ``gpu_validated_frames``; deeper levels are joined with ``__``. The
files of a view are those present when the connection was opened (hidden files,
writes in progress, are left out); partitions whose columns differ are united by
name. Timestamps are shown in UTC.

On a path, DuckDB reads the files itself (``read_parquet``). On an object store
(``s3://...``: DuckDB's own S3 reader is an extension it would download) each
view is a pyarrow dataset over the objects, registered with DuckDB and scanned
when a query runs, with the columns and filters pushed down.

    >>> from joulehouse.accounting.query import query
    >>> query("warehouse", "SELECT source, sum(energy_j) FROM energy_facts GROUP BY 1")
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import duckdb
import pandas as pd
import pyarrow.fs as pafs

from joulehouse.warehouse import Warehouse

Root = str | os.PathLike[str] | Warehouse


def _warehouse(root: Root) -> Warehouse:
    return root if isinstance(root, Warehouse) else Warehouse(root)


def tables(root: Root) -> dict[str, list[str]]:
    """Each table under ``root`` (a path, URL or :class:`Warehouse`; its name relative to the
    root, '/'-separated) and the paths of its visible Parquet files, sorted."""
    return {table: [f.path for f in files]
            for table, files in _warehouse(root).table_files().items()}


def view_name(table: str) -> tuple[str | None, str]:
    """(schema or None, view) of a warehouse table (see module)."""
    parts = table.split("/")
    return (None, parts[0]) if len(parts) == 1 else (parts[0], "__".join(parts[1:]))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect(root: Root, tables: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per warehouse table under ``root``, or per
    table of ``tables`` that is stored (each table's folder listed, not the warehouse)."""
    warehouse = _warehouse(root)
    found = (warehouse.table_files() if tables is None else
             {table: files for table in tables if (files := warehouse.files(table))})
    return connect_files(warehouse, found)


def connect_files(warehouse: Warehouse, found: Mapping[str, list[pafs.FileInfo]]
                  ) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table of ``found`` over the files
    listed for it there (all of the table's, or only some: those a reader has not read)."""
    connection = duckdb.connect(":memory:")
    connection.execute("SET TimeZone = 'UTC'")
    for number, (table, files) in enumerate(found.items()):
        schema, view = view_name(table)
        if schema is not None:
            connection.execute(f"CREATE SCHEMA IF NOT EXISTS {_quoted(schema)}")
        name = f"{_quoted(schema)}.{_quoted(view)}" if schema else _quoted(view)
        create_view(connection, warehouse, name, files, f"__joulehouse_dataset_{number}")
    return connection


def create_view(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, name: str,
                files: list[pafs.FileInfo], dataset_name: str) -> None:
    """The view ``name`` (quoted as SQL needs it) over the Parquet ``files`` of
    ``warehouse``, their columns united by name: DuckDB's ``read_parquet`` on a path, a
    pyarrow dataset registered as ``dataset_name`` on an object store (no extension)."""
    if warehouse.is_local:
        listed = ", ".join("'" + f.path.replace("'", "''") + "'" for f in files)
        source = f"read_parquet([{listed}], union_by_name = true)"
    else:
        source = dataset_name
        connection.register(source, warehouse.dataset(files))
    connection.execute(f"CREATE VIEW {name} AS SELECT * FROM {source}")


def query(root: Root, sql: str) -> pd.DataFrame:
    """The result of ``sql`` over the warehouse at ``root``, through Arrow (timestamps keep
    their UTC zone); raises duckdb.Error on a bad query, ValueError on a statement that
    returns no rows (a query is a SELECT)."""
    with connect(root) as connection:
        relation = connection.sql(sql)
        if relation is None:
            raise ValueError("not a query: the statement returns no rows (give a SELECT)")
        return relation.to_arrow_table().to_pandas()
