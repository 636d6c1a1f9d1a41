"""Several tables' partitions of one key stored all or nothing, by writers at once.

:meth:`~joulehouse.warehouse.Warehouse.write_partition` replaces one file
atomically; a unit of work that stores one partition in each of several tables
(a ClusterCockpit block's four frames) needs them replaced together, or a
crash between two writes leaves one table new and another old. Each write has
its own id (the writer's pid and a random part) and, while it runs, holds an
exclusive ``flock`` on its lock file ``<journal>/_<id>.lock`` (the kernel
releases it when the process ends, however it ends). So:

1. :func:`stage`: every frame is written as partition ``key`` of the write's own
   staging folder ``<table>/_staged/<id>`` (hidden: not a partition of the table;
   two writers never share staged files);
2. then the journal, partition ``<id>`` of the table ``journal`` (the key and the
   tables), is written: the commit point (a crash before it leaves the stored
   partitions as they were);
3. finish: under an exclusive lock per key (``<journal>/_keys``; two writes of
   one key are moved one after the other, never interleaved), each staged file is renamed
   over its table's partition (``os.replace``), then the journal, the staging
   folders and the lock file are removed. A crash in between leaves the
   journal, and :func:`finish_pending`, called before the tables are read
   again, completes the renames of every journal whose lock is free (its
   writer gone); a write in progress is left to its writer.

Staged files of a write that crashed before its commit point are never read;
they stay in their hidden folder.

On an object store (:attr:`Warehouse.is_local` false) there is no rename and
no ``flock``: each staged object is copied over its partition (a copy is
atomic per object) and then deleted, and no lock is taken. Finishing a
committed write is idempotent (a staged object moved already is skipped), so
:func:`finish_pending` may finish any journal it finds; writes of one key at
once must then be kept apart by the caller, as the Dagster steps that write
partition groups do (each holds its source's pool ``joulehouse_tables_<source>``, limit
1; a source's keys are its own).
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from joulehouse.warehouse import Warehouse, partition_file_name

STAGED = "_staged"
KEY_LOCKS = "_keys"


def _lock_path(tables: Warehouse, journal: str, name: str) -> Path | None:
    """The lock file ``<journal>/<name>``, its folder made; None on an object store."""
    if not tables.is_local:
        return None
    path = tables.table_dir(journal) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _write_lock(tables: Warehouse, journal: str, write_id: str) -> Path | None:
    return _lock_path(tables, journal, f"_{quote(write_id, safe='')}.lock")


@contextmanager
def _locked(path: Path | None, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) while inside; yields
    False, holding nothing, when ``wait`` is off and another holder has it. ``path`` None
    (an object store) locks nothing: yields True."""
    if path is None:
        yield True
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def _write(tables: Warehouse, journal: str) -> Iterator[str]:
    """A new write's id, its lock held while inside."""
    write_id = f"{os.getpid()}-{uuid.uuid4().hex}"
    with _locked(_write_lock(tables, journal, write_id)):
        yield write_id


def _stage(tables: Warehouse, journal: str, write_id: str, key: str,
           frames: Mapping[str, pd.DataFrame]) -> None:
    for table, frame in frames.items():
        tables.write_partition(f"{table}/{STAGED}/{write_id}", key, frame)
    tables.write_partition(journal, write_id,
                           pd.DataFrame({"key": key, "table": list(frames)}))


def _finish(tables: Warehouse, journal: str, write_id: str) -> str | None:
    """Move write ``write_id``'s staged files into place, then remove its journal, staging
    folders and lock file (a staged file an interrupted finish moved already is skipped);
    its key, or None when its journal is gone (another process finished it)."""
    if not tables.has_partition(journal, write_id):
        return None
    entries = tables.read_partitions(journal, [write_id])
    # A journal written before writes had ids is named by its key, its files in _staged.
    key, folder = ((entries["key"].iloc[0], f"{STAGED}/{write_id}") if "key" in entries
                   else (write_id, STAGED))
    key_lock = _lock_path(tables, journal, f"{KEY_LOCKS}/{partition_file_name(key)}.lock")
    with _locked(key_lock):  # kept: one small file per key
        for table in entries["table"]:
            tables.move_partition(f"{table}/{folder}", table, key)
        tables.remove_partition(journal, write_id)
    for table in entries["table"] if folder != STAGED else ():
        tables.remove_empty_folder(f"{table}/{folder}")
    if (lock := _write_lock(tables, journal, write_id)) is not None:
        lock.unlink(missing_ok=True)
    return key


def stage(tables: Warehouse, journal: str, key: str, frames: Mapping[str, pd.DataFrame]) -> str:
    """Write ``frames`` (table -> frame) as partition ``key`` of a new write's staging
    folders, then the journal that commits them, and stop there, as a crash would (see
    the module docstring; :func:`finish_pending` completes it); the write's id."""
    with _write(tables, journal) as write_id:
        _stage(tables, journal, write_id, key, frames)
    return write_id


def write_together(tables: Warehouse, journal: str, key: str,
                   frames: Mapping[str, pd.DataFrame]) -> None:
    """Store ``frames`` (table -> frame) as partition ``key`` of each table, all or nothing;
    safe with other writers of the same tables (and key) at once."""
    with _write(tables, journal) as write_id:
        _stage(tables, journal, write_id, key, frames)
        _finish(tables, journal, write_id)


def finish_pending(tables: Warehouse, journal: str) -> list[str]:
    """Complete every write of ``journal`` a crash interrupted after its commit point (its
    writer gone: its lock free); writes in progress are left alone. The keys completed."""
    keys = []
    for write_id in tables.partition_keys(journal):
        lock = _write_lock(tables, journal, write_id)
        with _locked(lock, wait=False) as mine:
            key = _finish(tables, journal, write_id) if mine else None
            if mine and lock is not None:  # made by this call where the write had finished
                lock.unlink(missing_ok=True)
        if key is not None:
            keys.append(key)
    return keys
