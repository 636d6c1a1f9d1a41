"""Tables kept per entry: a Delta Lake table whose entries are replaced or removed by commits.

An *entry* is what one landing writes into a derived table: a GPU repetition's
``energy_facts`` rows, a GEOPM report's, a ClusterCockpit job's. It is named by a
*scope* (fixed column values, e.g. ``{"source": "gpu-benchmark"}``) and its value in
the *entry column* (``entity``). Landing, fixing or removing k entries costs one commit
over k entries (one per ``IN_LIMIT``), whatever the table already holds (issue 28; the measurements and the
choice: ``benchmarks/table_format.py``, docs/ARCHITECTURE.md "Tables that hold a decade").

The table is a Delta Lake table (``deltalake``) in the warehouse table's folder: data
files ``part-*.parquet`` and the log ``_delta_log/``. A write is an overwrite by the
predicate ``<scope> AND <entry column> IN (<entries>)`` with the entries' new rows
(none: a removal): readers see the version before or the version after, never a part
(the commit is the log entry, written only where absent); a write that fails before its
commit leaves data files that no version lists, which :func:`compact` removes once
older than ``RETENTION_HOURS``. The table is made, empty (version 0), before its first
write, so a first write is such a write too; a log without a version (a making or a
migration stopped before its commit) reads as the folder's plain files, if any (none:
empty). Writers may race: delta-rs refuses a commit whose read another commit changed
(``CommitFailedError``), and the caller tries again (``entry_sync.retried``); a table
written by several steps at once is compacted by :func:`compact_scope`, never by
:func:`compact` (docs/ARCHITECTURE.md, "Writers at once"). ``DeltaTable.delete`` is not used: it rewrites a
file's other rows with ``string_view`` strings, which a pyarrow dataset's filter
(DuckDB's pushdown on an object store) cannot compare.

Compaction in order: :func:`merge_scope` merges a scope's small files in the order of a
column (an entity, a day) into files of a given size, so that files keep holding ranges
of it, which later reads and predicates find by the files' statistics; :func:`compact_scope`
is that merge and a vacuum, :func:`vacuum_if_due` a vacuum every so many versions of a
table one step at a time writes (the accounting's, ``accounting/compaction.py``).

A folder that holds plain Parquet files (the table as written before it was kept per
entry, e.g. ``energy_facts/<source>.parquet``) is migrated by the first write (or
:func:`stored_entries`, the lookup before one): its version 0, committed only where no
version exists, holds their rows; until it is committed readers read those files (never the
``part-*`` data files of a write in progress), and they stay in the folder, unread.

Readers need no Delta reader: :func:`files` are the Parquet files of the current
version (the log's add actions), read by pandas, pyarrow or DuckDB's ``read_parquet``
like any warehouse table's (``Warehouse.table_files`` lists them). Delta stores
timestamps in microseconds: a finer time is refused on write, and :func:`read` gives
them back as the warehouse's ``ns``, with the nullable pandas dtypes of the first rows
written (kept in the table's schema).

deltalake is imported when a table is opened, not with this module (0.26 s).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from joulehouse.warehouse import Warehouse

LOG = "_delta_log"
#: How delta-rs names its data files (``part-00001-<uuid>-c000.<codec>.parquet``).
DATA_PREFIX = "part-"
#: The key of a column's nullable pandas dtype in its Delta field's metadata.
PANDAS_DTYPE = "joulehouse.pandas_dtype"
#: Data files are removed by :func:`compact` this long after a version stops listing
#: them, so that a reader that listed them before (a ``joulehouse sql`` session, a long
#: run) still finds them, and a version of that age can be read back (hours; Delta's
#: default, ``delta.deletedFileRetentionDuration``, enforced as its minimum).
RETENTION_HOURS = 7 * 24
#: The table property holding the version a vacuum by :func:`vacuum_if_due` left.
VACUUMED = "joulehouse.vacuumed_version"
#: The most values one ``IN`` list of a write's predicate names, and the most terms one
#: predicate joins by ``OR``: deltalake 1.6.6 (DataFusion) kills the process (SIGSEGV, no
#: exception) parsing an ``IN`` list of about 20,000 values or an ``OR`` of about 3,000
#: ``starts_with`` terms (measured; a run landing a GPU day of 6,000 repetitions died so).
#: More entries are written in several commits of at most these, each atomic.
IN_LIMIT = 5_000
OR_LIMIT = 500
#: The most values one ``IN`` list of a predicate built whole may name, and the most terms
#: it may join (:func:`predicate` and :func:`keys_predicate` refuse more): about half of
#: where deltalake crashes on the shapes built here, terms ``(a AND b AND c IN (...))``
#: joined by one ``OR``. Deeper lies sooner: a list of 10,000 one ``OR`` further down died
#: (the accounting members' predicate as it was, after the seeded soak history's landing
#: of 10,000 jobs; benchmarks/predicate_limits.py ``--or-in``), where a bare one lives to
#: 20,000. The accounting writes its members and per-fact rows in parts of ``IN_LIMIT``
#: changed entities (:func:`key_parts`), so its predicates stay within it
#: (tests/test_entry_table.py writes with such predicates in a process of its own).
IN_MAX, OR_MAX = 5_000, 1_000
#: The longest string statistic a written file keeps (bytes, cut at a character), in the
#: log and the Parquet footer: deltalake's default, 64, cut a GPU repetition's key
#: (``root/experiment/benchmark/run/repetition``) to a prefix many files share, so every
#: file of such a source spanned the same range and no compaction window fit, and reads
#: by key could prune nothing. Files written before keep their cut statistics: true
#: bounds (a prefix, and the prefix's last character raised), but a range that a merge
#: cannot fit within ``REWRITE_BYTES`` stays so until the table is rewritten.
STATISTICS_LENGTH = 1024
#: Files of one scope under this size are those :func:`compact_scope` merges (and counts
#: as due, :func:`small_files`): a quarter of ``TARGET_FILE_BYTES``, so that the files it
#: writes, most of them larger, are not merged again at every write. A merge into files
#: of another size takes the same share of it (:func:`_sizes`).
SCOPE_SMALL_BYTES = 25 * 2**20
#: The size :func:`compact` merges small data files into (bytes; delta-rs's default for
#: ``optimize.compact``): a file of this size or more is never merged.
TARGET_FILE_BYTES = 100 * 2**20
#: The most bytes of data files one :func:`compact_scope` rewrites: twice the target, so
#: that a range can take in one file at the target size (a merged file, or a file of
#: several scopes that an ``optimize`` of every scope wrote) beside the small ones (twice
#: the size of the files a merge writes, :func:`_sizes`).
REWRITE_BYTES = 2 * TARGET_FILE_BYTES


def _writer_properties(compression: str = "SNAPPY", level: int | None = None):
    """Parquet settings: the column statistics kept to :data:`STATISTICS_LENGTH`, and
    ``compression`` (at ``level``), which must be named: deltalake's ``WriterProperties``
    alone write uncompressed files. Its own defaults: Snappy for a write, ZSTD level 4 for
    ``optimize.compact``."""
    from deltalake import WriterProperties

    return WriterProperties(statistics_truncate_length=STATISTICS_LENGTH,
                            compression=compression, compression_level=level)


def _write_delta(target, data, **options) -> None:
    """``deltalake.write_deltalake`` of ``data`` to ``target`` (a table's URI or an opened
    table) with ``options``, its files' statistics kept whole (:func:`_writer_properties`)."""
    from deltalake import write_deltalake

    write_deltalake(target, data, writer_properties=_writer_properties(), **options)


