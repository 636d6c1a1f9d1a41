"""The schedules: the rollups refreshed every day, every source re-validated every week.

Both kinds start STOPPED, as the sensors do: an operator switches them on under
Automation once the data roots are configured (the automation sensor already keeps the
tables current as data arrives; the schedules are the periodic guarantee).

- ``daily_rollups`` (every day at 02:00 UTC): one run rebuilding the rollups, i.e. every
  table over all partitions (unpartitioned assets stored as Parquet): each source's
  tables (GPU per setting and benchmark, GEOPM per report and region, the PowerAPI
  window table, ClusterCockpit's jobs, job energy and ``cc_rollup``), each source's
  ``energy_facts``, the grid intensity and the accounting tables. The tables are whole
  (not partitioned by day), so the run rebuilds them entirely; it runs once the previous
  UTC day has closed, with two hours for late files, and its tag
  ``joulehouse/rollup_day`` names that day (the schedule's own date minus one).
- ``weekly_revalidation_<partitions>`` (Sundays at 04:00 UTC), one per source, since a
  Dagster run covers one partitions definition: a run of the source's own job over its
  newest partitions, the last ``newest`` registered (a sensor registers or moves the
  partitions it hands out to the end of the set: ``sensors/partition_runs.py``), so
  they are validated again against the current schemas and code, and what they store
  follows. The run carries the job's tag ``joulehouse/pipeline``, so it waits for the
  source's sensor run (deploy/production/dagster.yaml).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

import dagster as dg

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


def rollup_keys(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec]) -> list[dg.AssetKey]:
    """The rollups among ``assets``: the materializable assets without partitions that
    are stored as Parquet (kind ``parquet``), in the order given."""
    materialized = [asset for asset in assets
                    if isinstance(asset, dg.AssetsDefinition) and asset.is_executable]
    return [spec.key for asset in materialized for spec in asset.specs
            if spec.partitions_def is None and "parquet" in spec.kinds]


def daily_rollups(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec]) -> dg.ScheduleDefinition:
    """The daily schedule over the rollups of ``assets`` (:func:`rollup_keys`)."""

    @dg.schedule(
        name="daily_rollups",
        cron_schedule=DAILY_CRON,
        execution_timezone=TIMEZONE,
        target=dg.AssetSelection.assets(*rollup_keys(assets)),
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=("Daily at 02:00 UTC: rebuild every table over all partitions (each "
                     "source's tables and energy_facts, the grid intensity, the accounting "
                     "tables), so the previous UTC day is complete in the rollups."),
    )
    def schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        day = (context.scheduled_execution_time - timedelta(days=1)).date()
        return dg.RunRequest(tags={ROLLUP_DAY_TAG: day.isoformat(), PIPELINE_TAG: ROLLUPS})

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
                                   "joulehouse/partitions": str(len(keys))})

    return schedule
