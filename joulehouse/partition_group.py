"""Several tables' partitions of one key stored all or nothing.

:meth:`~joulehouse.warehouse.Warehouse.write_partition` replaces one file
atomically; a unit of work that stores one partition in each of several tables
(a ClusterCockpit block's four frames) needs them replaced together, or a
crash between two writes leaves one table new and another old. So:

1. :func:`stage`: every frame is written as the same partition of its table's
   hidden ``_staged`` folder (not listed or read as a partition of the table);
2. then a journal, the partition ``key`` of the table ``journal`` listing the
   tables, is written: the commit point (a crash before it leaves the stored
   partitions as they were; the staged files are overwritten by the next try);
3. :func:`finish`: each staged file is renamed over its table's partition
   (``os.replace``), then the journal is removed. A crash in between leaves
   the journal, and :func:`finish_pending`, called before the tables are read
   again, completes the renames: every table ends new.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pandas as pd

from joulehouse.warehouse import Warehouse, partition_file_name

STAGED = "_staged"


def stage(tables: Warehouse, journal: str, key: str, frames: Mapping[str, pd.DataFrame]) -> None:
    """Write ``frames`` (table -> frame) as partition ``key`` of their tables' staging
    folders, then the journal that commits them (see the module docstring)."""
    for table, frame in frames.items():
        tables.write_partition(f"{table}/{STAGED}", key, frame)
    tables.write_partition(journal, key, pd.DataFrame({"table": list(frames)}))


def finish(tables: Warehouse, journal: str, key: str) -> None:
    """Move the staged partitions ``key`` of the tables its journal lists into place, then
    remove the journal (a staged file already moved by an interrupted finish is skipped)."""
    name = partition_file_name(key)
    for table in tables.read_partitions(journal, [key])["table"]:
        staged = tables.table_dir(f"{table}/{STAGED}") / name
        if staged.is_file():
            os.replace(staged, tables.table_dir(table) / name)
    (tables.table_dir(journal) / name).unlink()


def write_together(tables: Warehouse, journal: str, key: str,
                   frames: Mapping[str, pd.DataFrame]) -> None:
    """Store ``frames`` (table -> frame) as partition ``key`` of each table, all or nothing."""
    stage(tables, journal, key, frames)
    finish(tables, journal, key)


def finish_pending(tables: Warehouse, journal: str) -> list[str]:
    """Complete every write of ``journal`` a crash interrupted after its commit point; the
    keys completed."""
    keys = tables.partition_keys(journal)
    for key in keys:
        finish(tables, journal, key)
    return keys