def is_entry_table(warehouse: Warehouse, table: str) -> bool:
    """Whether ``table`` is kept per entry (its folder holds a Delta log)."""
    info = warehouse.filesystem.get_file_info(f"{warehouse.table_path(table)}/{LOG}")
    return info.type == pafs.FileType.Directory


def version(warehouse: Warehouse, table: str) -> int | None:
    """The number of ``table``'s current Delta version (one per commit); None where its
    log holds none."""
    delta = _open(warehouse, table)
    return None if delta is None else delta.version()


def _uri(warehouse: Warehouse, table: str) -> str:
    return warehouse.table_path(table) if warehouse.is_local else f"{warehouse.url}/{table}"


def _plain_files(warehouse: Warehouse, table: str) -> list[pafs.FileInfo]:
    """The plain Parquet files of ``table``'s folder that are no Delta data file: those of
    a table written before it was kept per entry, which its first version migrates."""
    return [info for info in warehouse.parquet_files(table) if not info.base_name.startswith(DATA_PREFIX)]


def _open(warehouse: Warehouse, table: str) -> DeltaTable | None:
    """The table's current version; None where its log holds no version (a making or a
    migration stopped before its commit: readers read the folder's plain files)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(_uri(warehouse, table), storage_options=warehouse.delta_options())
    except TableNotFoundError:
        return None


def _create(warehouse: Warehouse, table: str, schema: pa.Schema) -> None:
    """Make the table, version 0, with ``schema`` and no data, unless a version exists.

    A first write is thus an overwrite like any other: data files written before a
    failure are listed by no version (delta-rs writes them before the commit)."""
    from deltalake import DeltaTable

    _refuse_nested(warehouse, table)
    DeltaTable.create(_uri(warehouse, table), _delta_schema(schema), mode="ignore",
                      storage_options=warehouse.delta_options())


def _refuse_nested(warehouse: Warehouse, table: str) -> None:
    """Refuse a folder that holds anything but Parquet files and hidden ones (a nested
    table, another file): readers of the table would not see it, nor could it be
    migrated. Hidden files and folders (``warehouse.is_hidden``: the log, the temporary
    file a killed plain write left) are no table's, as every reader of the warehouse
    leaves them out."""
    from joulehouse.warehouse import is_hidden

    path = warehouse.table_path(table)
    held = sorted(info.base_name for info in warehouse.filesystem.get_file_info(
        pafs.FileSelector(path, allow_not_found=True))
        if not is_hidden(info.base_name)
        and (info.type != pafs.FileType.File or not info.base_name.endswith(".parquet")))
    if held:
        raise FileExistsError(
            f"{table}: {path} already holds {', '.join(held[:5])}"
            f"{' …' if len(held) > 5 else ''}; a table kept per entry is made in a folder "
            "holding nothing but Parquet files (whose rows its first version takes)")


def _delta_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` (of rows from pandas) as the table keeps it: timestamps in microseconds,
    Delta's unit (made from ``ns``, the table would need the preview feature
    ``timestampNanos``, which other Delta readers refuse, and keep microseconds only),
    and a nullable pandas dtype (``Int64``, ``boolean``, ``Float64``) in its field's
    metadata (``PANDAS_DTYPE``), which Delta's schema keeps and pandas' metadata not."""
    from joulehouse.warehouse import _nullable_dtypes

    nullable = _nullable_dtypes([schema])
    fields = []
    for field in schema:
        if pa.types.is_timestamp(field.type):
            field = field.with_type(pa.timestamp("us", field.type.tz))
        if field.name in nullable:
            field = field.with_metadata({PANDAS_DTYPE: str(nullable[field.name])})
        fields.append(field)
    return pa.schema(fields)


def _refuse_sub_microseconds(table: str, rows: pd.DataFrame) -> None:
    """Delta keeps microseconds: a timestamp with a finer part is refused, not cut."""
    for name in rows.columns:
        if pd.api.types.is_datetime64_any_dtype(rows[name].dtype):
            finer = rows[name].notna() & (rows[name].dt.nanosecond != 0)
            if finer.any():
                row = finer.to_numpy().argmax()
                raise ValueError(
                    f"{table}: {name} of row {row} ({rows[name].iloc[row]}) has a part "
                    "finer than a microsecond, which the table cannot keep: round the "
                    "times to microseconds (Series.dt.round('us')) before writing")


def _literal(value: str) -> str:
    """A SQL string literal: ``'`` doubled, nothing else escaped (a backslash is itself)."""
    return "'" + str(value).replace("'", "''") + "'"


def _name(column: str) -> str:
    """A quoted SQL identifier: DataFusion lower-cases unquoted names."""
    return '"' + column.replace('"', '""') + '"'


def _arrow(rows: pd.DataFrame) -> pa.Table | pa.RecordBatchReader:
    return pa.Table.from_pandas(rows, preserve_index=False)


def predicate(scope: Mapping[str, str], column: str, entries: Iterable[str]) -> str:
    """The SQL predicate that selects ``entries`` (values of ``column``, sorted, at least
    one) within ``scope`` (at least one column: a write of a table shared by sources, such
    as ``energy_facts``, never spans every source; a table one writer keeps whole has its
    keys' predicate, :func:`keys_predicate`).
    A null or NaN entry is refused: ``IN`` would never select its rows."""
    listed = _bounded_entries(scope, column, entries)
    if not listed:
        raise ValueError(f"entries of {column} must be at least one and not null: {listed}")
    if len(listed) > IN_MAX:
        raise ValueError(f"entries of {column}: {len(listed)} over IN_MAX (write_entries "
                         "writes them in parts)")
    return " AND ".join([*(f"{_name(name)} = {_literal(value)}"
                           for name, value in scope.items()),
                         f"{_name(column)} IN ({', '.join(map(_literal, listed))})"])


def _bounded_entries(scope: Mapping[str, str], column: str, entries: Iterable[str]) -> list:
    """``entries``, distinct and sorted, once ``scope`` names a column and none is null or
    NaN (``IN`` would never select its rows)."""
    listed = list(entries)
    if not scope:
        raise ValueError(f"entries of {column} without a scope: name the columns that "
                         "bound a write (e.g. source)")
    if any(pd.isna(entry) for entry in listed):
        raise ValueError(f"entries of {column} must be at least one and not null: {listed}")
    return sorted(set(listed))


