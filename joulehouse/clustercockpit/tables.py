"""``cc_jobs``, ``cc_job_energy`` and ``cc_rollup`` kept per entry (issue 28).

Each is a table kept per entry (``joulehouse/entry_table.py``, written through
``joulehouse/entry_sync.py``), the whole table ClusterCockpit's:

- ``cc_jobs`` and ``cc_job_energy``: entries are jobs (``job``, ``cluster/jobId/startTime``),
  owned by their job-id block (the Dagster partition; :data:`~.energy.FACTS_OWNERSHIP`);
- ``cc_rollup``: entries are UTC start days (``day``): a day's rows are its groups (cluster,
  partition, project, user), the figures of the groups' exact sums (``aggregate.SUMS``:
  integer mJ, ms, node-ms, counts), which the hidden table ``_cc_rollup_sums`` keeps
  (:data:`ROLLUP_SUMS`, entries days too).

:func:`land` writes the blocks of a run: the sums of the groups its jobs belong to (before,
as cc_jobs and cc_job_energy hold them, or after) get the blocks' new jobs added and their
stored ones taken away (integers: exact), and the rollup rows of those days are the new
sums' figures; then the sums, the rollup, job energy and cc_jobs are written in that order,
the blocks' jobs' rows replacing their stored ones (a job no longer given is removed). It
reads the run's blocks' stored jobs and the touched days' sums (a group each), whatever
else is stored, however many jobs those days hold. :func:`rebuild` brings every table in
line with the given rows of every stored block, writing only the entries that differ (a
block deleted from Dagster loses its rows there).

The sums hold what cc_jobs and cc_job_energy hold, but while a run writes: the days it
writes are marked pending (:class:`Pending`, a plain file) before its first commit and
unmarked after its last, so that a run stopped in between (the sums ahead of cc_jobs)
leaves them marked, and the next run recomputes those days' sums from what cc_jobs and
cc_job_energy then hold (every day, after a stopped rebuild, where no sums are stored
yet beside stored jobs, or where cc_jobs is not at the version the last run here recorded,
:func:`_stamp`: code before the sums wrote it) rather than taking the same jobs away twice.

One writer at a time: the sums' commit is refused if another run committed sums after this
one read them (the landing is then tried again from its reads), but the mark is one file,
and a run that reads while another is between its sums' and cc_jobs' commits takes that
one's days as a stopped run's (two runs at once could clear each other's mark or write
sums missing the other's jobs, healed only by a rebuild). The pool
``joulehouse_tables_clustercockpit`` of limit 1, which ``cc_pipeline``'s step runs in
(deploy/), keeps to one.

Both give what a rebuild from scratch (``aggregate.rollup`` over every stored block) gives,
to the bit, times rounded to the microsecond (Delta's unit). Rows are stored in no
particular order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from joulehouse import entry_sync, entry_table, filestats
from joulehouse.clustercockpit.aggregate import (
    SUMS,
    SUMS_COLUMNS,
    group_sums,
    job_sums,
    rollup_of_sums,
)
from joulehouse.clustercockpit.energy import FACTS_OWNERSHIP
from joulehouse.clustercockpit.schemas import CC_JOBS_SCHEMA, JOB_ENERGY_SCHEMA, ROLLUP_SCHEMA
from joulehouse.warehouse import Warehouse

JOBS = entry_sync.Kept("cc_jobs", list(CC_JOBS_SCHEMA.columns), entry="job")
JOB_ENERGY = entry_sync.Kept("cc_job_energy", list(JOB_ENERGY_SCHEMA.columns), entry="job")
ROLLUP = entry_sync.Kept("cc_rollup", list(ROLLUP_SCHEMA.columns), entry="day")
#: The rollup groups' exact sums (``aggregate.SUMS``), per UTC start day.
ROLLUP_SUMS = entry_sync.Kept("_cc_rollup_sums", SUMS_COLUMNS, entry="day")
#: The days whose sums a run is writing (:class:`Pending`): a plain partition; beside it,
#: the stamp (:func:`_stamp`).
PENDING_TABLE = "_cc_rollup_pending"
#: The partition of :data:`PENDING_TABLE` holding cc_jobs' version a run of this code left.
STAMP = "cc_jobs_version"
DAY = pd.Timedelta(days=1)

#: The rows of given stored blocks: (cc_jobs rows, cc_job_energy rows).
BlockRows = Callable[[list[str]], tuple[pd.DataFrame, pd.DataFrame]]


@dataclass(frozen=True)
class Landed:
    """What :func:`land` or :func:`rebuild` wrote: per table, what its write did; the
    recomputed days' rollup rows (for the materialization's plot); the blocks' jobs and
    job energy."""

    jobs: entry_sync.Written
    job_energy: entry_sync.Written
    rollup: entry_sync.Written
    days: pd.DataFrame
    landed_jobs: pd.DataFrame
    landed_energy: pd.DataFrame


@dataclass(frozen=True)
class Pending:
    """The UTC days whose sums a run is about to commit ahead of cc_jobs (``whole``: every
    day), written before its first commit and removed after its last (partition
    ``pending`` of :data:`PENDING_TABLE`): left by a run stopped in between, for the next
    to recompute from cc_jobs and cc_job_energy as they are. One file for every run: it
    assumes one writer at a time (the pool ``joulehouse_tables_clustercockpit``, limit 1;
    a second run would overwrite it and the first to finish remove it, or take a live
    run's days for a stopped one's)."""

    whole: bool = False
    days: frozenset[pd.Timestamp] = frozenset()

    def write(self, warehouse: Warehouse) -> None:
        """Replace the stored mark with this one (a row per day; ``whole``: a row without)."""
        days = pd.Series(sorted(self.days), dtype="datetime64[ns, UTC]")
        warehouse.write_partition(PENDING_TABLE, "pending", pd.DataFrame({
            "day": pd.concat([days, pd.Series([pd.NaT] * self.whole,
                                              dtype="datetime64[ns, UTC]")], ignore_index=True),
            "whole": [False] * len(days) + [True] * self.whole}))

    @classmethod
    def read(cls, warehouse: Warehouse) -> Pending:
        """The stored mark (none stored: nothing pending)."""
        if not warehouse.has_partition(PENDING_TABLE, "pending"):
            return cls()
        rows = warehouse.read_partitions(PENDING_TABLE, ["pending"])
        return cls(bool(rows["whole"].any()), frozenset(rows.loc[~rows["whole"], "day"]))

    @staticmethod
    def clear(warehouse: Warehouse) -> None:
        """Remove the stored mark (none stored: nothing to do)."""
        warehouse.remove_partition(PENDING_TABLE, "pending")


def _stamp(warehouse: Warehouse) -> None:
    """Record cc_jobs' current version, after a run's last commit to it (compaction too):
    code that does not keep the sums (before them) commits to cc_jobs without recording
    it, so that the next run here finds another version (:func:`_stamped`)."""
    version = entry_table.version(warehouse, JOBS.table)
    if version is not None:
        warehouse.write_partition(PENDING_TABLE, STAMP, pd.DataFrame({"version": [version]}))


def _stamped(warehouse: Warehouse) -> bool:
    """Whether cc_jobs' current version is the one :func:`_stamp` recorded: no commit to it
    since but a stopped run's, whose days :class:`Pending` marks."""
    return warehouse.has_partition(PENDING_TABLE, STAMP) and int(warehouse.read_partitions(
        PENDING_TABLE, [STAMP])["version"].iloc[0]) == entry_table.version(warehouse, JOBS.table)


