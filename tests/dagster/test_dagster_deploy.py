"""The instance configurations in deploy/ load, and keep their storage where they say."""

import shutil
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import dagster as dg
import yaml
from dagster._core.events import RunFailureReason
from dagster._core.execution.retries import auto_reexecution_should_retry_run
from dagster._core.instance.config import PoolGranularity
from dagster._core.scheduler.instigation import InstigatorType, TickStatus
from dagster._core.storage.tags import BACKFILL_ID_TAG
from dagster._core.utils import make_new_run_id
from dagster._utils.tags import TagConcurrencyLimitsCounter

from assets.pools import pool_source, tables_pool
from definitions import defs
from tests.dagster.webserver import (
    HOST,
    STOP_TIMEOUT_S,
    dagster_home,
    free_port,
    graphql,
    group_alive,
    started,
    wait_for_code_server,
    wait_until_serving,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PIPELINE_TAG = "joulehouse/pipeline"
BIN = Path(sys.executable).parent


def test_local_instance_stores_everything_in_dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("gpu_repetition_days", ["lab/2020-11-16"])
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert type(instance.event_log_storage).__name__ == "BatchedSqliteEventLogStorage"
        assert_one_run_per_source_and_one_table_rebuild_at_a_time(instance)
    assert (home / "history" / "runs.db").is_file()
    assert (home / "history" / "runs" / "index.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # nothing in the cwd


def test_production_instance_uses_postgres(tmp_path, monkeypatch, postgres_url):
    url = urlparse(postgres_url)
    for name, value in {"HOST": url.hostname, "PORT": str(url.port), "DB": url.path[1:],
                        "USER": url.username, "PASSWORD": ""}.items():
        monkeypatch.setenv(f"DAGSTER_PG_{name}", value)
    shutil.copy(DEPLOY / "production" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert {type(storage).__name__ for storage in (
            instance.run_storage, instance.event_log_storage, instance.schedule_storage)} == {
            "KeptSchemaPostgresRunStorage", "BatchedPostgresEventLogStorage",
            "KeptSchemaPostgresScheduleStorage"}
        # a set no other test of the worker's database adds to (it is shared per worker)
        instance.add_dynamic_partitions("deploy_check", ["lab/e/b/150W/0"])
        assert instance.get_dynamic_partitions("deploy_check") == ["lab/e/b/150W/0"]
        assert instance.get_runs_count() == 0
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
        # a pass's runs launched by 4 threads at once, as the Helm values say
        assert (instance.run_coordinator.dequeue_use_threads,
                instance.run_coordinator.dequeue_num_workers) == (True, 4)
        assert_one_run_per_source_and_one_table_rebuild_at_a_time(instance)
        concurrency = instance.get_concurrency_config()
        assert concurrency.run_queue_config.max_concurrent_runs == 8
        assert concurrency.pool_config.pool_granularity == PoolGranularity.RUN
        assert (instance.run_retries_enabled, instance.run_retries_max_retries,
                instance.run_retries_retry_on_asset_or_op_failure) == (True, 2, False)
        assert instance.run_monitoring_enabled
        assert (instance.run_monitoring_start_timeout_seconds,
                instance.run_monitoring_cancel_timeout_seconds,
                instance.run_monitoring_max_resume_run_attempts,
                instance.run_monitoring_poll_interval_seconds) == (120, 300, 0, 15)
        assert instance.get_settings("sensors") == {
            "use_threads": True, "num_workers": 8, "num_submit_workers": 4}
        assert instance.get_settings("schedules") == {"use_threads": True, "num_workers": 4}
        assert instance.get_settings("backfills") == {
            "use_threads": True, "num_workers": 4, "num_submit_workers": 4}
        # the asset daemon's, which evaluates the automation sensors (asset_daemon.py)
        assert {key: instance.get_settings("auto_materialize")[key]
                for key in ("use_threads", "num_workers")} == {"use_threads": True,
                                                               "num_workers": 4}
        assert instance.get_tick_retention_settings(InstigatorType.SENSOR) == {
            TickStatus.SKIPPED: 7, TickStatus.FAILURE: 30, TickStatus.SUCCESS: -1,
            TickStatus.STARTED: -1}
        assert set(instance.get_tick_retention_settings(
            InstigatorType.SCHEDULE).values()) == {90}
        assert not instance.telemetry_enabled
        assert_transient_failures_are_retried(instance)


def assert_transient_failures_are_retried(instance: dg.DagsterInstance) -> None:
    """Which failed runs Dagster's retry daemon re-executes under this instance: all but a
    step's failure (bad input), unless the run's tag asks for it."""
    retried = set()
    for reason in RunFailureReason:
        run = instance.add_run(dg.DagsterRun(job_name="gpu_energy_job", run_id=make_new_run_id(),
                                             status=dg.DagsterRunStatus.FAILURE))
        if auto_reexecution_should_retry_run(instance, run, reason):
            retried.add(reason)
    assert retried == set(RunFailureReason) - {RunFailureReason.STEP_FAILURE}
    asked = instance.add_run(dg.DagsterRun(
        job_name="gpu_energy_job", run_id=make_new_run_id(), status=dg.DagsterRunStatus.FAILURE,
        tags={"dagster/retry_on_asset_or_op_failure": "true"}))
    assert auto_reexecution_should_retry_run(instance, asked, RunFailureReason.STEP_FAILURE)


def test_production_instance_takes_every_credential_from_the_environment():
    config = yaml.safe_load((DEPLOY / "production" / "dagster.yaml").read_text())
    database = config["storage"]["custom"]["config"]["postgres_db"]
    assert {key: value for key, value in database.items() if key != "scheme"} == {
        name: {"env": f"DAGSTER_PG_{variable}"} for name, variable in (
            ("hostname", "HOST"), ("port", "PORT"), ("db_name", "DB"), ("username", "USER"),
            ("password", "PASSWORD"))}


def assert_one_run_per_source_and_one_table_rebuild_at_a_time(
        instance: dg.DagsterInstance) -> None:
    """One run per value of ``joulehouse/pipeline`` (per source), decided by Dagster's own
    counter over runs tagged as each source's job tags them, and the pool of limit 1."""
    concurrency = instance.get_concurrency_config()
    assert concurrency.pool_config.default_pool_limit == 1
    limits = concurrency.run_queue_config.tag_concurrency_limits
    assert limits[0] == {"key": PIPELINE_TAG, "value": {"applyLimitPerUniqueValue": True},
                         "limit": 1}
    sources = {job.name: job.tags[PIPELINE_TAG] for job in defs.jobs}
    assert sorted(sources.values()) == ["clustercockpit", "geopm", "gpu", "powerapi",
                                        "tau-profiles"]
    in_progress = [dg.DagsterRun(job_name="gpu_energy_job", tags={PIPELINE_TAG: "gpu"})]
    counter = TagConcurrencyLimitsCounter(limits, in_progress)
    blocked = {source for source in sources.values()
               if counter.is_blocked(dg.DagsterRun(job_name="j", tags={PIPELINE_TAG: source}))}
    assert blocked == {"gpu"}


def test_backfill_runs_without_a_source_tag_are_limited_together():
    config = yaml.safe_load((DEPLOY / "production" / "dagster.yaml").read_text())
    limits = config["concurrency"]["runs"]["tag_concurrency_limits"]
    running = [dg.DagsterRun(job_name="__ASSET_JOB", tags={BACKFILL_ID_TAG: backfill})
               for backfill in ("a", "a", "b", "c")]
    counter = TagConcurrencyLimitsCounter(limits, running)
    assert counter.is_blocked(dg.DagsterRun(job_name="__ASSET_JOB", tags={BACKFILL_ID_TAG: "d"}))
    assert not TagConcurrencyLimitsCounter(limits, running[:3]).is_blocked(
        dg.DagsterRun(job_name="__ASSET_JOB", tags={BACKFILL_ID_TAG: "d"}))


def test_each_source_step_is_in_its_own_pool():
    """Each source's step is in its source's pool (limit 1: one run at a time writes that
    source's tables), so the sources' steps run beside each other; the GPU's holds its
    per-repetition assets, tables, facts and TAUdb trials."""
    pools = {key.to_user_string(): asset.get_op_def_for_asset_key(key).pool
             for asset in defs.assets if isinstance(asset, dg.AssetsDefinition)
             for key in asset.keys}
    assert {key for key, pool in pools.items() if pool == tables_pool("gpu")} == {
        "gpu_validated_frames", "gpu_repetition_energy", "gpu_setting_energy",
        "gpu_benchmark_energy", "energy_facts/gpu", "taudb_trials"}
    facts_pools = {key: pool for key, pool in pools.items() if key.startswith("energy_facts/")}
    assert facts_pools == {"energy_facts/gpu": "joulehouse_tables_gpu",
                           "energy_facts/geopm": "joulehouse_tables_geopm",
                           "energy_facts/powerapi": "joulehouse_tables_powerapi",
                           "energy_facts/clustercockpit": "joulehouse_tables_clustercockpit"}
    # each pool is named after the tag its source's runs carry (the daily rollups' runs
    # take their tag from the pool: sensors/schedules.py)
    for job in ("gpu_energy_job", "geopm_job", "powerapi_job", "cc_job"):
        resolved = defs.resolve_job_def(job)
        [pool] = {pool for pool in (resolved.asset_layer.get(key).pools
                                    for key in resolved.asset_layer.executable_asset_keys)
                  for pool in pool}
        assert pool_source(pool) == resolved.tags["joulehouse/pipeline"], job


WORKSPACE = """
{
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        displayMetadata { key value }
        locationOrLoadError {
          __typename
          ... on PythonError { message }
          ... on RepositoryLocation {
            repositories {
              assetNodes { id }
              sensors { name }
              schedules { name scheduleState { status } }
            }
          }
        }
      }
    }
  }
}"""


def test_the_production_workspace_loads_from_a_code_server(tmp_path, monkeypatch):
    """The command deploy/README.md gives starts a code server; the webserver over
    deploy/production/workspace.yaml reaches it and loads every asset, sensor and schedule."""
    dagster_home(tmp_path, monkeypatch)
    port = free_port()
    env = {"JOULEHOUSE_CODE_SERVER_HOST": HOST, "JOULEHOUSE_CODE_SERVER_PORT": str(port)}
    code_server = [str(BIN / "dagster"), "code-server", "start", "-h", HOST, "-p", str(port),
                   "-f", "definitions.py", "--location-name", "joulehouse"]
    with started(code_server, env, tmp_path / "code-server.log") as server:
        wait_for_code_server(server, port, tmp_path / "code-server.log")
        web_port, log = free_port(), tmp_path / "webserver.log"
        command = [str(BIN / "dagster-webserver"), "-w", "deploy/production/workspace.yaml",
                   "-h", HOST, "-p", str(web_port)]
        with started(command, env, log) as web:
            wait_until_serving(web, web_port, log)
            [entry] = graphql(web_port, WORKSPACE)["workspaceOrError"]["locationEntries"]
    assert entry["name"] == "joulehouse"
    assert {item["key"]: item["value"] for item in entry["displayMetadata"]}["port"] == str(port)
    location = entry["locationOrLoadError"]
    assert location["__typename"] == "RepositoryLocation", location
    [repository] = location["repositories"]
    assert len(repository["assetNodes"]) == len(defs.resolve_asset_graph().get_all_asset_keys())
    assert {sensor["name"] for sensor in repository["sensors"]} == {s.name for s in defs.sensors}
    assert {(schedule["name"], schedule["scheduleState"]["status"])
            for schedule in repository["schedules"]} == {
        (schedule.name, "STOPPED") for schedule in defs.schedules}
    deadline = time.monotonic() + STOP_TIMEOUT_S  # killed by their group ids on the way out
    while (group_alive(server.pid) or group_alive(web.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not group_alive(server.pid) and not group_alive(web.pid)