def to_microseconds(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with every timestamp rounded to the nearest microsecond (Delta's unit): for
    times computed in floating point (an offset in seconds added to a start), which the
    table refuses to cut silently."""
    rounded = {name: rows[name].dt.round("us") for name in rows.columns
               if pd.api.types.is_datetime64_any_dtype(rows[name].dtype)}
    return rows.assign(**rounded) if rounded else rows


def _migrate(warehouse: Warehouse, table: str) -> DeltaTable | None:
    """Make ``table``'s first version hold the rows of the plain Parquet files its folder
    held before it was kept per entry (their timestamps rounded to microseconds); None
    where it holds none. Readers read those files until that version is committed
    (:func:`files`); its log folder is made first, so that data files delta-rs writes
    before the commit are never read as plain files (``DATA_PREFIX``). The plain files
    stay in the folder, listed by no version: nothing is deleted (remove them by hand).

    Version 0 is committed only where the table has no version (``mode="error"``): a
    writer that committed it, and entries after it, since this one found none keeps
    them; this one then opens that table instead."""
    from deltalake.exceptions import DeltaError

    plain = _plain_files(warehouse, table)
    if not plain:
        return None
    _refuse_nested(warehouse, table)
    data = _arrow(to_microseconds(_read_plain(warehouse, plain)))
    warehouse.filesystem.create_dir(f"{warehouse.table_path(table)}/{LOG}")
    try:
        _write_delta(_uri(warehouse, table), data.cast(_delta_schema(data.schema)),
                        mode="error", storage_options=warehouse.delta_options())
    except DeltaError:
        made = _open(warehouse, table)
        if made is None:  # not a table made meanwhile: the write itself failed
            raise
        return made
    return _open(warehouse, table)


def _read_plain(warehouse: Warehouse, plain: list[pafs.FileInfo]) -> pd.DataFrame:
    from joulehouse.warehouse import read_parquet_files

    return read_parquet_files(plain, warehouse.filesystem)


def _opened(warehouse: Warehouse, table: str) -> DeltaTable | None:
    """The table's Delta log, a folder of plain files migrated into it first; None for a
    table not made yet."""
    delta = _open(warehouse, table) if is_entry_table(warehouse, table) else None
    return delta if delta is not None else _migrate(warehouse, table)


def _checked(table: str, rows: pd.DataFrame,
             scope: Mapping[str, str]) -> pa.Table | pa.RecordBatchReader:
    """``rows`` as Arrow, once every row lies within ``scope`` and no time in it has a
    sub-microsecond part (Delta keeps microseconds)."""
    if any((rows[name] != value).any() for name, value in scope.items()):
        raise ValueError(f"{table}: rows outside the scope {dict(scope)}")
    _refuse_sub_microseconds(table, rows)
    return _arrow(rows)


def write_entries(warehouse: Warehouse, table: str, rows: pd.DataFrame,
                  scope: Mapping[str, str], column: str = "entity",
                  removed: Iterable[str] = ()) -> None:
    """Replace the rows of the entries of ``rows`` (its values of ``column``, its scope
    columns equal to ``scope``) with ``rows``, and remove those of the entries ``removed``:
    one commit per ``IN_LIMIT`` entries (in their sorted order), each atomic; the table is
    made on its first write, with ``rows``'s schema. Nothing is written when there is no
    row and nothing stored to remove."""
    try:
        entries = _bounded_entries(scope, column, [*rows[column].unique().tolist(), *removed])
    except ValueError as error:
        raise ValueError(f"{table}: {error}") from None
    parts = list(_batched(entries, IN_LIMIT))
    for part in parts:
        where = predicate(scope, column, part)
        _overwrite(warehouse, table, rows if len(parts) == 1 else rows[rows[column].isin(part)],
                   scope, where)


def _batched(values: Sequence, size: int) -> Iterator[Sequence]:
    """``values`` in consecutive pieces of at most ``size``."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _overwrite(warehouse: Warehouse, table: str, rows: pd.DataFrame,
               scope: Mapping[str, str], where: str | None,
               target_file_bytes: int | None = None, since: int | None = None) -> None:
    """Replace the rows ``where`` selects (None: every row) with ``rows`` (checked within
    ``scope``; a column pandas left untyped typed as the table's), in one commit, in data
    files of ``target_file_bytes`` (delta-rs's default otherwise); the table is made on its
    first write, with ``rows``'s schema; nothing is written where there are no rows and no
    table. ``since``: the version the caller read the rows from; the commit is refused
    (``CommitFailedError``) if another came after it (deltalake 1.6.6 refuses any that added
    data, whatever rows it touched)."""
    delta = _opened(warehouse, table)
    if len(rows):
        data = _typed_nulls(_checked(table, rows, scope), delta)
        if delta is None:
            _create(warehouse, table, data.schema)
    elif delta is not None:
        data = pa.schema(delta.schema().to_arrow()).empty_table()
    else:
        return
    sized = {} if target_file_bytes is None else {"target_file_size": target_file_bytes}
    target = _uri(warehouse, table)
    if since is not None:
        from deltalake import DeltaTable

        target = DeltaTable(target, version=since, storage_options=warehouse.delta_options())
    _write_delta(target, data, mode="overwrite", predicate=where,
                    storage_options=warehouse.delta_options(), **sized)


def remove_entries(warehouse: Warehouse, table: str, scope: Mapping[str, str],
                   entries: Iterable[str], column: str = "entity") -> None:
    """Remove the rows of ``entries`` (values of ``column``) within ``scope``, in one
    commit (per ``IN_LIMIT`` entries); nothing to do for a table not made yet."""
    write_entries(warehouse, table, pd.DataFrame({column: pd.Series([], dtype=object)}),
                  scope, column, removed=entries)


def replace_scope(warehouse: Warehouse, table: str, rows: pd.DataFrame,
                  scope: Mapping[str, str]) -> None:
    """Replace every row within ``scope`` with ``rows`` in one commit (an overwrite by the
    predicate ``<scope>`` alone): a rebuild of the scope from scratch, for a change of
    more entries than an ``IN`` list should name. The table is made if it is not."""
    if not scope:
        raise ValueError(f"{table}: a replacement without a scope would replace every row")
    data = _checked(table, rows, scope)
    if _opened(warehouse, table) is None:
        _create(warehouse, table, data.schema)
    where = " AND ".join(f"{_name(name)} = {_literal(value)}" for name, value in scope.items())
    _write_delta(_uri(warehouse, table), data, mode="overwrite", predicate=where,
                    storage_options=warehouse.delta_options())


def stored_entries(warehouse: Warehouse, table: str, scope: Mapping[str, str],
                   prefixes: Iterable[str], column: str = "entity") -> set[str]:
    """The values of ``column`` within ``scope`` that start with one of ``prefixes``, in
    the current version (none for a table not made yet): read by DataFusion (deltalake's
    ``QueryBuilder``), which reads only the files whose statistics may hold them, in
    queries of at most ``OR_LIMIT`` prefixes. A folder of plain files is migrated first (:func:`_opened`), so that the entries it holds are
    found, as the write that follows a lookup (which would migrate it) sees them."""
    from deltalake import QueryBuilder

    listed = sorted(set(prefixes))
    if not listed:
        return set()
    delta = _opened(warehouse, table)
    if delta is None:
        return set()
    found: set[str] = set()
    for part in _batched(listed, OR_LIMIT):
        where = " AND ".join([*(f"{_name(name)} = {_literal(value)}"
                                for name, value in scope.items()),
                              "(" + " OR ".join(f"starts_with({_name(column)}, {_literal(prefix)})"
                                                for prefix in part) + ")"])
        batches = QueryBuilder().register("entries", delta).execute(
            f"SELECT DISTINCT {_name(column)} AS value FROM entries WHERE {where}")
        found |= {str(value) for batch in batches for value in pa.array(batch.column(0)).to_pylist()}
    return found


def count(warehouse: Warehouse, table: str, scope: Mapping[str, str]) -> int:
    """The rows within ``scope`` (column -> value) of the current version, without reading
    a row of most files: a file whose log statistics put every row within the scope
    counts its ``num_records``; a file that may hold some (a compacted file of many
    scopes, one without statistics) has its rows within the scope counted by pyarrow,
    which reads the scope's columns of the row groups whose statistics do not settle it;
    a file whose statistics exclude the scope is not opened. Before the first version:
    the rows within the scope of the plain files it will migrate (read whole)."""
    delta = _open(warehouse, table)
    if delta is None:
        return len(read(warehouse, table, scope))
    counted, scanned = 0, []
    for file in pa.table(delta.get_add_actions(flatten=True)).to_pylist():  # a row a file
        stats = [(file.get(f"min.{name}"), file.get(f"max.{name}"),
                  file.get(f"null_count.{name}"), value) for name, value in scope.items()]
        if all(least == value == most and nulls == 0 for least, most, nulls, value in stats):
            counted += file["num_records"]
        elif all(least is None or most is None or least <= value <= most
                 for least, most, _, value in stats):
            scanned.append(file)
    if not scanned:
        return counted
    base = warehouse.table_path(table)
    return counted + _dataset(warehouse, delta, [
        pafs.FileInfo(f"{base}/{file['path']}", pafs.FileType.File, size=file["size_bytes"])
        for file in scanned]).count_rows(filter=_within(scope))


def file_stats(warehouse: Warehouse, table: str) -> pd.DataFrame:
    """One row per data file of the current version, from the Delta log alone: ``path``,
    ``num_records`` and the statistics delta-rs keeps per column (``min.<column>``,
    ``max.<column>``, ``null_count.<column>``; a NaN is a null). Empty for a table not made
    yet (or not kept per entry)."""
    delta = _open(warehouse, table)
    if delta is None:
        return pd.DataFrame({"path": pd.Series(dtype=object),
                             "num_records": pd.Series(dtype="int64")})
    return pa.table(delta.get_add_actions(flatten=True)).to_pandas()


def _dataset(warehouse: Warehouse, delta: DeltaTable, listed: list[pafs.FileInfo]
             ) -> ds.FileSystemDataset:
    """The data files ``listed`` (of ``delta``'s current version) as one dataset of the
    table's schema."""
    parquet = ds.ParquetFileFormat()
    fragments = [parquet.make_fragment(info.path, warehouse.filesystem, file_size=info.size)
                 for info in listed]
    return ds.FileSystemDataset(fragments, pa.schema(delta.schema().to_arrow()), parquet,
                                warehouse.filesystem)


def _within(scope: Mapping[str, str] | None) -> ds.Expression | None:
    """The dataset filter of the rows within ``scope``; None (every row) without one."""
    if not scope:
        return None
    return functools.reduce(operator.and_, (ds.field(name) == value
                                            for name, value in scope.items()))


def files(warehouse: Warehouse, table: str) -> list[pafs.FileInfo]:
    """The Parquet files of the table's current version, with their sizes, sorted; before
    its first version, the plain files it will migrate (:func:`_migrate`), if any."""
    found = version_files(warehouse, table)
    return _plain_files(warehouse, table) if found is None else found


def version_files(warehouse: Warehouse, table: str) -> list[pafs.FileInfo] | None:
    """The Parquet files of the table's current version, with their sizes, sorted; None
    where its log holds no version yet (not made, or a making or migration stopped before
    its first commit: its plain files are its rows)."""
    delta = _open(warehouse, table)
    return None if delta is None else _listed(warehouse, table, delta)


def _listed(warehouse: Warehouse, table: str, delta: DeltaTable) -> list[pafs.FileInfo]:
    """The Parquet files of ``delta``'s version, with their sizes, sorted."""
    actions = delta.get_add_actions(flatten=True)
    base = warehouse.table_path(table)
    return sorted((pafs.FileInfo(f"{base}/{path}", pafs.FileType.File, size=size)
                   for path, size in zip(actions.column("path").to_pylist(),
                                         actions.column("size_bytes").to_pylist())),
                  key=lambda info: info.path)


def read(warehouse: Warehouse, table: str, scope: Mapping[str, str] | None = None
         ) -> pd.DataFrame:
    """Every row of the current version (within ``scope``, if given: column -> value),
    with the dtypes of the rows written: timestamps (naive or not) in ``ns`` as the
    warehouse stores them, nullable pandas dtypes as the table's fields name them
    (``PANDAS_DTYPE``). Before the first version: the plain files it will migrate."""
    delta = _open(warehouse, table)
    if delta is None:
        rows = _read_plain(warehouse, _plain_files(warehouse, table))
        for name, value in (scope or {}).items():
            rows = rows[rows[name] == value].reset_index(drop=True) if len(rows) else rows
        return rows
    return _as_written(delta, _dataset(warehouse, delta, _listed(warehouse, table, delta)
                                       ).to_table(filter=_within(scope)))


def compact(warehouse: Warehouse, table: str) -> dict[str, int]:
    """Merge the files under ``TARGET_FILE_BYTES`` into files of about that size
    (``optimize.compact``), then :func:`_vacuum`; the files added, merged and removed.
    Only for a table that one step at a time writes: delta-rs 1.6 lets two optimizes of
    one version both commit (tests/test_facts_entries.py), listing every merged row twice,
    and merges files of every scope into one, which the scopes' writes then all rewrite. A
    table several steps write at once is compacted by :func:`compact_scope`."""
    delta = _open(warehouse, table)
    if delta is None:
        return {"added": 0, "merged": 0, "removed": 0}
    merged = delta.optimize.compact(target_size=TARGET_FILE_BYTES,
                                    writer_properties=_writer_properties("ZSTD", 4))
    return {"added": merged["numFilesAdded"], "merged": merged["numFilesRemoved"],
            "removed": _vacuum(warehouse, table)}


def compact_scope(warehouse: Warehouse, table: str, scope: Mapping[str, str]
                  ) -> dict[str, int]:
    """:func:`merge_scope` in entity order, then :func:`_vacuum`: the files the merge's
    commit added and removed, and those vacuumed; nothing done (not even the vacuum) when
    no range holds two small files of ``scope``. For a table that several steps write at
    once (``energy_facts``, a source's files)."""
    merged = merge_scope(warehouse, table, scope)
    if merged is None:
        return {"added": 0, "merged": 0, "removed": 0}
    return {**merged, "removed": _vacuum(warehouse, table)}


def merge_scope(warehouse: Warehouse, table: str, scope: Mapping[str, str],
                column: str = "entity", order: Sequence[str] | None = None,
                target_file_bytes: int | None = None) -> dict[str, int] | None:
    """Merge small data files of ``scope`` (a source's; ``{}``: the table's) as a write
    does, in the order of ``column`` (strings, or times at whole milliseconds, as the log's
    statistics keep them: days, months, weeks): the files the commit added and removed, or
    None when no range holds two small files of ``scope``.

    The files chosen are under the small size (:func:`_sizes` of ``target_file_bytes``:
    ``SCOPE_SMALL_BYTES`` by default) and hold ``scope``'s rows, alone or beside other
    scopes' (a write of several sources' rows); the most of them, consecutive in the order
    of their lowest ``column`` value, whose range [lo, hi] of ``column`` the files of the
    table that may hold ``scope``'s rows in it add up to at most the rewrite size
    (``REWRITE_BYTES`` by default; :func:`_range_to_merge`). The range is widened to the
    whole range of each file it touches that holds ``scope``'s rows alone, so that none of
    them keeps rows out of it. The rows of ``scope`` in that range are read and written
    back, sorted by ``order`` (default: ``column``; its first column ``column``) in files of
    ``target_file_bytes`` (``TARGET_FILE_BYTES``), by one overwrite with the predicate
    ``<scope> AND lo <= column <= hi``, read and committed at one version: a racing write
    or compaction that touched those files makes delta-rs refuse one of the two commits
    (``CommitFailedError``), as two writes do, so no row is ever listed twice
    (``optimize.compact`` gives no such guarantee: :func:`compact`). The merged files hold
    ``scope``'s rows alone, which other scopes' writes never touch, unless the range takes
    in a file of several scopes: delta-rs writes that file's other rows after the merged
    ones, into the last merged file. The predicate names two values, whatever the files
    hold."""
    delta = _open(warehouse, table)
    target, small, rewrite = _sizes(target_file_bytes)
    span = None if delta is None else _range_to_merge(
        _scope_stats(warehouse, table, delta, scope, column, small), small, rewrite)
    if span is None:
        return None
    low, high, paths = span
    base = warehouse.table_path(table)
    listed = [info for info in _listed(warehouse, table, delta)
              if info.path[len(base) + 1:] in paths]
    kind = pa.schema(delta.schema().to_arrow()).field(column).type
    data = _dataset(warehouse, delta, listed).to_table(filter=functools.reduce(operator.and_, [
        *(ds.field(name) == value for name, value in scope.items()),
        ds.field(column) >= pa.scalar(low, kind), ds.field(column) <= pa.scalar(high, kind)]))
    data = data.sort_by([(name, "ascending") for name in (order or [column])])
    where = " AND ".join([*(f"{_name(name)} = {_literal(value)}" for name, value in scope.items()),
                          f"{_name(column)} >= {_literal(low)}",
                          f"{_name(column)} <= {_literal(high)}"])
    _write_delta(delta, data, mode="overwrite", predicate=where, target_file_size=target)
    metrics = delta.history(1)[0].get("operationMetrics", {})
    return {"added": int(metrics.get("num_added_files", 0)),
            "merged": int(metrics.get("num_removed_files", 0))}


def _sizes(target_file_bytes: int | None) -> tuple[int, int, int]:
    """An ordered merge's sizes (bytes): the files it writes, the files it merges (those
    under), the most it rewrites at once: ``TARGET_FILE_BYTES``, ``SCOPE_SMALL_BYTES`` and
    ``REWRITE_BYTES`` (None), or for files of ``target_file_bytes`` the same shares of it as
    theirs of ``TARGET_FILE_BYTES`` (a quarter, twice)."""
    if target_file_bytes is None:
        return TARGET_FILE_BYTES, SCOPE_SMALL_BYTES, REWRITE_BYTES
    return (target_file_bytes, target_file_bytes * SCOPE_SMALL_BYTES // TARGET_FILE_BYTES,
            target_file_bytes * REWRITE_BYTES // TARGET_FILE_BYTES)


def _scope_stats(warehouse: Warehouse, table: str, delta: DeltaTable,
                 scope: Mapping[str, str], column: str, small: int) -> pd.DataFrame:
    """Per data file of ``delta``'s version (``get_add_actions``): ``path``,
    ``size_bytes``, whether it holds ``scope``'s rows alone (``alone``) or any (``holds``),
    and the least and greatest ``column`` value of those rows (``low``, ``high``; None:
    unknown) and whether they are theirs alone (``exact``). All from the statistics, but
    for a file of several scopes (an ``optimize`` of every scope, a write of several):
    its rows within the scope are read, their ``column`` for one under ``small`` bytes
    (the scope's columns of the row groups whose statistics may hold them otherwise), so
    that one whose rows of the scope were moved out is never counted as a rewrite again,
    and a small one is merged as the files of the scope alone are. A file without
    statistics may hold any."""
    stats = pa.table(delta.get_add_actions(flatten=True)).to_pandas()
    files = pd.DataFrame({"path": stats["path"], "size_bytes": stats["size_bytes"],
                          "alone": True, "holds": True,
                          "low": stats.get(f"min.{column}"), "high": stats.get(f"max.{column}")})
    for name, value in scope.items():
        low, high = stats.get(f"min.{name}"), stats.get(f"max.{name}")
        if low is None or high is None:
            return files.assign(alone=False, exact=False)
        files["alone"] &= (low == value).to_numpy() & (high == value).to_numpy()
        files["holds"] &= ~((low > value).to_numpy() | (high < value).to_numpy())  # None: False
    base = warehouse.table_path(table)
    for index in np.flatnonzero((files["holds"] & ~files["alone"]).to_numpy()):
        row = files.iloc[index]
        info = pafs.FileInfo(f"{base}/{row['path']}", pafs.FileType.File, size=row["size_bytes"])
        rows = _dataset(warehouse, delta, [info])
        if row["size_bytes"] >= small:
            files.loc[index, "holds"] = rows.count_rows(filter=_within(scope)) > 0
            continue
        values = rows.to_table(filter=_within(scope), columns=[column]).column(column)
        files.loc[index, "holds"] = len(values) > 0
        bounds = pc.min_max(values).as_py() if len(values) else {"min": None, "max": None}
        files.loc[index, ["low", "high"]] = bounds["min"], bounds["max"]
    return files.assign(exact=files["alone"] | (files["holds"] & (files["size_bytes"] < small)))


def _range_to_merge(files: pd.DataFrame, small: int, rewrite: int
                    ) -> tuple[object, object, set[str]] | None:
    """From a version's data files (:func:`_scope_stats`): the range [lo, hi] of the column
    that :func:`merge_scope` merges and the paths of the files that may hold the scope's
    rows in it (their rewrite's cost), or None when no range holds two files under
    ``small`` bytes holding the scope's rows (of known bounds: ``exact``) within
    ``rewrite`` bytes. A window of such files, consecutive in the order of their lowest
    value, spans the least to the greatest of their values, widened to the whole range of
    each ``exact`` file it touches until it touches no other (so that it leaves none of
    their rows out). A file without statistics may hold any."""
    low, high = files["low"].to_numpy(), files["high"].to_numpy()
    known = (files["low"].notna() & files["high"].notna()).to_numpy()
    may, sizes = files["holds"].to_numpy(bool), files["size_bytes"].to_numpy()
    exact = may & known & files["exact"].to_numpy(bool)
    bounded = np.flatnonzero(known)

    def touched(lo, hi) -> tuple[object, object, np.ndarray]:
        """The range [lo, hi] widened as above, and the files that may hold rows in it."""
        while True:
            near = np.zeros(len(files), dtype=bool)
            near[bounded] = (low[bounded] <= hi) & (high[bounded] >= lo)
            hit = may & (~known | near)
            wider = low[hit & exact].min(), high[hit & exact].max()
            if (min(lo, wider[0]), max(hi, wider[1])) == (lo, hi):
                return lo, hi, hit
            lo, hi = min(lo, wider[0]), max(hi, wider[1])

    candidates = np.flatnonzero(exact & (sizes < small))
    candidates = candidates[np.argsort(low[candidates], kind="stable")]
    best: tuple[int, object, object, np.ndarray] | None = None
    for first in range(len(candidates)):
        if best is not None and len(candidates) - first <= best[0]:
            break  # no window from here holds more files
        lo, hi = low[candidates[first]], high[candidates[first]]
        for last in range(first + 1, len(candidates)):
            lo, hi, hit = touched(min(lo, low[candidates[last]]), max(hi, high[candidates[last]]))
            if sizes[hit].sum() > rewrite:
                break
            if best is None or last - first + 1 > best[0]:
                best = (last - first + 1, lo, hi, hit)
    if best is None:
        return None
    _, lo, hi, hit = best
    return lo, hi, set(files["path"].to_numpy()[hit])


def small_files(warehouse: Warehouse, table: str, scope: Mapping[str, str] | None = None,
                target_file_bytes: int | None = None) -> int:
    """The data files of the current version that a compaction merges: under
    ``TARGET_FILE_BYTES`` (:func:`compact`), or, given a ``scope`` (``{}``: every row),
    those under its small size (:func:`_sizes` of ``target_file_bytes``) whose statistics
    name its values as their least or greatest (so hold some of its rows;
    :func:`merge_scope`); before the first version, the plain files under
    ``TARGET_FILE_BYTES``."""
    delta = _open(warehouse, table)
    if delta is None:
        return sum(info.size < TARGET_FILE_BYTES for info in _plain_files(warehouse, table))
    stats = pa.table(delta.get_add_actions(flatten=True)).to_pandas()
    if scope is None:
        return int((stats["size_bytes"] < TARGET_FILE_BYTES).sum())
    return int(_small(stats, scope, _sizes(target_file_bytes)[1]).sum())


def small_files_by(warehouse: Warehouse, table: str, column: str,
                   scope: Mapping[str, str] | None = None,
                   target_file_bytes: int | None = None) -> dict[object, int]:
    """Per value of ``column`` (each source's, say) that the statistics name, the
    :func:`small_files` of ``scope`` with that value, from one read of the log."""
    stats = file_stats(warehouse, table)
    least, most = stats.get(f"min.{column}"), stats.get(f"max.{column}")
    if least is None or most is None:
        return {}
    small = _sizes(target_file_bytes)[1]
    values = sorted({*least.dropna(), *most.dropna()})
    return {value: int(_small(stats, {**(scope or {}), column: value}, small).sum())
            for value in values}


def _small(stats: pd.DataFrame, scope: Mapping[str, str], small: int) -> np.ndarray:
    """Which files of ``stats`` (:func:`file_stats`) are under ``small`` bytes and name each
    value of ``scope`` as their least or greatest (none without statistics of it)."""
    counted = (stats["size_bytes"] < small).to_numpy()
    for name, value in scope.items():
        least, most = stats.get(f"min.{name}"), stats.get(f"max.{name}")
        if least is None or most is None:
            return np.zeros(len(stats), dtype=bool)
        counted &= ((least == value) | (most == value)).to_numpy()
    return counted


def _vacuum(warehouse: Warehouse, table: str) -> int:
    """Remove the files no version has listed for ``RETENTION_HOURS`` (``vacuum``) and the
    data files of failed writes (``part-*.parquet`` in the table's folder that no version
    ever listed, as old); how many. Nothing else in the folder is touched."""
    delta = _open(warehouse, table)
    removed = delta.vacuum(retention_hours=RETENTION_HOURS, dry_run=False)
    # full=True lists every file no version lists (the ones just removed included)
    unlisted = [path for path in delta.vacuum(retention_hours=RETENTION_HOURS, full=True)
                if path not in removed and "/" not in path
                and path.startswith("part-") and path.endswith(".parquet")]
    for path in unlisted:
        try:
            warehouse.filesystem.delete_file(f"{warehouse.table_path(table)}/{path}")
        except FileNotFoundError:  # another step's vacuum removed it first
            continue
    return len(removed) + len(unlisted)


def vacuum_if_due(warehouse: Warehouse, table: str, every: int) -> int | None:
    """:func:`_vacuum` once ``every`` versions were committed since the last vacuum here
    (or since version 0, if none): how many files it removed; None when not due or no
    table. The version the vacuum left is kept in the table's property ``VACUUMED``,
    committed on its own: for a table one step at a time writes (a property's commit
    would refuse the commits of writers at once)."""
    delta = _open(warehouse, table)
    if delta is None or delta.version() - int(
            delta.metadata().configuration.get(VACUUMED, 0)) < every:
        return None
    removed = _vacuum(warehouse, table)
    delta = _open(warehouse, table)
    delta.alter.set_table_properties({VACUUMED: str(delta.version())},
                                     raise_if_not_exists=False)
    return removed


def write_keyed(warehouse: Warehouse, table: str, rows: pd.DataFrame, column: str,
                removed: Iterable[str] = (), since: int | None = None) -> None:
    """:func:`replace_keys` for a table with no scope column whose entries are the values
    of ``column`` (a job key, a report key, a day): the entries of ``rows`` and ``removed``
    get ``rows``'s rows (``removed``'s none). Values are compared as SQL string literals (a
    timestamp column's entries as ISO text). ``since``: see :func:`replace_keys`."""
    entries = [*rows[column].unique().tolist(), *removed]
    if any(pd.isna(entry) for entry in entries):
        raise ValueError(f"{table}: entries of {column} must not be null")
    replace_keys(warehouse, table, rows, pd.DataFrame({column: list(map(str, entries))}),
                 since=since)


def _typed_nulls(data: pa.Table, delta: DeltaTable | None) -> pa.Table:
    """``data`` with each column that pandas gave no type (all values None: Arrow's null
    type) typed as the table's field, or as a string in a table not made yet (an object
    column of this warehouse holds text): a table made with a null field would refuse
    every later value of it."""
    stored = {field.name: field.type for field in pa.schema(delta.schema().to_arrow())} \
        if delta is not None else {}
    for index, field in enumerate(data.schema):
        if pa.types.is_null(field.type):
            kind = stored.get(field.name, pa.string())
            data = data.set_column(index, field.with_type(kind), data.column(index).cast(kind))
    return data


def read_where(warehouse: Warehouse, table: str, where: ds.Expression | None,
               listed: list[pafs.FileInfo] | None = None) -> pd.DataFrame:
    """The rows of the current version (or of ``listed``'s) that ``where`` (a pyarrow
    dataset filter; None: all) selects, with :func:`read`'s dtypes; pyarrow skips the row groups whose statistics
    exclude them. ``listed``: the data files of an earlier look at the version (of
    :func:`version_files`), read as that version even if a commit came since (vacuum
    keeps them ``RETENTION_HOURS``). Before the first version: the plain files' rows,
    filtered."""
    delta = _open(warehouse, table)
    if delta is None:
        rows = read(warehouse, table)
        if rows.empty or where is None:
            return rows
        return pa.Table.from_pandas(rows, preserve_index=False).filter(where).to_pandas()
    listed = files(warehouse, table) if listed is None else listed
    return _as_written(delta, _dataset(warehouse, delta, listed).to_table(filter=where))


def _as_written(delta: DeltaTable, rows: pa.Table) -> pd.DataFrame:
    """``rows`` of ``delta`` as pandas with the dtypes of the rows written (see :func:`read`)."""
    frame = rows.to_pandas()
    for field in delta.schema().fields:
        if PANDAS_DTYPE in (field.metadata or {}):
            dtype = pd.api.types.pandas_dtype(field.metadata[PANDAS_DTYPE])
            frame[field.name] = rows.column(field.name).to_pandas(
                types_mapper=lambda _type, dtype=dtype: dtype)
    for name in frame.columns:
        if pd.api.types.is_datetime64_any_dtype(frame[name].dtype):
            frame[name] = frame[name].dt.as_unit("ns")
    return frame


def replace_where(warehouse: Warehouse, table: str, rows: pd.DataFrame, where: str | None,
                  target_file_bytes: int | None = None) -> None:
    """Replace the rows that the SQL predicate ``where`` selects with ``rows``, in one commit
    (an overwrite by that predicate; ``None``: every row, and the table's schema becomes
    ``rows``'s; ``""``: none, an append): for a table whose writes are not named by entries
    of one column (the accounting roll-ups, replaced per calendar, source and day). Every
    row of ``rows`` must satisfy ``where``. ``target_file_bytes``: the size of the data
    files written (delta-rs's default otherwise), so that rows written in order make files
    of ranges, which a later predicate's write rewrites alone. The table is made, or a
    folder of plain files migrated, first."""
    _refuse_sub_microseconds(table, rows)
    data = _decoded(_arrow(rows))
    delta = _opened(warehouse, table)
    if delta is None:
        _create(warehouse, table, data.schema)
    elif where is not None:  # an empty column has no type of its own: the table's
        data = data.cast(pa.schema(delta.schema().to_arrow()))
    options = {"storage_options": warehouse.delta_options(),
               "target_file_size": target_file_bytes}
    if where is None:
        _write_delta(_uri(warehouse, table), data.cast(_delta_schema(data.schema)),
                        mode="overwrite", schema_mode="overwrite", **options)
    elif where == "":
        _write_delta(_uri(warehouse, table), data, mode="append", **options)
    else:
        _write_delta(_uri(warehouse, table), data, mode="overwrite", predicate=where,
                        **options)


def _decoded(data: pa.Table) -> pa.Table:
    """``data`` with its dictionary columns (pandas categoricals) as their values' type:
    what a reader without pandas' metadata compares (decoded by Arrow, not per value)."""
    for index, field in enumerate(data.schema):
        if pa.types.is_dictionary(field.type):
            data = data.set_column(index, field.name,
                                   data.column(index).cast(field.type.value_type))
    return data


def read_files(warehouse: Warehouse, table: str, listed: list[pafs.FileInfo],
               where: ds.Expression | None = None,
               columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of ``table``'s data files ``listed`` (of :func:`files`: one version's, read
    as that version even if a commit comes meanwhile) that ``where`` selects (a pyarrow
    dataset filter, pruned by the files' and row groups' statistics), ``columns`` only if
    given; timestamps in ``ns`` as the warehouse stores them. For tables without nullable
    pandas dtypes (``energy_facts``, the accounting's): :func:`read` restores those."""
    delta = _open(warehouse, table)
    if delta is None:
        return pd.DataFrame(columns=columns or [])
    frame = _dataset(warehouse, delta, listed).to_table(filter=where, columns=columns).to_pandas()
    for name in frame.columns:
        if pd.api.types.is_datetime64_any_dtype(frame[name].dtype):
            frame[name] = frame[name].dt.as_unit("ns")
    return frame


def keys_predicate(keys: pd.DataFrame) -> str:
    """The SQL predicate that selects the rows whose values of ``keys``'s columns equal one
    of its rows: per distinct value of every column but the last, the last column's values
    ``IN`` a list (:func:`predicate`), those joined by ``OR`` (one column: the ``IN``
    alone). A key of several columns (a GPU setting: data root, experiment, benchmark,
    run) thus costs one term per group, not one per key."""
    if keys.empty or not len(keys.columns):
        raise ValueError(f"keys of {list(keys.columns)}: at least one row and one column")
    if not fits_one_predicate(keys):
        raise ValueError(f"keys of {list(keys.columns)}: {len(keys)} keys make a predicate "
                         f"over IN_MAX or OR_MAX (replace_keys writes them in parts)")
    *scope, last = keys.columns
    if not scope:
        values = sorted(set(keys[last]))
        if any(pd.isna(value) for value in values):
            raise ValueError(f"keys of {last} must not be null: {values}")
        return f"{_name(last)} IN ({', '.join(map(_literal, values))})"
    terms = [predicate(dict(zip(scope, group if isinstance(group, tuple) else (group,))),
                       last, rows[last])
             for group, rows in keys.drop_duplicates().groupby(scope, sort=True)]
    return " OR ".join(f"({term})" for term in terms)


def replace_keys(warehouse: Warehouse, table: str, rows: pd.DataFrame,
                 keys: pd.DataFrame | None, target_file_bytes: int | None = None,
                 since: int | None = None) -> None:
    """Make the rows of ``keys`` (a frame of key columns, each row one key: see
    :func:`keys_predicate`) be ``rows``, in one commit (one per part of keys whose predicate
    stays within ``IN_LIMIT`` and ``OR_LIMIT``, each atomic); a key without rows loses its
    stored ones. ``keys`` None replaces every row of the table (a rebuild from scratch).
    Each row of ``rows`` must have its key among ``keys`` (delta-rs refuses the write
    otherwise). The table is made on its first write, with ``rows``'s schema; nothing is
    written where there are no rows and no table. ``target_file_bytes``: the size of the
    data files written (delta-rs's default otherwise), so that rows written in order make
    files of ranges, which a later write of some keys rewrites alone. ``since``: the
    version ``rows`` were worked out from; the first commit is refused
    (``CommitFailedError``) if another came after it (:func:`_overwrite`)."""

    if keys is None:
        _overwrite(warehouse, table, rows, {}, None, target_file_bytes, since)
        return
    for index, (part_rows, where) in enumerate(predicate_parts(table, rows, keys)):
        _overwrite(warehouse, table, part_rows, {}, where, target_file_bytes,
                   since if index == 0 else None)


def predicate_parts(table: str, rows: pd.DataFrame, keys: pd.DataFrame
                    ) -> Iterator[tuple[pd.DataFrame, str]]:
    """:func:`row_parts`, each part's rows with its predicate (:func:`keys_predicate`)."""
    for part, part_rows in row_parts(table, rows, keys):
        yield part_rows, keys_predicate(part)


def row_parts(table: str, rows: pd.DataFrame, keys: pd.DataFrame
              ) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """``rows`` (each with its key among ``keys``: see :func:`keys_predicate`) in the parts
    of ``keys`` whose predicates stay within ``IN_LIMIT`` and ``OR_LIMIT``
    (:func:`key_parts`): per part, its keys and its rows (none for no keys; one part, all
    rows, when they fit). Keys are compared as the predicate compares them, each value as
    ``str`` gives it (a pandas column's ``astype`` would print midnight timestamps as
    dates), each row's part found once. Rows whose key is among none of the parts are
    refused (``table`` names them), as one write's delta-rs refuses them."""
    if keys.empty:
        return
    parts = list(key_parts(keys.drop_duplicates()))
    if len(parts) == 1:
        yield parts[0], rows
        return
    columns = list(keys.columns)
    keyed = pd.concat(parts, keys=range(len(parts))).reset_index(level=0, names="part")
    keyed = pd.DataFrame({"part": keyed["part"], **{name: keyed[name].map(str)
                                                     for name in columns}})
    keyed = keyed.drop_duplicates(columns)
    found = pd.MultiIndex.from_frame(keyed[columns]).get_indexer(
        pd.MultiIndex.from_arrays([rows[name].map(str) for name in columns]))
    if (found < 0).any():
        raise ValueError(f"{table}: rows whose key is not among the keys written "
                         "(or not told apart from them as text)")
    number = keyed["part"].to_numpy()[found]
    for index, part in enumerate(parts):
        yield part, rows[number == index]


def fits_one_predicate(keys: pd.DataFrame) -> bool:
    """Whether :func:`keys_predicate` of ``keys`` (distinct or not) stays within ``IN_MAX``
    and ``OR_MAX`` (it refuses ``keys`` otherwise)."""
    return _within_limits(keys.drop_duplicates(), IN_MAX, OR_MAX)


def _within_limits(keys: pd.DataFrame, values: int | None = None,
                   terms: int | None = None) -> bool:
    """Whether :func:`keys_predicate` of ``keys`` names at most ``values`` (default
    ``IN_LIMIT``) values in one ``IN`` list and joins at most ``terms`` (``OR_LIMIT``)."""
    values, terms = values or IN_LIMIT, terms or OR_LIMIT
    *scope, last = keys.columns
    if not scope:
        return keys[last].nunique() <= values
    sizes = keys.drop_duplicates().groupby(scope, sort=False).size()
    return len(sizes) <= terms and sizes.max() <= values


def key_parts(keys: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """``keys`` (distinct) in parts whose predicates stay within ``IN_LIMIT`` and
    ``OR_LIMIT`` (:func:`_within_limits`); one part when they fit. Each group of the
    leading columns is cut into pieces of at most ``IN_LIMIT`` keys; a part takes pieces
    of at most ``OR_LIMIT`` groups, no two of one group."""
    if _within_limits(keys):
        yield keys
        return
    *scope, _ = keys.columns
    ordered = keys.sort_values(list(keys.columns), ignore_index=True)
    groups = ordered.groupby(scope, sort=True) if scope else [((), ordered)]
    part: list[pd.DataFrame] = []
    for _, group in groups:
        for start in range(0, len(group), IN_LIMIT):
            if part and (start > 0 or len(part) == OR_LIMIT):
                yield pd.concat(part, ignore_index=True)
                part = []
            part.append(group.iloc[start:start + IN_LIMIT])
    if part:
        yield pd.concat(part, ignore_index=True)


def read_keys(warehouse: Warehouse, table: str, keys: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``keys`` (:func:`keys_predicate`; an empty frame without columns where
    none is stored): one :func:`read` per group of the keys' leading columns, each reading
    the files whose statistics may hold it; keys of one column are read by
    :func:`read_files` (a table without nullable pandas dtypes)."""
    *scope, last = keys.columns
    if not scope:  # the files and row groups whose statistics may hold them (read_files)
        return read_files(warehouse, table, files(warehouse, table),
                          ds.field(last).isin(sorted(set(keys[last]))))
    parts = []
    for group, wanted in keys.drop_duplicates().groupby(scope, sort=True):
        within = dict(zip(scope, group if isinstance(group, tuple) else (group,)))
        rows = read(warehouse, table, within)
        if len(rows):
            parts.append(rows[rows[last].isin(set(wanted[last]))])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
