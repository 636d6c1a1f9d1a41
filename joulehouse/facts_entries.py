"""``energy_facts`` kept per entry: a source writes the rows of what it landed, not all of them.

The table is kept per entry (``joulehouse/entry_table.py``, Delta Lake; docs/ARCHITECTURE.md,
"Tables that hold a decade"): each write replaces the rows of some of one source's
entities (``entity``, within ``source``) in one commit, whatever the table holds (issue
28). A source writes them one of two ways:

- :func:`replace_owned`: the rows of the *owners* a run covered, and only those. An
  owner is what a source lands as one Dagster partition (a GPU repetition, a
  ClusterCockpit job-id block); it owns the entities :class:`Ownership` maps to it. Its
  stored entities that it no longer gives are removed in the same commit (a job folder
  deleted from a re-read block, a repetition that now gives no fact). Costs what the
  owners hold: the stored entities are looked up by their prefix, in the files whose
  statistics may hold them.
- :func:`sync`: every row the source gives now, compared with the source's stored rows:
  only the entities whose rows differ are written, and those stored but no longer given
  are removed (an owner deleted from Dagster). Costs the source's size in reading, the
  changed entities in writing: for a source whose facts depend on each other (GEOPM's
  reports given twice count once, PowerAPI's windows straddle files), and for a rebuild
  from scratch.

Either write is tried again, from the stored state, when a racing commit made delta-rs
refuse its own (:data:`COMMIT_TRIES`).

After a write, :func:`compact_if_due` merges the table's files once they are many.

Either way the table afterwards holds what a rebuild from scratch would write, with every
time rounded to the microsecond (Delta's unit, :func:`entry_table.to_microseconds`: a window
end computed from a duration in float seconds moves by less than a microsecond).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import ParamSpec

import numpy as np
import pandas as pd

from joulehouse import entry_table
from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.warehouse import Warehouse

TABLE = "energy_facts"
#: Small data files (under ``entry_table.TARGET_FILE_BYTES``, which a compaction merges)
#: in the table's current version above which :func:`compact_if_due` merges them (each
#: write adds one or two): the files a reader lists and a write's predicate scans stay
#: few, at the cost of rewriting the small files every ~60 writes. Files at the target
#: size are not counted, which a compaction would leave as they are.
COMPACT_ABOVE = 64
#: Changed entities above which :func:`sync` replaces the source's rows whole (a predicate
#: on ``source`` alone) rather than naming each in the write's ``IN`` list.
WHOLE_ABOVE = 10_000
#: Times a write is tried while delta-rs refuses its commit because another writer's
#: committed first (``CommitFailedError``: a concurrent transaction): a Dagster step
#: that fails so is not retried by ``run_retries``, and its entries' facts would stay
#: missing until the next run.
COMMIT_TRIES = 3

P = ParamSpec("P")


@dataclass(frozen=True)
class Ownership:
    """How a source's entities belong to its owners (Dagster partition keys): every entity
    of owner ``o`` starts with ``prefix(o)`` (so that stored ones are found by the files'
    statistics), and ``owner_of(entity)`` is ``o``."""

    prefix: Callable[[str], str]
    owner_of: Callable[[str], str]


@dataclass(frozen=True)
class Written:
    """What one write did: entities whose rows were written (replaced or new), entities
    removed, rows written, and whether the source's rows were replaced whole."""

    entities: int
    removed: int
    rows: int
    whole: bool = False


