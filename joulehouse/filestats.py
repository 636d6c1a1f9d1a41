"""The data files of a Delta table that may hold some rows, from the log's statistics alone.

pyarrow prunes a read by the statistics in each Parquet file's footer, so it opens every
file listed: a cost that grows with the table. The Delta log holds each file's minimum
and maximum per column (``entry_table.file_stats``; a string's maximum truncated upwards,
its minimum downwards, so both stay bounds): :func:`holding` lists only the files whose
ranges may hold the values asked for, for the read to open those alone;
:func:`holding_ranges` those that may hold a row inside some ranges of one column. Used by
the accounting and by ClusterCockpit's tables, whatever the table.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.fs as pafs

from joulehouse import entry_table
from joulehouse.warehouse import Warehouse


def holding(warehouse: Warehouse, table: str, values: Mapping[str, Sequence]
            ) -> list[pafs.FileInfo]:
    """The data files of ``table``'s current version that may hold a row whose value of
    each column of ``values`` is one of those given (each column judged alone: a superset
    of the files holding such rows); a file without statistics of a column is kept."""
    stats = entry_table.file_stats(warehouse, table)
    return _listed(warehouse, table, stats, may_hold(stats, values))


def in_ranges(column: str, ranges: Sequence[tuple[object, object]]) -> pc.Expression:
    """A dataset filter: ``column`` within one of ``ranges`` (``[low, high)`` each, at least
    one), the rows of the files :func:`holding_ranges` lists."""
    return functools.reduce(operator.or_, [(pc.field(column) >= low) & (pc.field(column) < high)
                                           for low, high in ranges])


def holding_ranges(warehouse: Warehouse, table: str, column: str,
                   ranges: Sequence[tuple[object, object]]) -> list[pafs.FileInfo]:
    """The data files of ``table``'s current version whose statistics of ``column`` may hold
    a value within one of ``ranges`` (``[low, high)`` each); a file without them is kept."""
    stats = entry_table.file_stats(warehouse, table)
    low, high = stats.get(f"min.{column}"), stats.get(f"max.{column}")
    if low is None or high is None:
        return _listed(warehouse, table, stats, np.ones(len(stats), bool))
    keep = (low.isna() | high.isna()).to_numpy()
    for start, end in ranges:
        keep |= ((high >= start) & (low < end)).to_numpy(bool)
    return _listed(warehouse, table, stats, keep)


def _listed(warehouse: Warehouse, table: str, stats: pd.DataFrame, keep: np.ndarray
            ) -> list[pafs.FileInfo]:
    """The files of ``stats`` (``entry_table.file_stats``) that ``keep`` marks, sorted."""
    base = warehouse.table_path(table)
    return sorted((pafs.FileInfo(f"{base}/{path}", pafs.FileType.File, size=size)
                   for path, size in zip(stats.loc[keep, "path"], stats.loc[keep, "size_bytes"],
                                         strict=True)), key=lambda info: info.path)


def may_hold(stats: pd.DataFrame, values: Mapping[str, Sequence]) -> np.ndarray:
    """Per file of ``stats`` (``entry_table.file_stats``), whether it may hold a row whose
    value of each column of ``values`` is one of those given (see :func:`holding`)."""
    keep = np.ones(len(stats), bool)
    for column, given in values.items():
        low, high = stats.get(f"min.{column}"), stats.get(f"max.{column}")
        if low is None or high is None:
            continue
        given = np.sort(np.asarray(list(given), dtype=low.dtype if low.dtype != object
                                   else object))
        known = low.notna().to_numpy() & high.notna().to_numpy()
        low_known, high_known = low[known].to_numpy(), high[known].to_numpy()
        at = np.searchsorted(given, low_known, side="left")
        inside = at < len(given)
        inside[inside] = given[at[inside]] <= high_known[inside]
        keep[np.flatnonzero(known)[~inside]] = False
    return keep
