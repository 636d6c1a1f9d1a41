"""``cc_jobs``, ``cc_job_energy`` and ``cc_rollup`` kept per entry (issue 28).

Each is a table kept per entry (``joulehouse/entry_table.py``, written through
``joulehouse/entry_sync.py``), the whole table ClusterCockpit's:

- ``cc_jobs`` and ``cc_job_energy``: entries are jobs (``job``, ``cluster/jobId/startTime``),
  owned by their job-id block (the Dagster partition; :data:`~.energy.FACTS_OWNERSHIP`);
- ``cc_rollup``: entries are UTC start days (``day``): a day's rows are its groups (cluster,
  partition, project, user), recomputed whole from the stored jobs that started that day.

:func:`land` writes the blocks of a run: the days whose jobs changed (before, as cc_jobs
holds them, or after) are recomputed from the other jobs stored for them and the blocks'
new ones, then the rollup, job energy and cc_jobs are written in that order (cc_jobs last,
the record a retry reads "before" from); the blocks' jobs' rows replace their stored ones
(a job no longer given is removed). It reads the run's blocks and those days' jobs,
whatever else is stored. :func:`rebuild` brings every table in line with the given rows of
every stored block, writing only the entries that differ (a block deleted from Dagster
loses its rows there).

Both give what a rebuild from scratch (:func:`rollup_of` over every stored block) gives,
times rounded to the microsecond (Delta's unit). Rows are stored in no particular order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from joulehouse import entry_sync, entry_table
from joulehouse.clustercockpit.aggregate import rollup
from joulehouse.clustercockpit.energy import FACTS_OWNERSHIP
from joulehouse.clustercockpit.schemas import CC_JOBS_SCHEMA, JOB_ENERGY_SCHEMA, ROLLUP_SCHEMA
from joulehouse.warehouse import Warehouse

JOBS = entry_sync.Kept("cc_jobs", list(CC_JOBS_SCHEMA.columns), entry="job")
JOB_ENERGY = entry_sync.Kept("cc_job_energy", list(JOB_ENERGY_SCHEMA.columns), entry="job")
ROLLUP = entry_sync.Kept("cc_rollup", list(ROLLUP_SCHEMA.columns), entry="day")
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


def rollup_of(jobs: pd.DataFrame, energy: pd.DataFrame) -> pd.DataFrame:
    """:func:`~.aggregate.rollup` of ``jobs`` and their ``energy``, each ordered by job first
    so that every group's sums add the same numbers in the same order however the rows
    were read (float sums then agree to the bit)."""
    jobs = jobs.sort_values("job", ignore_index=True)
    energy = energy.sort_values(["job", "metric"], ignore_index=True)
    return rollup(jobs, energy)


def _days(jobs: pd.DataFrame) -> set[pd.Timestamp]:
    """The UTC days ``jobs`` started on."""
    return set(jobs["start_time_utc"].dt.floor("D")) if len(jobs) else set()


def _owned_rows(warehouse: Warehouse, kept: entry_sync.Kept, owners: Collection[str]
                ) -> pd.DataFrame:
    """The stored rows of ``owners``' jobs: each block's job keys lie between its prefix and
    the prefix followed by the last character, a range the files' statistics prune by."""
    if not owners:
        return pd.DataFrame(columns=kept.columns)
    ranges = [(pc.field(kept.entry) >= prefix) & (pc.field(kept.entry) < prefix + "\U0010ffff")
              for prefix in map(FACTS_OWNERSHIP.prefix, owners)]
    where = ranges[0]
    for one in ranges[1:]:
        where = where | one
    rows = kept.ready(entry_table.read_where(warehouse, kept.table, where))
    return rows[rows[kept.entry].map(FACTS_OWNERSHIP.owner_of).isin(set(owners))]


def _recomputed(warehouse: Warehouse, days: set[pd.Timestamp], blocks: Collection[str],
                jobs: pd.DataFrame, energy: pd.DataFrame) -> pd.DataFrame:
    """The rollup rows of ``days`` once ``blocks`` hold ``jobs`` and ``energy``: the jobs
    stored for those days but the blocks' own, plus the blocks' given jobs. Read before
    any write, so that it holds whichever of the tables' writes a stop let through."""
    if not days:
        return rollup_of(pd.DataFrame(columns=JOBS.columns), pd.DataFrame(columns=JOB_ENERGY.columns))
    start = pc.field("start_time_utc")
    spans = [(start >= day) & (start < day + DAY) for day in sorted(days)]
    where = spans[0]
    for one in spans[1:]:
        where = where | one
    stored = JOBS.ready(entry_table.read_where(warehouse, JOBS.table, where))
    stored = stored[~stored["job"].map(FACTS_OWNERSHIP.owner_of).isin(set(blocks))]
    stored_energy = JOB_ENERGY.ready(entry_table.read_where(
        warehouse, JOB_ENERGY.table, pc.field("job").isin(pa.array(stored["job"].tolist(), pa.string()))))
    return rollup_of(_joined(stored, jobs), _joined(stored_energy, energy))