def _ready(source: str, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` in the table's column order and dtypes, times to the microsecond; rows of
    another source are refused."""
    if rows.empty:
        rows = pd.DataFrame({name: pd.Series(dtype=ENERGY_FACTS_SCHEMA.columns[name].dtype.type)
                             for name in ENERGY_FACTS_COLUMNS})
    rows = rows[ENERGY_FACTS_COLUMNS].reset_index(drop=True)
    if (rows["source"] != source).any():
        raise ValueError(f"{TABLE}: rows of {sorted(set(rows['source']) - {source})} "
                         f"given as {source}'s")
    return entry_table.to_microseconds(rows)


def _retried(write: Callable[P, Written]) -> Callable[P, Written]:
    """``write`` tried up to ``COMMIT_TRIES`` times while a racing commit refuses its own;
    each try reads the stored state anew (the racing commit's version included) and
    computes its commit from it; the last try's refusal is raised."""

    @functools.wraps(write)
    def retried(*args: P.args, **kwargs: P.kwargs) -> Written:
        from deltalake.exceptions import CommitFailedError

        for _ in range(COMMIT_TRIES - 1):
            try:
                return write(*args, **kwargs)
            except CommitFailedError:
                continue
        return write(*args, **kwargs)

    return retried


@_retried
def replace_owned(warehouse: Warehouse, source: str, rows: pd.DataFrame,
                  owners: Collection[str], ownership: Ownership) -> Written:
    """Make ``source``'s rows of the entities of ``owners`` be ``rows`` (every fact those
    owners give now; an owner with none loses its stored rows), in one commit (tried
    again from the stored state when a racing commit refuses it: :func:`_retried`)."""
    owners = set(owners)
    rows = _ready(source, rows)
    given = set(rows["entity"])
    strays = sorted(entity for entity in given if ownership.owner_of(entity) not in owners)
    if strays:
        raise ValueError(f"{TABLE}: {source} rows of entities no owner given owns: {strays[:5]}")
    stored = entry_table.stored_entries(warehouse, TABLE, {"source": source},
                                        map(ownership.prefix, owners))
    removed = sorted(entity for entity in stored - given
                     if ownership.owner_of(entity) in owners)
    warehouse.write_entries(TABLE, rows, {"source": source}, removed=removed)
    return Written(entities=len(given), removed=len(removed), rows=len(rows))


def _signatures(rows: pd.DataFrame) -> pd.DataFrame:
    """Per entity of ``rows`` (unique rows, the table's dtypes): its row count and the XOR
    of its rows' hashes, equal for equal sets of rows in any order."""
    if rows.empty:
        return pd.DataFrame({"rows": pd.Series(dtype="int64"),
                             "digest": pd.Series(dtype="uint64")})
    hashes = pd.util.hash_pandas_object(rows[ENERGY_FACTS_COLUMNS], index=False).to_numpy()
    entities = rows["entity"].to_numpy()
    order = np.argsort(entities, kind="stable")
    names, starts = np.unique(entities[order], return_index=True)
    counts = np.diff(np.append(starts, len(order)))
    return pd.DataFrame({"rows": counts, "digest": np.bitwise_xor.reduceat(hashes[order], starts)},
                        index=pd.Index(names, name="entity"))


@_retried
def sync(warehouse: Warehouse, source: str, rows: pd.DataFrame) -> Written:
    """Make ``source``'s rows be ``rows`` (every fact it gives now) in one commit that
    writes only the entities whose rows differ from the stored ones and removes those
    no longer given; nothing when none differs (tried again from the stored state when
    a racing commit refuses it: :func:`_retried`)."""
    rows = _ready(source, rows)
    stored = entry_table.read(warehouse, TABLE, {"source": source})
    stored = _ready(source, stored) if len(stored) else _ready(source, pd.DataFrame())
    new, old = _signatures(rows), _signatures(stored)
    common = new.index.intersection(old.index)
    differ = ((new.loc[common, "rows"].to_numpy() != old.loc[common, "rows"].to_numpy())
              | (new.loc[common, "digest"].to_numpy() != old.loc[common, "digest"].to_numpy()))
    changed = {*new.index.difference(old.index), *common[differ]}
    removed = sorted(set(old.index) - set(new.index))
    if len(changed) + len(removed) > WHOLE_ABOVE:
        entry_table.replace_scope(warehouse, TABLE, rows, {"source": source})
        return Written(entities=len(new), removed=len(removed), rows=len(rows), whole=True)
    written = rows[rows["entity"].isin(changed)]
    warehouse.write_entries(TABLE, written, {"source": source}, removed=removed)
    return Written(entities=len(changed), removed=len(removed), rows=len(written))


def stored_rows(warehouse: Warehouse, source: str) -> int:
    """``source``'s rows in the table now, counted from the log's statistics where its
    files hold that source alone (``entry_table.count``): a figure for the source's
    ``dagster/row_count``, which costs no read of its rows outside compacted files."""
    return entry_table.count(warehouse, TABLE, {"source": source})


def compact_if_due(warehouse: Warehouse) -> dict[str, int] | None:
    """Compact the table (``entry_table.compact``: small files merged, files no version has
    listed for a week removed) when its current version has over ``COMPACT_ABOVE`` data
    files under the compaction's target size (``entry_table.TARGET_FILE_BYTES``); its
    figures, or None when not due. A compaction's own files are under that size too
    (it fills each up to the size): a table of over ``COMPACT_ABOVE`` of them, some
    6 GiB, would be compacted by every write, each merging what little it can."""
    small = [info for info in entry_table.files(warehouse, TABLE)
             if info.size < entry_table.TARGET_FILE_BYTES]
    if len(small) <= COMPACT_ABOVE:
        return None
    return entry_table.compact(warehouse, TABLE)
