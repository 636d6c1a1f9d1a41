"""``energy_facts`` kept per entry: a source writes the rows of what it landed, not all of them.

The table is kept per entry (``joulehouse/entry_table.py``, Delta Lake; docs/ARCHITECTURE.md,
"Tables that hold a decade"): each write replaces the rows of some of one source's
entities (``entity``, within ``source``) in one commit (one per ``entry_table.IN_LIMIT``
entities), whatever the table holds (issue 28). A source writes them one of two ways:

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

After a write, :func:`compact_if_due` merges the source's files once they are many.

The work is :mod:`joulehouse.entry_sync`'s, which other tables kept per entry share;
this module fixes its table, scope (the source) and columns, and keeps its own settings.

Either way the table afterwards holds what a rebuild from scratch would write, with every
time rounded to the microsecond (Delta's unit, :func:`entry_table.to_microseconds`: a window
end computed from a duration in float seconds moves by less than a microsecond).
"""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd

from joulehouse import entry_sync, entry_table
from joulehouse.entry_sync import Ownership, Written
from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.warehouse import Warehouse

__all__ = ["Ownership", "Written", "compact_if_due", "replace_owned", "stored_rows", "sync"]

TABLE = "energy_facts"
#: Small data files of a source (holding its rows, alone or beside another source's, under
#: ``entry_table.SCOPE_SMALL_BYTES``, which its compaction merges) in the table's current
#: version above which :func:`compact_if_due` merges them (each write adds one or two): the
#: files a reader lists and a write's predicate scans stay few, at the cost of rewriting
#: the small files every ~60 writes. Larger files are not counted, which a compaction
#: would leave as they are. Every table's threshold (``entry_sync.COMPACT_ABOVE``).
COMPACT_ABOVE = entry_sync.COMPACT_ABOVE
#: Changed entities above which :func:`sync` replaces the source's rows whole (a predicate
#: on ``source`` alone) rather than naming each in the write's ``IN`` list.
WHOLE_ABOVE = 10_000
#: Times a write is tried while delta-rs refuses its commit because another writer's
#: committed first (``CommitFailedError``: a concurrent transaction): a Dagster step
#: that fails so is not retried by ``run_retries``, and its entries' facts would stay
#: missing until the next run. The sources' steps write at once (each in its own pool), and
#: two writes on one data file (a file an ``optimize`` of every source wrote holds many
#: sources' rows) refuse each other, so the tries are many, after random waits
#: (``entry_sync.RETRY_WAIT_S``; at most about 9 s in all).
COMMIT_TRIES = 8

_retried = entry_sync.retried(lambda: COMMIT_TRIES)


def _kept(source: str) -> entry_sync.Kept:
    """``source``'s part of the table."""
    return entry_sync.Kept(TABLE, ENERGY_FACTS_COLUMNS, "entity", {"source": source})


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


@_retried
def replace_owned(warehouse: Warehouse, source: str, rows: pd.DataFrame,
                  owners: Collection[str], ownership: Ownership) -> Written:
    """Make ``source``'s rows of the entities of ``owners`` be ``rows`` (every fact those
    owners give now; an owner with none loses its stored rows), in one commit per
    ``entry_table.IN_LIMIT`` entities (tried again from the stored state when a racing
    commit refuses it: :data:`COMMIT_TRIES`)."""
    return entry_sync.replace_owned(warehouse, _kept(source), _ready(source, rows), owners,
                                    ownership)


@_retried
def sync(warehouse: Warehouse, source: str, rows: pd.DataFrame) -> Written:
    """Make ``source``'s rows be ``rows`` (every fact it gives now) in one commit (per
    ``entry_table.IN_LIMIT`` entities) that writes only the entities whose rows differ from the stored ones and removes those
    no longer given; nothing when none differs (tried again from the stored state when
    a racing commit refuses it: :data:`COMMIT_TRIES`)."""
    kept = _kept(source)
    stored = kept.stored(warehouse)
    return entry_sync.sync(warehouse, kept, _ready(source, rows), _ready(source, stored),
                           WHOLE_ABOVE)


def stored_rows(warehouse: Warehouse, source: str) -> int:
    """``source``'s rows in the table now, counted from the log's statistics where its
    files hold that source alone (``entry_table.count``): a figure for the source's
    ``dagster/row_count``, which costs no read of its rows outside compacted files."""
    return _kept(source).count(warehouse)


def compact_if_due(warehouse: Warehouse, source: str) -> dict[str, int] | None:
    """Compact ``source``'s files when the current version holds over ``COMPACT_ABOVE`` data
    files of its rows under ``entry_table.SCOPE_SMALL_BYTES`` (``entry_table.small_files``);
    its figures, or None when not due (all nought when due but no range holds two of them
    within ``entry_table.REWRITE_BYTES``).

    Every source's step writes the table at once (each in its own pool), and compacts its
    own files, as a write like theirs (``entry_table.compact_scope``): tried again while a
    racing commit refuses it, and left to a later write when every try was refused (then
    its figures say ``refused``: no row moved)."""
    from deltalake.exceptions import CommitFailedError

    if entry_table.small_files(warehouse, TABLE, {"source": source}) <= COMPACT_ABOVE:
        return None
    try:
        return _retried(entry_table.compact_scope)(warehouse, TABLE, {"source": source})
    except CommitFailedError:
        return {"added": 0, "merged": 0, "removed": 0, "refused": 1}
