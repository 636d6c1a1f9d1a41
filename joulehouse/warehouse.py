"""Parquet tables under one root, on a filesystem path or an S3-compatible object store.

A table is a folder under the warehouse root. A partitioned table holds one
Parquet file per partition key; an unpartitioned table holds one file,
``table.parquet``. Nothing here deletes a stored file, and a reader sees the
old file or the new one, never half of one; a failed write leaves what was
stored untouched. How a write is published depends on where the root is:

- a path (the default; a local or a shared, mounted filesystem): the file is
  written to a hidden temporary file in the same folder, fsynced, and renamed
  into place with ``os.replace``;
- a URL ``s3://bucket/prefix`` (through ``pyarrow.fs.S3FileSystem``; a non-AWS
  server's endpoint from :class:`ObjectStore`): a rename is a copy there, so
  the file is serialized in memory first (a failure while it is built sends
  nothing) and then uploaded once under its final key. An upload is published
  whole or not at all (a PUT, or a multipart upload's completion, is atomic
  per object), so no temporary object and no pointer are needed, and the
  layout of keys is the layout of files on a path. The bytes a write sends are
  the bytes a write to a path stores.

Every reader and writer of the warehouse (the sources' stores, the partition
groups, the PowerAPI pieces and progress, DuckDB's views) goes through this
class, so both kinds of root behave alike. Reads stream through pyarrow's
datasets on either.

A table *kept per entry* (``joulehouse/entry_table.py``: a Delta Lake table, for the
derived tables that hold a decade) is written by :meth:`Warehouse.write_entries` and
:meth:`Warehouse.remove_entries`, one commit each (per ``entry_table.IN_LIMIT`` entries); :meth:`Warehouse.read_table` and
:meth:`Warehouse.table_files` give the rows and files of its current version, so its
readers are those of every other table. Its compaction is the one place where stored
files are deleted: those no version has listed for an hour.

Partition keys (e.g. ``gpu-data/clock-limit/bert/877MHz,1065MHz/0``) become
file names by percent-encoding every character that is not ``[A-Za-z0-9_.-]``;
the key is also kept in the file's Parquet metadata.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote, urlsplit

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from joulehouse import entry_table

SUFFIX = ".parquet"
UNPARTITIONED = "table"
KEY_METADATA = b"joulehouse.partition_key"
MAX_FILE_NAME = 240  # bytes; most file systems allow 255
#: How a hidden file or folder of a table's folder begins, which no reader reads and no
#: table holds: ``.`` a write in progress (``.<name>.parquet.<random>.tmp``), ``_`` an
#: internal one (staged writes, locks, a Delta log).
HIDDEN = (".", "_")
#: The warehouse root: a path, or ``s3://bucket/prefix``.
WAREHOUSE_ENV = "JOULEHOUSE_WAREHOUSE"
#: An S3-compatible server's endpoint (``http://host:port``) when it is not AWS.
S3_ENDPOINT_ENV = "JOULEHOUSE_S3_ENDPOINT"
#: The region of the bucket (AWS's variable; optional for a non-AWS server).
S3_REGION_ENV = "AWS_DEFAULT_REGION"
URL_SCHEMES = ("s3",)


def is_hidden(name: str) -> bool:
    """Whether the file or folder named ``name`` (a base name) is hidden (``HIDDEN``)."""
    return name.startswith(HIDDEN)


def partition_file_name(key: str) -> str:
    """The file name that stores partition ``key`` (reversible, see :func:`partition_key`)."""
    name = quote(key, safe="") + SUFFIX
    if not key or len(name.encode()) > MAX_FILE_NAME:
        raise ValueError(f"partition key is empty or too long for a file name: {key!r}")
    return name


def partition_key(file_name: str) -> str:
    """The partition key stored in ``file_name``."""
    return unquote(file_name.removesuffix(SUFFIX))


def is_url(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` names an object store (``s3://...``) rather than a path."""
    return isinstance(root, str) and "://" in root