def _days(rows: pd.DataFrame, column: str = "start_time_utc") -> set[pd.Timestamp]:
    """The UTC days of ``rows``'s ``column``."""
    return set(rows[column].dt.floor("D")) if len(rows) else set()


def _on_days(column: str, days: Collection[pd.Timestamp]) -> pc.Expression:
    """A dataset filter: ``column`` (a UTC time) within one of ``days`` (at least one)."""
    return filestats.in_ranges(column, [(day, day + DAY) for day in sorted(days)])


def _owned_rows(warehouse: Warehouse, kept: entry_sync.Kept, owners: Collection[str]
                ) -> pd.DataFrame:
    """The stored rows of ``owners``' jobs: each block's job keys lie between its prefix and
    the prefix followed by the last character, a range the log's statistics of the files
    prune by (``filestats.holding_ranges``: pyarrow would open every file's footer)."""
    if not owners:
        return pd.DataFrame(columns=kept.columns)
    ranges = [(prefix, prefix + "\U0010ffff") for prefix in map(FACTS_OWNERSHIP.prefix, owners)]
    where = filestats.in_ranges(kept.entry, ranges)
    listed = (filestats.holding_ranges(warehouse, kept.table, kept.entry, ranges)
              if entry_table.is_entry_table(warehouse, kept.table) else None)
    rows = kept.ready(entry_table.read_where(warehouse, kept.table, where, listed))
    return rows[rows[kept.entry].map(FACTS_OWNERSHIP.owner_of).isin(set(owners))]


