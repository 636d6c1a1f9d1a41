"""Parquet tables on disk, written atomically.

A table is a folder under the warehouse root. A partitioned table holds one
Parquet file per partition key; an unpartitioned table holds one file,
``table.parquet``. Every write goes to a hidden temporary file in the same
folder and is renamed into place with ``os.replace``, so a reader sees the old
file or the new one, never half of one, and a failed write leaves what was
stored untouched. Nothing here deletes a stored file.

Partition keys (e.g. ``gpu-data/clock-limit/bert/877MHz,1065MHz/0``) become
file names by percent-encoding every character that is not ``[A-Za-z0-9_.-]``;
the key is also kept in the file's Parquet metadata.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, unquote

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SUFFIX = ".parquet"
UNPARTITIONED = "table"
KEY_METADATA = b"joulehouse.partition_key"
MAX_FILE_NAME = 240  # bytes; most file systems allow 255


def partition_file_name(key: str) -> str:
    """The file name that stores partition ``key`` (reversible, see :func:`partition_key`)."""
    name = quote(key, safe="") + SUFFIX
    if not key or len(name.encode()) > MAX_FILE_NAME:
        raise ValueError(f"partition key is empty or too long for a file name: {key!r}")
    return name


def partition_key(file_name: str) -> str:
    """The partition key stored in ``file_name``."""
    return unquote(file_name.removesuffix(SUFFIX))


class Warehouse:
    """Parquet tables under one root folder (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def table_dir(self, table: str) -> Path:
        """The folder of ``table``; ``table`` may be nested (``gpu/validated/gpu_power``)."""
        parts = Path(table).parts
        if not parts or any(p in ("", ".", "..") for p in parts) or Path(table).is_absolute():
            raise ValueError(f"bad table name: {table!r}")
        return self.root.joinpath(*parts)

    def write_partition(self, table: str, key: str, frame: pd.DataFrame) -> Path:
        """Store ``frame`` as partition ``key`` of ``table``, replacing it atomically."""
        path = self.table_dir(table) / partition_file_name(key)
        _write_atomically(path, frame, {KEY_METADATA: key.encode()})
        return path

    def write_table(self, table: str, frame: pd.DataFrame) -> Path:
        """Store ``frame`` as the whole unpartitioned ``table``, replacing it atomically."""
        path = self.table_dir(table) / (UNPARTITIONED + SUFFIX)
        _write_atomically(path, frame, {})
        return path

    def partition_keys(self, table: str) -> list[str]:
        """The keys of the stored partitions of ``table``, sorted."""
        return sorted(partition_key(p.name) for p in self._files(table))

    def read_partitions(self, table: str, keys: Iterable[str]) -> pd.DataFrame:
        """The rows of the given partitions of ``table`` (every key must be stored)."""
        paths = [self.table_dir(table) / partition_file_name(k) for k in keys]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"partitions not stored: {', '.join(missing)}")
        return _read(paths)

    def partitions_without(self, table: str, keys: Iterable[str], column: str) -> list[str]:
        """The given partitions of ``table`` whose stored file has no ``column`` (footers only)."""
        folder = self.table_dir(table)
        return [key for key in keys
                if column not in pq.read_schema(folder / partition_file_name(key)).names]

    def read_table(self, table: str) -> pd.DataFrame:
        """All rows of ``table``: every partition, or the unpartitioned file."""
        return _read(self._files(table))

    def _files(self, table: str) -> list[Path]:
        folder = self.table_dir(table)
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir()
                      if p.suffix == SUFFIX and not p.name.startswith((".", "_")))


def _write_atomically(path: Path, frame: pd.DataFrame, metadata: dict[bytes, bytes]) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as sink:
            pq.write_table(table, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(paths: list[Path]) -> pd.DataFrame:
    """Concatenate Parquet files whose column sets may differ (missing columns read as null).

    Nullable pandas columns (``Int64``, ``boolean``, ``Float64``) come back with
    their dtype when every file that has the column stored it with that dtype.
    """
    if not paths:
        return pd.DataFrame()
    dataset = ds.dataset([str(p) for p in paths], format="parquet")
    schemas = [f.physical_schema for f in dataset.get_fragments()]
    schema = pa.unify_schemas(schemas, promote_options="permissive").remove_metadata()
    table = ds.dataset([str(p) for p in paths], format="parquet", schema=schema).to_table()
    frame = table.to_pandas()
    for name, dtype in _nullable_dtypes(schemas).items():
        if name in frame.columns and frame[name].dtype != dtype:
            frame[name] = table.column(name).to_pandas(types_mapper=lambda _t, d=dtype: d)
    return frame


def _nullable_dtypes(schemas: list[pa.Schema]) -> dict[str, pd.api.extensions.ExtensionDtype]:
    """Column -> nullable pandas dtype, from the files' pandas metadata where they all agree."""
    seen: dict[str, set[str]] = {}
    for schema in schemas:
        for column in (schema.pandas_metadata or {}).get("columns", []):
            if isinstance(column.get("name"), str):
                seen.setdefault(column["name"], set()).add(str(column.get("numpy_type")))
    dtypes = {}
    for name, types in seen.items():
        if len(types) != 1:
            continue
        try:
            dtype = pd.api.types.pandas_dtype(types.pop())
        except TypeError:
            continue
        if isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "iubf":
            dtypes[name] = dtype
    return dtypes
