"""The months' distinct ``facts`` and ``entities``, kept from what changed (issue 28).

A month's row of ``accounting_monthly`` sums its daily rows (``rollups.monthly``), which a
landing reads back; its distinct facts and entities cannot be summed from days (a fact
over three days is one fact of the month). They are kept in a hidden Delta table,
MEMBERS_TABLE (``warehouse.is_hidden``), of two kinds of rows:

- MEMBER: per calendar, month, ROLLUP_KEYS and entity, the entity's ``facts`` with time in
  the month (``rollups.members``; ``entities`` 1);
- MONTH: per calendar, month and ROLLUP_KEYS, ``facts`` and ``entities``: the sums and the
  count of its member rows (``rollups.counts``; ``entity`` '').

A fact is one entity's, so a change of some entities changes a month's counts by theirs
alone: :func:`kept` makes the touched months' rows the stored ones less the changed
entities' stored members plus their members now (integers: exact), reading only those
members and months (from the files the log's statistics say may hold them:
``filestats.holding``), and writes both kinds in one commit, so the two always agree: a run
stopped after it and run again subtracts the members it wrote. More changed entities than
one predicate names (``entry_table.IN_LIMIT`` a source) take a commit per part of them,
each reading the months back and writing the part's members with the months' counts they
give, so the two agree after every commit. A commit's members are
written in the order of source, entity and month, its months after them (a whole
recompute: in a commit of their own), in files of FILE_BYTES, so that a commit rewrites the
files of the entities and months it replaces, not the table.
"""

from __future__ import annotations

import functools
import operator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from joulehouse import entry_table, filestats
from joulehouse.accounting.rollups import FACT, MONTH_KEYS, counts
from joulehouse.accounting.stepseries import constant
from joulehouse.warehouse import Warehouse

MEMBERS_TABLE = "_accounting_members"
MEMBER, MONTH = "member", "month"
#: The columns of MEMBERS_TABLE.
COLUMNS = ["kind", *MONTH_KEYS, "entity", "facts", "entities"]
#: The size of the table's data files (bytes): small, so that a commit rewrites few rows
#: (its rows compress to about 5 bytes each: some 25,000 a file).
FILE_BYTES = 2**17
#: The order of the members in their files (:func:`_member_rows`: by one of the entity's
#: facts in canonical order, then month), which ``compaction.py`` keeps.
ORDER = ["source", "entity", "month", "calendar"]


def _member_rows(members: pd.DataFrame, entity: np.ndarray) -> pd.DataFrame:
    """The table's rows of ``members`` (``rollups.members`` of facts in canonical order,
    ``incremental.canonical``; ``entity``: the facts' entities, which FACT indexes), in the
    order of FACT, so of source and entity, and month. Each column is taken once (millions
    of rows in a whole recompute)."""
    fact = members[FACT].to_numpy()
    order = np.lexsort((members["month"].to_numpy(), fact))
    return pd.DataFrame({"kind": constant(MEMBER, len(order)),
                         **{name: members[name].array.take(order) for name in MONTH_KEYS},
                         "entity": entity[fact[order]], "facts": members["facts"].to_numpy()[order],
                         "entities": np.ones(len(order), np.int64)}, copy=False)


def _month_rows(month_counts: pd.DataFrame) -> pd.DataFrame:
    """The table's rows of ``month_counts`` (``rollups.counts``)."""
    return month_counts.assign(kind=MONTH, entity="")[COLUMNS]


def whole(warehouse: Warehouse, members: pd.DataFrame, entity: np.ndarray) -> None:
    """Replace the table by ``members`` (every fact's; ``entity`` as :func:`_member_rows`),
    then add their months in a commit of their own, so that they lie in files apart from
    the members (a run stopped between the two is a whole recompute again:
    ``incremental.Pending``)."""
    entry_table.replace_where(warehouse, MEMBERS_TABLE, _member_rows(members, entity), None,
                              FILE_BYTES)
    entry_table.replace_where(warehouse, MEMBERS_TABLE, _month_rows(counts(members)), "",
                              FILE_BYTES)