def _others_of_days(warehouse: Warehouse, days: Collection[pd.Timestamp] | None,
                    blocks: Collection[str]) -> pd.DataFrame:
    """:func:`~.aggregate.job_sums` of the jobs stored for ``days`` (None: every day) but
    ``blocks``' own, with their stored energy: what a pending day is recomputed from."""
    if days is not None and not days:
        return job_sums(pd.DataFrame(columns=JOBS.columns),
                        pd.DataFrame(columns=JOB_ENERGY.columns))
    where = None if days is None else _on_days("start_time_utc", days)
    stored = JOBS.ready(entry_table.read_where(warehouse, JOBS.table, where))
    stored = stored[~stored["job"].map(FACTS_OWNERSHIP.owner_of).isin(set(blocks))]
    energy = JOB_ENERGY.ready(entry_table.read_where(
        warehouse, JOB_ENERGY.table, pc.field("job").isin(pa.array(stored["job"].tolist(),
                                                                    pa.string()))))
    return job_sums(stored, energy)


def _stored_sums(warehouse: Warehouse, days: Collection[pd.Timestamp] | None) -> pd.DataFrame:
    """The stored sums of ``days`` (None: every day)."""
    if days is not None and not days:
        return pd.DataFrame(columns=ROLLUP_SUMS.columns)
    where = None if days is None else _on_days("day", days)
    return ROLLUP_SUMS.ready(entry_table.read_where(warehouse, ROLLUP_SUMS.table, where))


def _taken_away(sums: pd.DataFrame) -> pd.DataFrame:
    """``sums`` (:func:`~.aggregate.job_sums` rows) with each of :data:`~.aggregate.SUMS`
    negated: what adding them to a group's sums takes away."""
    return sums.assign(**{name: -sums[name] for name in SUMS})


def _new_sums(warehouse: Warehouse, blocks: Collection[str], jobs: pd.DataFrame,
              energy: pd.DataFrame) -> tuple[pd.DataFrame, set[pd.Timestamp], Pending]:
    """The sums of the days the blocks' jobs touch (before or after) and of those a stopped
    run left pending, once ``blocks`` hold ``jobs`` and ``energy``; those days; what was
    pending. A day not pending: its stored sums, plus the given jobs', less the blocks'
    stored jobs'. A pending day (every day, when ``whole``, where sums were never stored
    beside stored jobs or where cc_jobs is not :func:`_stamped`): the stored jobs' but the
    blocks', plus the given ones'.
    Read before any write, so that it holds whichever of the tables' writes a stop let
    through."""
    pending = Pending.read(warehouse)
    if not pending.whole and entry_table.is_entry_table(warehouse, JOBS.table) and (
            not entry_table.is_entry_table(warehouse, ROLLUP_SUMS.table)
            or not _stamped(warehouse)):
        pending = Pending(whole=True)
    before = job_sums(_owned_rows(warehouse, JOBS, blocks),
                      _owned_rows(warehouse, JOB_ENERGY, blocks))
    after = job_sums(jobs, energy)
    touched = _days(before, "day") | _days(after, "day")
    if pending.whole:
        others, stored = _others_of_days(warehouse, None, blocks), _stored_sums(warehouse, None)
        recomputed = touched | _days(others, "day") | _days(stored, "day")
        parts = [others, after]
    else:
        recomputed = set(pending.days)
        kept_days = touched - recomputed
        parts = [_stored_sums(warehouse, kept_days), after,
                 _taken_away(before[before["day"].isin(sorted(kept_days))]),
                 _others_of_days(warehouse, recomputed, blocks)]
    sums = group_sums(pd.concat([part[ROLLUP_SUMS.columns] for part in parts if len(part)],
                                ignore_index=True) if any(map(len, parts))
                      else pd.DataFrame(columns=ROLLUP_SUMS.columns))
    return sums[sums["jobs"] > 0], touched | recomputed, pending


