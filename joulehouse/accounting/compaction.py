"""The accounting's tables compacted and vacuumed by the accounting's own steps (issue 28).

Every run of a step writes a few small data files into its tables: ``carbon_per_fact`` and
``cost_per_fact`` one with the new entities' rows (an append), the roll-ups one per source's
new day or month, the kept tables (``kept.py``) one with the new keys' rows. A write that
replaces stored rows rewrites their file with them (delta-rs writes the file's other rows
beside the new ones), so those do not add up. Left alone, a year of landings a minute
leaves hundreds of thousands of files a table, which every read lists and, on an object
store, pays a request each for. After its update, each step calls :func:`compact_if_due`
for its tables:

- *Merged in the order they are written and read* (:data:`LAYOUTS`), each source's small
  files apart (``entry_table.merge_scope``): the roll-ups by day (month), the per-fact,
  members' and kept tables by entity, ``waste_weekly`` by week. A merged file holds a
  source's consecutive days (entities), as a write leaves them, so that the reads that
  prune by the files' statistics (``incremental._stored_days`` and ``recent_days``,
  ``months._read``, the comparison with ``carbon_per_fact``, ``kept``'s reads by key) and
  the writes' predicates keep touching the files of their days (entities) only. Not
  ``optimize.compact``: it packs files in no order, into files of distant days
  (entities) that every landing between them would read and rewrite; no table here is
  written without a predicate on its order (``accounting_monthly`` and ``waste_weekly``,
  read whole, are written by months and weeks).
- *Due* once a source has over COMPACT_ABOVE small files (under a quarter of the table's
  file size); one merge per table and run at most, rewriting at most twice the table's
  file size (``entry_table._sizes``): a run's cost is bounded whatever the tables hold.
  Each table has one writer at a time (its step's pool, ``joulehouse_accounting`` or
  ``joulehouse_derived``, of limit 1), so no merge races another; each is one overwrite committed at the version it read, so one that fails
  leaves the table as it was.
- *Vacuumed* every VACUUM_EVERY versions (``entry_table.vacuum_if_due``): the files that no
  version has listed for ``entry_table.RETENTION_HOURS`` go. No state names these tables'
  files (the accounting's and ``kept.py``'s states name their inputs' files; a vacuum of
  ``energy_facts``, by the sources' steps, is what could make a run recompute whole), and
  the steps read them as of the version they open.
- *Nothing changes for the incremental updates*: a merge writes back the rows it read, to
  the bit, and what changed is found in the inputs' files, never in these tables'.

The hidden state tables (``_accounting_state``, ``_trust_checks_state``, ...) are plain
partitions, a file each replaced in place: there is nothing to compact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from joulehouse import entry_sync, entry_table
from joulehouse.accounting import incremental, kept, months
from joulehouse.warehouse import Warehouse

#: Small data files of a source (of a table without: of the table) above which its files
#: are merged, as every other table's (``entry_sync.COMPACT_ABOVE``): a run adds one or
#: two, so a source's files are merged every ~60 of its runs.
COMPACT_ABOVE = entry_sync.COMPACT_ABOVE
#: Versions after which a table is vacuumed: a vacuum lists the table's folder, which holds
#: the files of the last ``entry_table.RETENTION_HOURS`` at least; at a run a minute (a
#: version or two a table), about once a day.
VACUUM_EVERY = 1_000


@dataclass(frozen=True)
class Layout:
    """How a table's rows lie in its files, which its compaction keeps: sorted by
    ``order``, whose first column is ``per`` (each value's files merged apart; None: the
    table's together) and whose next the range a merge takes; the rows of ``fixed`` values
    merged only (a kind of rows); in files of ``file_bytes``."""

    table: str
    order: tuple[str, ...]
    file_bytes: int
    per: str | None = "source"
    fixed: Mapping[str, str] = field(default_factory=dict)

    @property
    def column(self) -> str:
        """The column whose ranges a merge takes."""
        return self.order[1] if self.per else self.order[0]


def _layouts() -> dict[str, Layout]:
    day, month = (tuple(incremental.period_order(period)) for period in ("day", "month"))
    by_fact = tuple(incremental.ORDER)
    return {layout.table: layout for layout in (
        Layout(incremental.DAILY_TABLE, day, incremental.FILE_BYTES),
        Layout(incremental.MONTHLY_TABLE, month, incremental.FILE_BYTES),
        Layout(incremental.CARBON_TABLE, by_fact, incremental.FILE_BYTES),
        Layout(incremental.COST_TABLE, by_fact, incremental.FILE_BYTES),
        Layout(months.MEMBERS_TABLE, tuple(months.ORDER), months.FILE_BYTES,
               fixed={"kind": months.MEMBER}),
        *(Layout(table, tuple(order), incremental.FILE_BYTES,
                 per="source" if order[0] == "source" else None)
          for table, order in kept.ORDER.items()))}


#: Per table, its layout.
LAYOUTS = _layouts()
#: The tables of the ``accounting`` step.
ACCOUNTING = (incremental.DAILY_TABLE, incremental.MONTHLY_TABLE, incremental.CARBON_TABLE,
              incremental.COST_TABLE, months.MEMBERS_TABLE)


def compact_if_due(warehouse: Warehouse, tables: Iterable[str]) -> dict[str, dict]:
    """Each of ``tables`` (of LAYOUTS) merged (:func:`merged`) and vacuumed when due: per
    table where something was done, the files the merge added and merged and whose (the
    ``per`` value), and the files vacuumed (``removed``)."""
    done = {}
    for table in tables:
        figures = merged(warehouse, LAYOUTS[table])
        removed = entry_table.vacuum_if_due(warehouse, table, VACUUM_EVERY)
        if removed is not None:
            figures["removed"] = removed
        if figures:
            done[table] = figures
    return done


def merged(warehouse: Warehouse, layout: Layout) -> dict:
    """One merge of ``layout``'s table (``entry_table.merge_scope``): of the source with the
    most small files over COMPACT_ABOVE (the next where no range of it holds two within the
    rewrite size); its figures, or none when none is due."""
    if layout.per is None:
        counts = {None: entry_table.small_files(warehouse, layout.table, layout.fixed,
                                                layout.file_bytes)}
    else:
        counts = entry_table.small_files_by(warehouse, layout.table, layout.per, layout.fixed,
                                            layout.file_bytes)
    for value, count in sorted(counts.items(), key=lambda item: -item[1]):
        if count <= COMPACT_ABOVE:
            break
        whose = {} if layout.per is None else {layout.per: value}
        figures = entry_table.merge_scope(warehouse, layout.table, {**layout.fixed, **whose},
                                          layout.column, layout.order, layout.file_bytes)
        if figures is not None:
            return {**figures, **whose}
    return {}