def _joined(stored: pd.DataFrame, given: pd.DataFrame) -> pd.DataFrame:
    """``stored`` rows (as read: typed even when empty) then ``given`` ones, in the dtypes
    of those with rows (a frame without rows may have columns of no dtype)."""
    full = [frame for frame in (stored, given) if len(frame)]
    return pd.concat(full, ignore_index=True) if full else stored


@entry_sync.retried()
def land(warehouse: Warehouse, blocks: Collection[str], rows_of: BlockRows) -> Landed:
    """Make the tables hold the rows ``rows_of(blocks)`` gives for ``blocks`` (stored blocks:
    their jobs' rows replaced, a job no longer given removed) and recompute the rollup of
    the days their jobs started on before (as cc_jobs holds them) or after; one commit per
    table, cc_jobs last: a stop between the commits leaves cc_jobs as before, so that the
    next run over the blocks recomputes the same days and ends where a rebuild would."""
    blocks = sorted(blocks)
    jobs, energy = rows_of(blocks) if blocks else (pd.DataFrame(columns=JOBS.columns),
                                                   pd.DataFrame(columns=JOB_ENERGY.columns))
    jobs, energy = JOBS.ready(jobs), JOB_ENERGY.ready(energy)
    days = _days(_owned_rows(warehouse, JOBS, blocks)) | _days(jobs)
    table = ROLLUP.ready(_recomputed(warehouse, days, blocks, jobs, energy))
    ROLLUP.write(warehouse, table, sorted(map(str, days - set(table["day"]))))
    written_rollup = entry_sync.Written(entities=table["day"].nunique(),
                                        removed=len(days - set(table["day"])), rows=len(table))
    written_energy = entry_sync.replace_owned(warehouse, JOB_ENERGY, energy, blocks,
                                              FACTS_OWNERSHIP)
    written_jobs = entry_sync.replace_owned(warehouse, JOBS, jobs, blocks, FACTS_OWNERSHIP)
    entry_sync.compact_each(warehouse, (JOBS, JOB_ENERGY, ROLLUP))
    return Landed(written_jobs, written_energy, written_rollup, table, jobs, energy)


@entry_sync.retried()
def rebuild(warehouse: Warehouse, jobs: pd.DataFrame, energy: pd.DataFrame) -> Landed:
    """Make the tables hold ``jobs`` and ``energy`` (the rows of every stored block) and their
    rollup, writing only the entries (jobs, days) whose rows differ from the stored ones
    (a table stored the old way, one plain file, compares with its rows and is migrated
    by its first write); a rollup not kept yet is replaced whole (:func:`is_kept`). As in
    :func:`land`, cc_jobs is written last: a stop before it leaves the jobs a later landing
    reads its days from as they were."""
    jobs, energy = JOBS.ready(jobs), JOB_ENERGY.ready(energy)
    table = ROLLUP.ready(rollup_of(jobs, energy))
    whole = -1 if len(table) and not is_kept(warehouse) else None
    rollup, job_energy, job_rows = (
        entry_sync.sync(warehouse, kept, rows, kept.stored(warehouse), above)
        for kept, rows, above in ((ROLLUP, table, whole), (JOB_ENERGY, energy, None),
                                  (JOBS, jobs, None)))
    entry_sync.compact_each(warehouse, (JOBS, JOB_ENERGY, ROLLUP))
    return Landed(job_rows, job_energy, rollup, table, jobs, energy)


def is_kept(warehouse: Warehouse) -> bool:
    """Whether cc_rollup is kept per entry (holds a Delta log). One written before (a plain
    file) summed its days' jobs in another order, so that a day no landing recomputes
    might differ from a rebuild in the last bits: its first run is a :func:`rebuild`,
    which replaces it whole."""
    return entry_table.is_entry_table(warehouse, ROLLUP.table)