@entry_sync.retried()
def land(warehouse: Warehouse, blocks: Collection[str], rows_of: BlockRows) -> Landed:
    """Make the tables hold the rows ``rows_of(blocks)`` gives for ``blocks`` (stored blocks:
    their jobs' rows replaced, a job no longer given removed) and the rollup of the days
    their jobs started on before (as cc_jobs holds them) or after from the groups' sums
    kept (:func:`_new_sums`); one commit per table, cc_jobs last, inside the days'
    :class:`Pending` mark: a stop between the commits leaves it, so that the next run
    recomputes those days' sums from cc_jobs and cc_job_energy as they are. A job no block
    of ``blocks`` owns is refused before anything is written. The sums' commit is refused
    if another run committed sums after this one read them (``since``), and the landing
    tried again from its reads (:func:`entry_sync.retried`)."""
    blocks = sorted(blocks)
    jobs, energy = rows_of(blocks) if blocks else (pd.DataFrame(columns=JOBS.columns),
                                                   pd.DataFrame(columns=JOB_ENERGY.columns))
    jobs, energy = JOBS.ready(jobs), JOB_ENERGY.ready(energy)
    for kept, rows in ((JOBS, jobs), (JOB_ENERGY, energy)):
        entry_sync.refuse_unowned(kept, rows, blocks, FACTS_OWNERSHIP)
    read_version = entry_table.version(warehouse, ROLLUP_SUMS.table)
    sums, days, pending = _new_sums(warehouse, blocks, jobs, energy)
    sums = ROLLUP_SUMS.ready(sums)
    table = ROLLUP.ready(rollup_of_sums(sums))
    emptied = sorted(map(str, days - set(sums["day"])))
    if days:
        Pending(pending.whole, frozenset(days)).write(warehouse)
    ROLLUP_SUMS.write(warehouse, sums, emptied, since=read_version)
    ROLLUP.write(warehouse, table, emptied)
    written_rollup = entry_sync.Written(entities=table["day"].nunique(), removed=len(emptied),
                                        rows=len(table))
    written_energy = entry_sync.replace_owned(warehouse, JOB_ENERGY, energy, blocks,
                                              FACTS_OWNERSHIP)
    written_jobs = entry_sync.replace_owned(warehouse, JOBS, jobs, blocks, FACTS_OWNERSHIP)
    if days or pending != Pending():
        Pending.clear(warehouse)
    entry_sync.compact_each(warehouse, (JOBS, JOB_ENERGY, ROLLUP, ROLLUP_SUMS))
    _stamp(warehouse)
    return Landed(written_jobs, written_energy, written_rollup, table, jobs, energy)


@entry_sync.retried()
def rebuild(warehouse: Warehouse, jobs: pd.DataFrame, energy: pd.DataFrame) -> Landed:
    """Make the tables hold ``jobs`` and ``energy`` (the rows of every stored block) and their
    rollup and sums, writing only the entries (jobs, days) whose rows differ from the stored
    ones (a table stored the old way, one plain file, compares with its rows and is
    migrated by its first write); a rollup not kept yet is replaced whole (:func:`is_kept`).
    Every day is marked :class:`Pending` meanwhile: a stop before cc_jobs is written leaves
    sums a later landing recomputes whole."""
    jobs, energy = JOBS.ready(jobs), JOB_ENERGY.ready(energy)
    sums = ROLLUP_SUMS.ready(group_sums(job_sums(jobs, energy)))
    table = ROLLUP.ready(rollup_of_sums(sums))
    whole = -1 if len(table) and not is_kept(warehouse) else None
    Pending(whole=True).write(warehouse)
    written = [entry_sync.sync(warehouse, kept, rows, kept.stored(warehouse), above)
               for kept, rows, above in ((ROLLUP_SUMS, sums, None), (ROLLUP, table, whole),
                                         (JOB_ENERGY, energy, None), (JOBS, jobs, None))]
    Pending.clear(warehouse)
    entry_sync.compact_each(warehouse, (JOBS, JOB_ENERGY, ROLLUP, ROLLUP_SUMS))
    _stamp(warehouse)
    _, rollup, job_energy, job_rows = written
    return Landed(job_rows, job_energy, rollup, table, jobs, energy)


def is_kept(warehouse: Warehouse) -> bool:
    """Whether cc_rollup is kept per entry (holds a Delta log). One written before (a plain
    file) summed its days' jobs in another order, so that a day no landing recomputes
    might differ from a rebuild in the last bits: its first run is a :func:`rebuild`,
    which replaces it whole."""
    return entry_table.is_entry_table(warehouse, ROLLUP.table)
