"""A derived table kept per entry by its writer: a run writes what it landed, not the table.

Generalises what ``joulehouse/facts_entries.py`` does for ``energy_facts`` to any table
kept per entry (``joulehouse/entry_table.py``; issue 28): a :class:`Kept` names the table,
the column naming its entries and the scope the writer keeps (``{"source": ...}`` for
``energy_facts``; none for a table one source keeps whole, as ``cc_jobs`` or
``geopm_region_energy``). Two ways to write, one commit each (per
``entry_table.IN_LIMIT`` entries):

- :func:`replace_owned`: the rows of the entries of the *owners* a run covered (Dagster
  partition keys; :class:`Ownership` maps an entry to its owner), and those owners'
  stored entries they no longer give removed. Costs what the owners hold.
- :func:`sync`: every row the writer gives now compared with the stored rows (a row count
  and a digest per entry); only the entries that differ are written and those no longer
  given removed. Costs the stored rows in reading, the changed entries in writing.

:func:`retried` tries a write again, from the stored state, when a racing commit made
delta-rs refuse its own; :func:`compact_if_due` (:func:`compact_each`) merges a table's
files once they are many.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import numpy as np
import pandas as pd

from joulehouse import entry_table
from joulehouse.warehouse import Warehouse

#: Times a write is tried while delta-rs refuses its commit because another writer's came
#: first (``CommitFailedError``): a Dagster step that fails so is not retried.
COMMIT_TRIES = 3
#: Changed entries above which :func:`sync` replaces the rows within the scope whole (a
#: predicate on the scope alone; none for a table kept whole by one writer) rather than
#: naming each in the write's ``IN`` list.
WHOLE_ABOVE = 10_000
#: The longest wait before a refused write is tried again (seconds): the waits double from
#: a tenth of this, each drawn at random up to its bound, so that writers refused by each
#: other do not race again at once.
RETRY_WAIT_S = 2.0
#: Small data files (under ``entry_table.TARGET_FILE_BYTES``) above which
#: :func:`compact_if_due` merges them (each write adds one or two).
COMPACT_ABOVE = 64

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Ownership:
    """How a table's entries belong to their owners (Dagster partition keys): every entry
    of owner ``o`` starts with ``prefix(o)`` (so that stored ones are found by the files'
    statistics), and ``owner_of(entry)`` is ``o``."""

    prefix: Callable[[str], str]
    owner_of: Callable[[str], str]


@dataclass(frozen=True)
class Written:
    """What one write did: entries whose rows were written (replaced or new), entries
    removed, rows written, and whether the scope's rows were replaced whole."""

    entities: int
    removed: int
    rows: int
    whole: bool = False


