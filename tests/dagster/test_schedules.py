"""The schedules (sensors/schedules.py): what each asks for at a given time. What each asks
for on the example data, the daily run and one weekly run, are in test_dagster_demo.py,
beside the demo they start from."""

from datetime import UTC, datetime

import dagster as dg
from dagster._core.storage.tags import SCHEDULE_NAME_TAG

from assets.reporting import REREAD_ALL, REREAD_TAG
from definitions import SOURCE_JOBS, defs
from sensors.partition_runs import RANGE_END, RANGE_START
from sensors.schedules import ROLLUP_DAY_TAG

WEEKLY = {"weekly_revalidation_gpu_repetition_days": ("gpu_energy_job", "gpu_repetition_days", 7),
          "weekly_revalidation_tau_profile_days": ("tau_profiles_job", "tau_profile_days", 7),
          "weekly_revalidation_powerapi_days": ("powerapi_job", "powerapi_days", 7),
          "weekly_revalidation_geopm_days": ("geopm_job", "geopm_days", 7),
          "weekly_revalidation_cc_job_blocks": ("cc_job", "cc_job_blocks", 12)}
#: The rollups: every table over all partitions (each source's, energy_facts, accounting).
ROLLUPS = {"gpu_setting_energy", "gpu_benchmark_energy", "energy_facts/gpu",
           "powerapi_window_energy", "energy_facts/powerapi", "geopm_report_energy",
           "geopm_region_energy", "energy_facts/geopm", "cc_jobs", "cc_job_energy", "cc_rollup",
           "energy_facts/clustercockpit", "carbon_intensity", "tariffs", "accounting_daily",
           "accounting_monthly", "carbon_per_fact", "cost_per_fact", "trust_checks",
           "waste", "waste_weekly", "fact_quality"}
#: The daily runs: the rollups of each source's pool, by the value of joulehouse/pipeline.
ROLLUP_RUNS = {
    "gpu": {"gpu_setting_energy", "gpu_benchmark_energy", "energy_facts/gpu"},
    "powerapi": {"powerapi_window_energy", "energy_facts/powerapi"},
    "geopm": {"geopm_report_energy", "geopm_region_energy", "energy_facts/geopm"},
    "clustercockpit": {"cc_jobs", "cc_job_energy", "cc_rollup", "energy_facts/clustercockpit"},
    "rollups": {"carbon_intensity", "tariffs", "accounting_daily", "accounting_monthly",
                "carbon_per_fact", "cost_per_fact"},
    "derived": {"trust_checks", "waste", "waste_weekly", "fact_quality"}}


def tick(name: str, instance: dg.DagsterInstance, when: datetime):
    """The schedule ``name`` evaluated at ``when`` as the daemon would."""
    schedule = defs.resolve_schedule_def(name)
    with dg.build_schedule_context(instance=instance, scheduled_execution_time=when) as context:
        return schedule.evaluate_tick(context)


def test_every_schedule_is_in_the_ui_stopped_until_switched_on():
    schedules = {s.name: defs.resolve_schedule_def(s.name) for s in defs.schedules}
    assert set(schedules) == {"daily_rollups", *WEEKLY}
    assert {s.default_status for s in schedules.values()} == {dg.DefaultScheduleStatus.STOPPED}
    assert {s.execution_timezone for s in schedules.values()} == {"UTC"}
    assert schedules["daily_rollups"].cron_schedule == "0 2 * * *"
    for name, (job, _, _) in WEEKLY.items():
        assert (schedules[name].cron_schedule, schedules[name].job_name) == ("0 4 * * 0", job)
    assert {job.name: (partitions.name, newest) for job, partitions, newest in SOURCE_JOBS} == {
        job: (partitions, newest) for job, partitions, newest in WEEKLY.values()}


def test_the_daily_schedule_rebuilds_every_rollup_after_the_previous_day(instance):
    """A run per source, over its rollups alone and tagged as its sensor's runs (one run
    per source at a time: the run queue's limit per value of joulehouse/pipeline; its own
    pool alone), one for the accounting's and one for the tables derived beside it; each run key names the day and the group."""
    schedule = defs.resolve_schedule_def("daily_rollups")
    job = defs.resolve_job_def(schedule.job_name)
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == ROLLUPS
    requests = tick("daily_rollups", instance, datetime(2026, 11, 25, 2, tzinfo=UTC)).run_requests
    assert {request.tags["joulehouse/pipeline"]: {key.to_user_string()
                                                  for key in request.asset_selection}
            for request in requests} == ROLLUP_RUNS
    for request in requests:
        group = request.tags["joulehouse/pipeline"]
        assert request.tags == {ROLLUP_DAY_TAG: "2026-11-24", "joulehouse/pipeline": group,
                                SCHEDULE_NAME_TAG: "daily_rollups"}
        assert request.run_key == f"2026-11-24/{group}"
        pools = {defs.get_assets_def(key).get_op_def_for_asset_key(key).pool
                 for key in request.asset_selection} - {None}
        assert len(pools) == 1, group  # one pool to wait for
    requests = tick("daily_rollups", instance, datetime(2027, 1, 1, 2, tzinfo=UTC)).run_requests
    assert {request.tags[ROLLUP_DAY_TAG] for request in requests} == {"2026-12-31"}


def test_the_weekly_schedules_revalidate_the_newest_partitions_of_each_source(instance):
    """Each run is tagged to read every entry again (joulehouse/reread=all: ClusterCockpit's
    blocks are otherwise read only where their jobs changed)."""
    sunday = datetime(2026, 11, 29, 4, tzinfo=UTC)
    for name, (_, partitions, newest) in WEEKLY.items():
        data = tick(name, instance, sunday)
        assert data.run_requests == [], name
        assert data.skip_message == f"no partition of {partitions} registered yet"
        keys = [f"{partitions}/{index:04d}" for index in range(newest + 7)]
        instance.add_dynamic_partitions(partitions, keys)
        [request] = tick(name, instance, sunday).run_requests
        assert request.tags == {RANGE_START: keys[7], RANGE_END: keys[-1],
                                "joulehouse/partitions": str(newest),
                                REREAD_TAG: REREAD_ALL, SCHEDULE_NAME_TAG: name}, name
        instance.delete_dynamic_partition(partitions, keys[-1])  # fewer than newest left
        instance.delete_dynamic_partition(partitions, keys[-2])
        for key in keys[:7]:
            instance.delete_dynamic_partition(partitions, key)
        [request] = tick(name, instance, sunday).run_requests
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (keys[7], keys[-3])