@dataclass(frozen=True)
class ObjectStore:
    """How to reach an S3-compatible object store: ``endpoint`` (``http://host:port``;
    None: AWS), ``region``, and the credentials (None: pyarrow's own lookup, i.e. the
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` environment variables). Credentials
    are passed in from the environment, never stored in a file."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None

    @classmethod
    def from_env(cls) -> ObjectStore:
        """``$JOULEHOUSE_S3_ENDPOINT`` and ``$AWS_DEFAULT_REGION`` where set; credentials
        from AWS's variables at connection time."""
        return cls(endpoint=os.environ.get(S3_ENDPOINT_ENV) or None,
                   region=os.environ.get(S3_REGION_ENV) or None)

    def delta_options(self) -> dict[str, str]:
        """The same store as deltalake's storage options (credentials left to its own
        lookup of AWS's variables where None). A version is published by a PUT with
        ``If-None-Match: *`` (object_store's conditional put, ``etag``), which the store
        refuses where the version exists: set here, not left to a default."""
        options = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": self.region,
                   "AWS_ACCESS_KEY_ID": self.access_key,
                   "AWS_SECRET_ACCESS_KEY": self.secret_key,
                   "AWS_CONDITIONAL_PUT": "etag"}
        if self.endpoint and self.endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        return {name: value for name, value in options.items() if value}

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow filesystem over the store (buckets are never created or deleted)."""
        return pafs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key,
                                 endpoint_override=self.endpoint, region=self.region,
                                 allow_delayed_open=True)  # a small file: one PutObject


class Warehouse:
    """Parquet tables under ``root``: a folder (created on first write), or a URL
    ``s3://bucket/prefix`` on an object store reached through ``store`` (default
    :meth:`ObjectStore.from_env`; the bucket must exist)."""

    def __init__(self, root: str | os.PathLike[str], store: ObjectStore | None = None) -> None:
        if is_url(root):
            url = urlsplit(root)
            if url.scheme not in URL_SCHEMES or not url.netloc:
                raise ValueError(f"warehouse URL {root!r}: expected s3://bucket/prefix")
            self.url = root.rstrip("/")
            self.store: ObjectStore | None = store or ObjectStore.from_env()
            self.filesystem: pafs.FileSystem = self.store.filesystem()
            self._base = (url.netloc + url.path).rstrip("/")
        else:
            self.url = str(root)
            self.store = None
            self.filesystem = pafs.LocalFileSystem()
            self._base = str(Path(root).absolute())

    @property
    def is_local(self) -> bool:
        """Whether the root is a path (local or mounted), where files are renamed and locked."""
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    def table_path(self, table: str) -> str:
        """The path of ``table``'s folder in :attr:`filesystem`; ``table`` may be nested
        (``gpu/validated/gpu_power``)."""
        parts = PurePosixPath(table).parts
        if not parts or any(p in ("", ".", "..") for p in parts) or table.startswith("/"):
            raise ValueError(f"bad table name: {table!r}")
        return "/".join((self._base, *parts))

    def table_dir(self, table: str) -> Path:
        """The folder of ``table`` on a path root (for tools that read files directly)."""
        if not self.is_local:
            raise ValueError(f"{self.url} is an object store: {table} has no local folder")
        return Path(self.table_path(table))

    def location(self, table: str) -> str:
        """Where ``table`` is, for people and for the source names of what is derived from
        it: its absolute folder on a path root, its URL on an object store."""
        if self.is_local:
            return str(Path(self.table_path(table)).resolve())
        return f"{self.url}/{table}"

    def partition_path(self, table: str, key: str) -> str:
        """The path in :attr:`filesystem` of partition ``key`` of ``table``."""
        return f"{self.table_path(table)}/{partition_file_name(key)}"

    def write_partition(self, table: str, key: str, frame: pd.DataFrame,
                        metadata: Mapping[str, str] | None = None) -> str:
        """Store ``frame`` as partition ``key`` of ``table``, replacing it atomically;
        ``metadata``: more key-value pairs for its footer (:meth:`partition_metadata`)."""
        path = self.partition_path(table, key)
        self._write(path, frame, {KEY_METADATA: key.encode(), **{
            name.encode(): value.encode() for name, value in (metadata or {}).items()}})
        return path

    def partition_metadata(self, table: str, key: str) -> dict[str, str]:
        """The footer's key-value pairs of partition ``key`` of ``table`` (pandas' and
        Arrow's included; none when it is not stored), read without its rows."""
        try:
            schema = pq.read_schema(self.partition_path(table, key), filesystem=self.filesystem)
        except FileNotFoundError:
            return {}
        return {name.decode(): value.decode() for name, value in (schema.metadata or {}).items()}

    def write_table(self, table: str, frame: pd.DataFrame) -> str:
        """Store ``frame`` as the whole unpartitioned ``table``, replacing it atomically."""
        path = f"{self.table_path(table)}/{UNPARTITIONED}{SUFFIX}"
        self._write(path, frame, {})
        return path

    def partition_keys(self, table: str) -> list[str]:
        """The keys of the stored partitions of ``table``, sorted."""
        return sorted(partition_key(info.base_name) for info in self.parquet_files(table))

    def has_partition(self, table: str, key: str) -> bool:
        """Whether partition ``key`` of ``table`` is stored."""
        info = self.filesystem.get_file_info(self.partition_path(table, key))
        return info.type == pafs.FileType.File

    def partition_version(self, table: str, key: str) -> str:
        """When and how partition ``key`` of ``table`` was last stored, without reading it:
        ``"size:mtime_ns"`` on a path, ``"size:ETag"`` on an object store (whose
        modification times have whole seconds only; the ETag of a single upload is a digest
        of its bytes, so a rewrite with the same bytes keeps the version, as it keeps the
        data). Raises FileNotFoundError when it is not stored."""
        path = self.partition_path(table, key)
        if self.is_local:
            stat = os.stat(path)
            return f"{stat.st_size}:{stat.st_mtime_ns}"
        with self.filesystem.open_input_file(path) as stored:  # one HEAD request
            etag = stored.metadata().get("ETag", b"").decode().strip('"')
            return f"{stored.size()}:{etag}"

    def read_partitions(self, table: str, keys: Iterable[str]) -> pd.DataFrame:
        """The rows of the given partitions of ``table`` (every key must be stored)."""
        infos = self.filesystem.get_file_info([self.partition_path(table, k) for k in keys])
        missing = [i.path for i in infos if i.type != pafs.FileType.File]
        if missing:
            raise FileNotFoundError(f"partitions not stored: {', '.join(missing)}")
        return read_parquet_files(infos, self.filesystem)

    def partitions_without(self, table: str, keys: Iterable[str], column: str) -> list[str]:
        """The given partitions of ``table`` whose stored file has no ``column`` (footers only)."""
        return [key for key in keys if column not in pq.read_schema(
            self.partition_path(table, key), filesystem=self.filesystem).names]

    def read_table(self, table: str) -> pd.DataFrame:
        """All rows of ``table``: every partition, the unpartitioned file, or the current
        version of a table kept per entry."""
        if entry_table.is_entry_table(self, table):
            return entry_table.read(self, table)
        return read_parquet_files(self.parquet_files(table), self.filesystem)

    def delta_options(self) -> dict[str, str]:
        """deltalake's storage options for this root (none on a path)."""
        return self.store.delta_options() if self.store is not None else {}

    def write_entries(self, table: str, rows: pd.DataFrame, scope: Mapping[str, str],
                      column: str = "entity", removed: Iterable[str] = ()) -> None:
        """Replace the rows of the entries of ``rows`` of ``table`` (kept per entry; made on
        first write), and remove those of ``removed``, in one commit (per
        ``entry_table.IN_LIMIT`` entries): see
        ``joulehouse.entry_table.write_entries``."""
        entry_table.write_entries(self, table, rows, scope, column, removed)

    def remove_entries(self, table: str, scope: Mapping[str, str], entries: Iterable[str],
                       column: str = "entity") -> None:
        """Remove the rows of ``entries`` of ``table`` (kept per entry) in one commit (per
        ``entry_table.IN_LIMIT`` entries)."""
        entry_table.remove_entries(self, table, scope, entries, column)

    def table_files(self) -> dict[str, list[pafs.FileInfo]]:
        """Every table under the root (its name, '/'-separated) and its visible Parquet
        files, sorted by path. Hidden files and folders (``.``: writes in progress) and
        internal folders and files (``_``: staged writes, locks) are left out, as
        :meth:`partition_keys` leaves them out of a table. A table kept per entry (see
        ``joulehouse.entry_table``) has the files of its current version."""
        found: dict[str, list[str]] = {}
        kept_per_entry = set()
        selector = pafs.FileSelector(self._base, allow_not_found=True, recursive=True)
        for info in self.filesystem.get_file_info(selector):
            relative = PurePosixPath(info.path).relative_to(self._base)
            if entry_table.LOG in relative.parts[1:]:
                table = relative.parts[:relative.parts.index(entry_table.LOG)]
                if not any(map(is_hidden, table)):  # a hidden table (a step's state): none
                    kept_per_entry.add(PurePosixPath(*table).as_posix())
            if (info.type == pafs.FileType.File and info.path.endswith(SUFFIX)
                    and not any(map(is_hidden, relative.parts))
                    and len(relative.parts) > 1):
                found.setdefault(relative.parent.as_posix(), []).append(info)
        for table in kept_per_entry:  # the current version's files, not every one stored
            found[table] = entry_table.files(self, table)
            if not found[table]:
                del found[table]
        return {name: sorted(files, key=lambda info: info.path)
                for name, files in sorted(found.items())}

    def files(self, table: str) -> list[pafs.FileInfo]:
        """``table``'s visible Parquet files as :meth:`table_files` gives them (the current
        version's of a table kept per entry), sorted by path, from one listing of its own
        folder rather than of the whole warehouse."""
        if entry_table.is_entry_table(self, table):
            return sorted(entry_table.files(self, table), key=lambda info: info.path)
        return self.parquet_files(table)

    def dataset(self, files: list[pafs.FileInfo]) -> ds.Dataset:
        """``files`` (of :meth:`table_files`) as one lazily scanned pyarrow dataset, their
        columns united by name."""
        return _dataset(files, self.filesystem)[0]

    def move_partition(self, source: str, table: str, key: str) -> bool:
        """Move partition ``key`` of table ``source`` over that of ``table`` (a rename on a
        path; a server-side copy, atomic per object, then a delete on an object store).
        False when ``source`` does not hold it (moved already). For staged writes only:
        see ``joulehouse.partition_group``."""
        staged = self.partition_path(source, key)
        if self.filesystem.get_file_info(staged).type != pafs.FileType.File:
            return False
        self.filesystem.move(staged, self.partition_path(table, key))
        return True

    def remove_partition(self, table: str, key: str) -> None:
        """Remove partition ``key`` of ``table`` if stored. For bookkeeping tables only
        (a partition group's journal): no table of data loses a partition."""
        path = self.partition_path(table, key)
        if self.filesystem.get_file_info(path).type == pafs.FileType.File:
            self.filesystem.delete_file(path)

    def remove_empty_folder(self, table: str) -> None:
        """Remove ``table``'s folder if it is empty (on an object store: the empty marker
        object pyarrow leaves where the folder's last object was deleted)."""
        path = self.table_path(table)
        if self.is_local:
            with suppress(OSError):  # gone, or not empty
                os.rmdir(path)
        elif (self.filesystem.get_file_info(path).type == pafs.FileType.Directory
              and not self.filesystem.get_file_info(pafs.FileSelector(path))):
            self.filesystem.delete_dir(path)

    def parquet_files(self, table: str) -> list[pafs.FileInfo]:
        """The visible Parquet files directly in ``table``'s folder, sorted by path, whatever
        the table is (a Delta table's data files included: :meth:`files` gives those of its
        current version)."""
        selector = pafs.FileSelector(self.table_path(table), allow_not_found=True)
        return sorted((info for info in self.filesystem.get_file_info(selector)
                       if info.type == pafs.FileType.File and info.path.endswith(SUFFIX)
                       and not is_hidden(info.base_name)),
                      key=lambda info: info.path)

    def _write(self, path: str, frame: pd.DataFrame, metadata: dict[bytes, bytes]) -> None:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        if self.is_local:
            _write_atomically(Path(path), table)
        else:
            _upload_once(self.filesystem, path, table)