@dataclass(frozen=True)
class Kept:
    """A table kept per entry as one writer keeps it: ``table``'s rows within ``scope``
    (column -> value; empty: the whole table is the writer's), named by their ``entry``
    column (string values), with ``columns`` in this order."""

    table: str
    columns: list[str]
    entry: str = "entity"
    scope: Mapping[str, str] = field(default_factory=dict)

    def write(self, warehouse: Warehouse, rows: pd.DataFrame, removed: Collection[str],
              since: int | None = None) -> None:
        """Replace the rows of ``rows``'s entries and remove those of ``removed``, in one
        commit (nothing when both are empty). ``since`` (no scope only): the version
        ``rows`` were worked out from, the commit refused if another came after it
        (``entry_table.replace_keys``)."""
        if self.scope:
            if since is not None:
                raise ValueError(f"{self.table}: a write within a scope is not pinned")
            warehouse.write_entries(self.table, rows, self.scope, self.entry, removed=removed)
        else:
            entry_table.write_keyed(warehouse, self.table, rows, self.entry, removed=removed,
                                    since=since)

    def ready(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` as the table keeps them: :attr:`columns` in order, a fresh index, times
        rounded to the microsecond (``entry_table.to_microseconds``); no row: no column
        but these."""
        if rows.empty and list(rows.columns) != self.columns:
            return pd.DataFrame(columns=self.columns)
        return entry_table.to_microseconds(rows[self.columns].reset_index(drop=True))

    def stored(self, warehouse: Warehouse) -> pd.DataFrame:
        """Every stored row within the scope (:meth:`ready`); a table stored the old way
        (plain files) gives their rows."""
        return self.ready(entry_table.read(warehouse, self.table, self.scope or None))

    def count(self, warehouse: Warehouse) -> int:
        """The rows within the scope, from the log's statistics (``entry_table.count``)."""
        return entry_table.count(warehouse, self.table, self.scope)


def retried(tries: Callable[[], int] = lambda: COMMIT_TRIES
            ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: the write tried up to ``tries()`` times while a racing commit refuses
    its own, after a random wait that doubles (:data:`RETRY_WAIT_S`); each try reads the
    stored state anew; the last try's refusal is raised."""

    def decorate(write: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(write)
        def again(*args: P.args, **kwargs: P.kwargs) -> R:
            from deltalake.exceptions import CommitFailedError

            for attempt in range(tries() - 1):
                try:
                    return write(*args, **kwargs)
                except CommitFailedError:
                    time.sleep(random.uniform(0, RETRY_WAIT_S * min(1.0, 0.1 * 2**attempt)))
            return write(*args, **kwargs)

        return again

    return decorate


def replace_owned(warehouse: Warehouse, kept: Kept, rows: pd.DataFrame,
                  owners: Collection[str], ownership: Ownership) -> Written:
    """Make the rows of ``owners``' entries be ``rows`` (every row those owners give now,
    in :attr:`Kept.columns`; an owner with none loses its stored rows), in one commit
    (one per ``entry_table.IN_LIMIT`` entries). Rows of an entry no given owner owns are
    refused (:func:`refuse_unowned`)."""
    owners = set(owners)
    given = set(rows[kept.entry])
    refuse_unowned(kept, rows, owners, ownership)
    stored = entry_table.stored_entries(warehouse, kept.table, kept.scope,
                                        map(ownership.prefix, owners), kept.entry)
    removed = sorted(entry for entry in stored - given if ownership.owner_of(entry) in owners)
    kept.write(warehouse, rows, removed)
    return Written(entities=len(given), removed=len(removed), rows=len(rows))


def refuse_unowned(kept: Kept, rows: pd.DataFrame, owners: Collection[str],
                   ownership: Ownership) -> None:
    """Raise ``ValueError`` (naming up to five) if ``rows`` hold an entry none of ``owners``
    owns: what :func:`replace_owned` refuses, for a caller to check before its first write."""
    owners = set(owners)
    strays = sorted(entry for entry in set(rows[kept.entry])
                    if ownership.owner_of(entry) not in owners)
    if strays:
        raise ValueError(f"{kept.table}: rows of entries no owner given owns: {strays[:5]}")


def signatures(rows: pd.DataFrame, columns: list[str], entry: str) -> pd.DataFrame:
    """Per entry of ``rows`` (unique rows, the table's dtypes): its row count and the XOR
    of its rows' hashes over ``columns``, equal for equal sets of rows in any order."""
    if rows.empty:
        return pd.DataFrame({"rows": pd.Series(dtype="int64"),
                             "digest": pd.Series(dtype="uint64")})
    hashes = pd.util.hash_pandas_object(rows[columns], index=False).to_numpy()
    entries = rows[entry].to_numpy()
    order = np.argsort(entries, kind="stable")
    names, starts = np.unique(entries[order], return_index=True)
    counts = np.diff(np.append(starts, len(order)))
    return pd.DataFrame({"rows": counts, "digest": np.bitwise_xor.reduceat(hashes[order], starts)},
                        index=pd.Index(names, name=entry))


def sync(warehouse: Warehouse, kept: Kept, rows: pd.DataFrame, stored: pd.DataFrame,
         whole_above: int | None = None) -> Written:
    """Make the rows within ``kept``'s scope be ``rows`` (every row the writer gives now),
    given the ``stored`` ones (both in :attr:`Kept.columns` and the table's dtypes): one
    commit writes only the entries whose rows differ and removes those no longer given;
    nothing when none differs. Over ``whole_above`` (default :data:`WHOLE_ABOVE`) changed
    entries the rows within the scope (an unscoped table's: all) are replaced whole."""
    new = signatures(rows, kept.columns, kept.entry)
    old = signatures(stored, kept.columns, kept.entry)
    common = new.index.intersection(old.index)
    differ = ((new.loc[common, "rows"].to_numpy() != old.loc[common, "rows"].to_numpy())
              | (new.loc[common, "digest"].to_numpy() != old.loc[common, "digest"].to_numpy()))
    changed = {*new.index.difference(old.index), *common[differ]}
    removed = sorted(set(old.index) - set(new.index))
    if len(changed) + len(removed) > (WHOLE_ABOVE if whole_above is None else whole_above):
        if kept.scope:
            entry_table.replace_scope(warehouse, kept.table, rows, kept.scope)
        else:
            entry_table.replace_keys(warehouse, kept.table, rows, None)
        return Written(entities=len(new), removed=len(removed), rows=len(rows), whole=True)
    written = rows[rows[kept.entry].isin(changed)]
    kept.write(warehouse, written, removed)
    return Written(entities=len(changed), removed=len(removed), rows=len(written))


def compact_if_due(warehouse: Warehouse, table: str, above: int | None = None
                   ) -> dict[str, int] | None:
    """Compact ``table`` (``entry_table.compact``) when its current version has over
    ``above`` (default :data:`COMPACT_ABOVE`) data files under the compaction's target size;
    its figures, or None when not due. Files at the target size are not counted, which a
    compaction would leave. For a table one step at a time writes."""
    if entry_table.small_files(warehouse, table) <= (COMPACT_ABOVE if above is None else above):
        return None
    return entry_table.compact(warehouse, table)


def compact_each(warehouse: Warehouse, kept: Iterable[Kept]) -> dict[str, dict[str, int]]:
    """:func:`compact_if_due` of each table of ``kept``: what a read or a write's predicate
    of it lists stays bounded; the figures of those compacted, by table."""
    done = {one.table: compact_if_due(warehouse, one.table) for one in kept}
    return {table: figures for table, figures in done.items() if figures is not None}
