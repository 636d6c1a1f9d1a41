"""The schedules: the rollups refreshed every day, every source re-validated every week.

Both kinds start STOPPED, as the sensors do: an operator switches them on under
Automation once the data roots are configured (the automation sensors already keep the
tables current as data arrives; the schedules are the periodic guarantee).

- ``daily_rollups`` (every day at 02:00 UTC): runs rebuilding the rollups, i.e. every
  table over all partitions (unpartitioned assets stored as Parquet): each source's
  tables (GPU per setting and benchmark, GEOPM per report and region, the PowerAPI
  window table, ClusterCockpit's jobs, job energy and ``cc_rollup``) and ``energy_facts``
  in one run per source, tagged ``joulehouse/pipeline=<source>`` as the source's sensor
  runs are (so it waits for the one in flight, and needs that source's pool alone); the
  grid intensity, tariffs and the accounting tables in one more, tagged ``rollups``, and
  the tables derived beside the accounting (trust checks, waste, quality: their own pool,
  ``assets.pools.DERIVED_POOL``) in one more, tagged ``derived``. One run over every pool would wait until all of them were free at once, which five
  sources landing all day seldom leave. The accounting run may end before a source's:
  what that source writes after asks for the accounting again through its automation
  condition (the automation sensors, on by default; with them off, the accounting keeps
  what its run found until the next day's). The
  tables are whole (not partitioned by day), so the runs rebuild them entirely; they
  run once the previous UTC day has closed, with two hours for late files, and their tag
  ``joulehouse/rollup_day`` names that day (the schedule's own date minus one).
- ``weekly_revalidation_<partitions>`` (Sundays at 04:00 UTC), one per source, since a
  Dagster run covers one partitions definition: a run of the source's own job over its
  newest partitions, the last ``newest`` registered (a sensor registers or moves the
  partitions it hands out to the end of the set: ``sensors/partition_runs.py``), so
  they are validated again against the current schemas and code, and what they store
  follows. The run is tagged ``joulehouse/reread=all`` (``assets.reporting.REREAD_TAG``):
  a step that otherwise reads only what changed since a partition was stored
  (ClusterCockpit's blocks) reads every entry of it again. The run carries the job's tag ``joulehouse/pipeline``, so it waits for the
  source's sensor run (deploy/production/dagster.yaml).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

import dagster as dg

from assets.pools import DERIVED_POOL, keys_by_pool, pool_source
from assets.reporting import REREAD_ALL, REREAD_TAG
from sensors.partition_runs import RANGE_END, RANGE_START

TIMEZONE = "UTC"
DAILY_CRON = "0 2 * * *"
WEEKLY_CRON = "0 4 * * 0"
ROLLUP_DAY_TAG = "joulehouse/rollup_day"
#: Day partitions (``joulehouse/landing_days.py``: GPU repetitions, GEOPM, TAU, PowerAPI)
#: re-validated per week: a week's.
DAYS_REVALIDATED = 7
#: The tag by which the run queue allows one run per source at a time (each source's job
#: carries it), and its value on the daily rollup runs.
PIPELINE_TAG = "joulehouse/pipeline"
ROLLUPS = "rollups"
#: The value of ``joulehouse/pipeline`` on the daily run of the tables in ``DERIVED_POOL``.
DERIVED = "derived"


def rollup_keys(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec]) -> dict[str, list[dg.AssetKey]]:
    """The rollups among ``assets``: the materializable assets without partitions that
    are stored as Parquet (kind ``parquet``), in the order given, by the value of
    ``joulehouse/pipeline`` their run carries: the source whose pool their step holds
    (``assets.pools.pool_source``), ``derived`` for ``DERIVED_POOL``, or ``rollups`` (the
    last group), so that each run waits for one pool."""
    grouped: dict[str, list[dg.AssetKey]] = {}
    for pool, keys in keys_by_pool(assets, lambda spec: spec.partitions_def is None
                                   and "parquet" in spec.kinds).items():
        group = pool_source(pool) or (DERIVED if pool == DERIVED_POOL else ROLLUPS)
        grouped.setdefault(group, []).extend(keys)
    return dict(sorted(grouped.items(), key=lambda group: group[0] == ROLLUPS))  # it last


def daily_rollups(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec]) -> dg.ScheduleDefinition:
    """The daily schedule over the rollups of ``assets`` (:func:`rollup_keys`): a run per
    group."""
    grouped = rollup_keys(assets)

    @dg.schedule(
        name="daily_rollups",
        cron_schedule=DAILY_CRON,
        execution_timezone=TIMEZONE,
        target=dg.AssetSelection.assets(*(key for keys in grouped.values() for key in keys)),
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=("Daily at 02:00 UTC: rebuild every table over all partitions (each "
                     "source's tables and energy_facts, one run per source; the grid "
                     "intensity, tariffs and the accounting tables in one more; the trust "
                     "checks, waste and quality in one more), so the "
                     "previous UTC day is complete in the rollups."),
    )
    def schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        day = (context.scheduled_execution_time - timedelta(days=1)).date().isoformat()
        return [dg.RunRequest(run_key=f"{day}/{group}", asset_selection=keys,
                              tags={ROLLUP_DAY_TAG: day, PIPELINE_TAG: group})
                for group, keys in grouped.items()]

    return schedule


def weekly_revalidation(job: dg.UnresolvedAssetJobDefinition,
                        partitions: dg.DynamicPartitionsDefinition,
                        newest: int) -> dg.ScheduleDefinition:
    """The weekly schedule running ``job`` over the ``newest`` last partitions of
    ``partitions`` (the job's partitions) in one run; skips while none is registered."""

    @dg.schedule(
        name=f"weekly_revalidation_{partitions.name}",
        cron_schedule=WEEKLY_CRON,
        execution_timezone=TIMEZONE,
        target=job,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=(f"Sundays at 04:00 UTC: {job.name} over the newest {newest} partitions "
                     f"of {partitions.name} (the last registered), validated and computed "
                     "again."),
    )
    def schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        keys = context.instance.get_dynamic_partitions(partitions.name)[-newest:]
        if not keys:
            return dg.SkipReason(f"no partition of {partitions.name} registered yet")
        return dg.RunRequest(tags={RANGE_START: keys[0], RANGE_END: keys[-1],
                                   "joulehouse/partitions": str(len(keys)),
                                   REREAD_TAG: REREAD_ALL})

    return schedule