def _write_atomically(path: Path, table: pa.Table) -> None:
    """Write ``table`` to a temporary file beside ``path``, fsync it, rename it over ``path``."""
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


def _upload_once(filesystem: pafs.FileSystem, path: str, table: pa.Table) -> None:
    """Serialize ``table`` in memory, then upload it in one piece under ``path``.

    pyarrow's S3 output stream has no abort: closed after a half write it would publish
    the half. So nothing is opened until the whole file is built; an upload that fails is
    never completed, and the object stays as it was."""
    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer)
    data = buffer.getvalue()
    with filesystem.open_output_stream(path) as sink:
        sink.write(data)


def _dataset(files: list[pafs.FileInfo], filesystem: pafs.FileSystem
             ) -> tuple[ds.Dataset, list[pa.Schema]]:
    """The Parquet ``files`` as one dataset whose schema unites theirs by column name (a
    column missing from a file reads as null), and the files' own schemas.

    Each footer is read once (the fragments keep it for the scan) and the sizes come from
    the listing, so an object store is asked for nothing else before the data."""
    parquet = ds.ParquetFileFormat()
    fragments = [parquet.make_fragment(f.path, filesystem, file_size=f.size) for f in files]
    schemas = [fragment.physical_schema for fragment in fragments]
    schema = pa.unify_schemas(schemas, promote_options="permissive").remove_metadata()
    return ds.FileSystemDataset(fragments, schema, parquet, filesystem), schemas


def read_parquet_files(files: list[pafs.FileInfo], filesystem: pafs.FileSystem) -> pd.DataFrame:
    """Concatenate Parquet files whose column sets may differ (missing columns read as null).

    Nullable pandas columns (``Int64``, ``boolean``, ``Float64``) come back with
    their dtype when every file that has the column stored it with that dtype.
    """
    if not files:
        return pd.DataFrame()
    dataset, schemas = _dataset(files, filesystem)
    table = dataset.to_table()
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