def _selected(keys: pd.DataFrame) -> ds.Expression:
    """The dataset filter of the rows equal to a row of ``keys`` (at least one): per value
    of its leading columns, its last column's values ``isin``."""
    *scope, last = keys.columns
    clauses = []
    for group, rows in keys.drop_duplicates().groupby(scope, sort=True):
        group = group if isinstance(group, tuple) else (group,)
        values = rows[last].to_numpy()
        if np.issubdtype(values.dtype, np.datetime64):
            values = values.astype("datetime64[us]")  # as stored
        clauses.append(functools.reduce(operator.and_, [
            ds.field(name) == value for name, value in zip(scope, group, strict=True)])
            & ds.field(last).isin(pa.array(values)))
    return functools.reduce(operator.or_, clauses)


def _read(warehouse: Warehouse, kind: str, keys: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``kind`` equal to a row of ``keys``, from the files that may hold them."""
    listed = filestats.holding(warehouse, MEMBERS_TABLE, {
        "kind": [kind], **{name: keys[name].unique() for name in keys.columns}})
    return entry_table.read_files(warehouse, MEMBERS_TABLE, listed,
                                  (ds.field("kind") == kind) & _selected(keys), COLUMNS)


def kept(warehouse: Warehouse, changed: pd.DataFrame, now: pd.DataFrame, entity: np.ndarray,
         months: pd.DataFrame) -> pd.DataFrame:
    """The counts (``rollups.counts``) of ``months`` (calendar, source, month: every month
    the ``changed`` entities (source, entity) had or have facts in), with those entities'
    members now ``now`` (``rollups.members`` of their facts now; ``entity`` as
    :func:`_member_rows`) in place of their stored ones; the table made so in one commit
    (one per part of ``changed``: see the module)."""
    months = months[["calendar", "source", "month"]].drop_duplicates()
    changed = changed[["source", "entity"]].drop_duplicates()
    if changed.empty:
        raise ValueError("months.kept: no changed entity")
    for part, rows in entry_table.row_parts(MEMBERS_TABLE, _member_rows(now, entity), changed):
        month_counts = _kept_part(warehouse, part, rows, months)
    return month_counts


def _kept_part(warehouse: Warehouse, changed: pd.DataFrame, rows: pd.DataFrame,
               months: pd.DataFrame) -> pd.DataFrame:
    """:func:`kept` for the ``changed`` entities of one commit, whose member rows now are
    ``rows``."""
    was = counts(_read(warehouse, MEMBER, changed))
    stored = _read(warehouse, MONTH, months)[MONTH_KEYS + ["facts", "entities"]]
    month_counts = pd.concat([stored, was.assign(facts=-was["facts"],
                                                 entities=-was["entities"]), counts(rows)],
                             ignore_index=True)
    month_counts = month_counts.groupby(MONTH_KEYS, sort=True)[["facts", "entities"]].sum()
    if (month_counts < 0).any(axis=None):
        raise ValueError(f"{MEMBERS_TABLE}: the changed entities' stored members are not "
                         "counted in their months (another writer's run at once, outside "
                         "this instance's pool?): delete the folder "
                         f"{warehouse.table_path(MEMBERS_TABLE)}, and the next run "
                         "recomputes every table from the facts")
    month_counts = month_counts[month_counts["facts"] > 0].reset_index()
    entry_table.replace_where(warehouse, MEMBERS_TABLE,
                              pd.concat([rows, _month_rows(month_counts)], ignore_index=True),
                              kept_where(months, changed), FILE_BYTES)
    return month_counts


def kept_where(months: pd.DataFrame, changed: pd.DataFrame) -> str:
    """The predicate of :func:`kept`'s commit: the counts of ``months`` (calendar, source,
    month) and the members of the ``changed`` entities (source, entity), ``kind`` a key
    column of each: terms of ``kind AND ... AND column IN (...)`` joined by one ``OR``.
    Each ``IN`` list then lies no deeper than in any other keys' predicate: nested one
    ``OR`` further down (``kind AND (keys)``), a list of 10,000 killed the process
    (``entry_table.IN_MAX``)."""
    return " OR ".join([
        entry_table.keys_predicate(months.assign(kind=MONTH)[["kind", "calendar", "source",
                                                              "month"]]),
        entry_table.keys_predicate(changed.assign(kind=MEMBER)[["kind", "source", "entity"]])])
