"""What changed in the tables a derived table is computed from, since it was last computed.

Shared by the tables kept incrementally (issue 28; docs/ARCHITECTURE.md, "The accounting
kept incrementally"): ``accounting/incremental.py`` (the accounting), ``accounting/kept.py``
(``trust_checks``, ``waste``/``waste_weekly``, ``fact_quality``) and
``powerapi/trial_days.py`` (``powerapi_trials``). Nothing is asked of the writers: each
derived table keeps, in a hidden state table written last, the files of every input it
consumed, and compares them with the files there now.

- *A table kept per entry* (Delta, ``entry_table``): its data files never change once
  written; a commit lists new ones and stops listing others (those it rewrote), which stay
  in storage ``entry_table.RETENTION_HOURS`` before ``compact`` may remove them. The rows
  of a key (e.g. a (source, entity)) now are its rows in the files consumed and still
  listed, plus those in the files *new* since; its rows then were the same first part plus
  those in the files *gone* since. So a key changed exactly where its rows in the gone files
  differ from its rows in the new ones (:func:`delta_changes`: both read, only those files,
  and compared by a digest per key); a compaction, which moves rows, changes none. A gone
  file no longer stored makes the caller recompute whole.
- *A table of plain partitions* (one Parquet file per Dagster partition, rewritten whole:
  ``gpu_repetition_energy``, the validated frames, ``cc_block_tables/*``): a partition
  changed where its file is new, gone, or of another size or modification time
  (:func:`partition_changes`; its rows are not read). Its folder is listed at every run.
- *A plain table of one file* (as written before being kept per entry): any change makes
  the caller recompute whole (the keys it no longer holds cannot be known).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow.fs as pafs

from joulehouse import entry_sync, entry_table
from joulehouse.warehouse import Warehouse, partition_key

DELTA, PLAIN, ABSENT = "delta", "plain", "absent"
#: The state table's columns: kind (digest, mode, file), input table, file name, value.
COLUMNS = ["kind", "table", "name", "value"]
#: The state table's partition of what a run stopped between commits left to rewrite.
PENDING = "pending"


@dataclass(frozen=True)
class Snapshot:
    """One input table's files now: ``mode`` (DELTA, PLAIN, ABSENT), and per file (its name
    in the table's folder) its version: '' for a Delta data file (never rewritten), size and
    modification time for a plain one."""

    table: str
    mode: str
    files: dict[str, str]
    infos: dict[str, pafs.FileInfo] = field(repr=False)

    @classmethod
    def of(cls, warehouse: Warehouse, table: str) -> Snapshot:
        base = warehouse.table_path(table) + "/"
        listed = None
        if entry_table.is_entry_table(warehouse, table):
            listed = entry_table.version_files(warehouse, table)
            if listed is not None:
                infos = {info.path.removeprefix(base): info for info in listed}
                return cls(table, DELTA, dict.fromkeys(infos, ""), infos)
            # a log without a version (a migration stopped before its commit): the plain
            # files, read as such (a read of the table reads them)
            listed = entry_table.files(warehouse, table)
        listed = warehouse.parquet_files(table) if listed is None else listed
        infos = {info.path.removeprefix(base): info for info in listed}
        versions = {name: f"{info.size}:{info.mtime_ns}" for name, info in infos.items()}
        return cls(table, PLAIN if infos else ABSENT, versions, infos)


@dataclass(frozen=True)
class State:
    """What a derived table was last computed from: a ``digest`` of its rules and settings,
    and per input table its mode and files (:class:`Snapshot`)."""

    digest: str
    modes: dict[str, str]
    files: dict[str, dict[str, str]]

    @classmethod
    def of(cls, digest: str, snapshots: list[Snapshot]) -> State:
        return cls(digest, {s.table: s.mode for s in snapshots},
                   {s.table: s.files for s in snapshots})

    def write(self, warehouse: Warehouse, table: str) -> None:
        """One partition (``inputs``), replaced atomically: written last by its step."""
        head = [("digest", "", "", self.digest),
                *(("mode", name, "", mode) for name, mode in sorted(self.modes.items()))]
        parts = [pd.DataFrame(head, columns=COLUMNS)]
        for name, files in sorted(self.files.items()):
            parts.append(pd.DataFrame({"kind": "file", "table": name,
                                       "name": np.asarray(list(files), dtype=object),
                                       "value": np.asarray(list(files.values()), dtype=object)},
                                      columns=COLUMNS))
        warehouse.write_partition(table, "inputs", pd.concat(parts, ignore_index=True))

    @classmethod
    def read(cls, warehouse: Warehouse, table: str) -> State | None:
        if not warehouse.has_partition(table, "inputs"):
            return None
        rows = warehouse.read_partitions(table, ["inputs"])
        kind = rows["kind"].to_numpy()
        digest = rows.loc[kind == "digest", "value"]
        modes = dict(zip(rows.loc[kind == "mode", "table"], rows.loc[kind == "mode", "value"],
                         strict=True))
        files: dict[str, dict[str, str]] = {name: {} for name in modes}
        for name, group in rows[kind == "file"].groupby("table", sort=False):
            files[name] = dict(zip(group["name"].tolist(), group["value"].tolist(), strict=True))
        return cls(str(digest.iloc[0]) if len(digest) else "", modes, files)


@dataclass(frozen=True)
class Pending:
    """What a run of a derived table's step is about to rewrite, written to its state
    table (partition ``pending``) before its first commit and removed after its state:
    ``whole`` (a whole recompute), or its ``keys`` (source, entity) and ``weeks`` (naive
    Mondays, ``waste_weekly``'s). A run stopped between commits leaves it; the next run
    recomputes those too (whole, or these keys and weeks with its own), since the inputs
    may have gone back meanwhile to the rows the state consumed, which then show no
    change though the table holds rows of the inputs in between."""

    whole: bool = False
    keys: frozenset = frozenset()
    weeks: tuple = ()

    def write(self, warehouse: Warehouse, table: str) -> None:
        rows = [("whole", "", "", "")] if self.whole else []
        rows += [("key", source, entity, "") for source, entity in sorted(self.keys)]
        rows += [("week", "", "", str(week)) for week in self.weeks]
        warehouse.write_partition(table, PENDING, pd.DataFrame(rows, columns=COLUMNS,
                                                               dtype=object))

    @classmethod
    def read(cls, warehouse: Warehouse, table: str) -> Pending:
        if not warehouse.has_partition(table, PENDING):
            return cls()
        rows = warehouse.read_partitions(table, [PENDING])
        kind = rows["kind"].to_numpy()
        return cls(bool((kind == "whole").any()),
                   frozenset(zip(rows.loc[kind == "key", "table"].astype(str),
                                 rows.loc[kind == "key", "name"].astype(str), strict=True)),
                   tuple(np.asarray(rows.loc[kind == "week", "value"].tolist(),
                                    dtype="datetime64[ns]")))

    @staticmethod
    def clear(warehouse: Warehouse, table: str) -> None:
        warehouse.remove_partition(table, PENDING)


def files_since(warehouse: Warehouse, snapshot: Snapshot, consumed: set[str] | frozenset[str]
                ) -> tuple[list[pafs.FileInfo], list[pafs.FileInfo]] | str:
    """A Delta table's data files new since ``consumed`` (files of a version read before)
    and those consumed that it no longer lists (still stored); or why that cannot be told
    (a gone file no longer stored)."""
    base = warehouse.table_path(snapshot.table)
    gone = warehouse.filesystem.get_file_info([f"{base}/{name}"
                                               for name in sorted(consumed - set(snapshot.files))])
    if any(info.type != pafs.FileType.File for info in gone):
        return f"a data file of {snapshot.table} last consumed is no longer stored"
    return [snapshot.infos[name] for name in sorted(set(snapshot.files) - consumed)], gone


@dataclass(frozen=True)
class Changed:
    """The keys (a frame of the key columns) whose rows differ, and their rows in the gone
    files (``before``) and in the new ones (``after``); ``read``: the rows read to find them
    (those of the new and the gone files)."""

    keys: pd.DataFrame
    before: pd.DataFrame
    after: pd.DataFrame
    read: int = 0


def _digests(rows: pd.DataFrame, key: list[str], columns: list[str]) -> pd.DataFrame:
    """Per key (joined as one string): row count and XOR of the rows' hashes (both sides
    read from the table's files, so of the same dtypes)."""
    return entry_sync.signatures(rows.assign(_key=_joined(rows, key)), columns, "_key")


def _joined(rows: pd.DataFrame, key: list[str]) -> np.ndarray:
    if rows.empty:
        return np.asarray([], dtype=object)
    joined = rows[key[0]].astype(str)
    for name in key[1:]:
        joined = joined + "\0" + rows[name].astype(str)
    return joined.to_numpy(object)


def delta_changes(warehouse: Warehouse, snapshot: Snapshot, consumed: set[str] | frozenset[str],
                  key: list[str], columns: list[str] | None = None) -> Changed | str:
    """The keys of a Delta table whose rows (``key`` + ``columns``; None: every column)
    changed since the files ``consumed`` (see the module): only the new and the gone files
    are read; or why that cannot be told."""
    found = files_since(warehouse, snapshot, consumed)
    if isinstance(found, str):
        return found
    new, gone = found
    read = None
    if columns is not None:  # those the table has (a table written by tests may lack some)
        held = set(entry_table.read_files(warehouse, snapshot.table, []).columns)
        read = [name for name in dict.fromkeys([*key, *columns]) if name in held] or None
    after = entry_table.read_files(warehouse, snapshot.table, new, columns=read) if new else None
    before = entry_table.read_files(warehouse, snapshot.table, gone, columns=read) if gone else None
    if after is None and before is None:
        return Changed(pd.DataFrame(columns=key), pd.DataFrame(columns=read or key),
                       pd.DataFrame(columns=read or key))
    template = after if after is not None else before
    after = template.iloc[:0] if after is None else after
    before = template.iloc[:0] if before is None else before
    compared, count = list(template.columns), len(after) + len(before)
    new_digests, old_digests = _digests(after, key, compared), _digests(before, key, compared)
    both = new_digests.index.intersection(old_digests.index)
    differ = ((new_digests.loc[both, "rows"].to_numpy() != old_digests.loc[both, "rows"].to_numpy())
              | (new_digests.loc[both, "digest"].to_numpy()
                 != old_digests.loc[both, "digest"].to_numpy()))
    changed = set(new_digests.index.symmetric_difference(old_digests.index)) | set(both[differ])
    after = after[pd.Index(_joined(after, key)).isin(changed)].reset_index(drop=True)
    before = before[pd.Index(_joined(before, key)).isin(changed)].reset_index(drop=True)
    keys = pd.concat([before[key], after[key]], ignore_index=True).astype(str).drop_duplicates(
        ignore_index=True)
    return Changed(keys, before, after, count)


def partition_changes(snapshot: Snapshot, consumed: dict[str, str]) -> list[str]:
    """The partition keys of a plain table whose file is new, gone or rewritten since the
    ``consumed`` versions (the unpartitioned file's, if any, named like a partition)."""
    names = {name for name in {*snapshot.files, *consumed}
             if snapshot.files.get(name) != consumed.get(name)}
    return sorted(partition_key(name.rsplit("/", 1)[-1]) for name in names)
