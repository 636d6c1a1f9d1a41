"""The end-to-end test of the whole stack, in a real browser (issue 16).

Started by the suite itself with nothing running beforehand (``tests/e2e/stack.py``): a
throwaway PostgreSQL server holding Dagster's storage and TAUdb; the code server,
``dagster-daemon`` and ``dagster-webserver`` as separate processes with the production
``dagster.yaml``; the warehouse on a local S3-compatible object store; the examples of
every source copied into fresh data roots, one PowerAPI report file broken on purpose. The tests below run in order over that one stack (each
starts where the one before left it). The first turns off the accounting's and the derived
tables' automation sensors, which no test here checks; the second, fourth and fifth turn off
through GraphQL the sensors that neither they nor a later test need (the landing sensors of
the sources no longer landed into and the sources' automation sensors; the first, second and
fourth wait until they stay off: ``api.stop_sensors``), so that no test waits in the queue
behind runs it checks nothing of and no idle tick burns CPU:

1. the sensors, turned on through GraphQL, pick up every source; the runs succeed but the
   broken files', each failing its own partition alone, named with its file and line;
   runs, events and partitions are in PostgreSQL, the tables in the warehouse on the
   object store, the trials in the PostgreSQL TAUdb;
2. headless Chromium opens the UI: each source's assets in the asset graph, an asset's
   materialization metadata and plot, the failed partition with its error (screenshots
   kept: ``tests/e2e/browser.py`` says where);
3. the PowerAPI file fixed in place is materialized by the next ticks;
4. PostgreSQL stopped in the middle of the run of a new GPU run folder and started again:
   the run fails, is retried (``run_retries``) and completes; nothing lost, no trial
   duplicated;
5. a backfill launched through GraphQL, as the UI's "Materialize all" launches it, covers
   its partitions in a handful of runs: the GPU repetition still broken fails again alone,
   its check naming its file and line, every other partition materialized;

and on the way out every process is stopped by its process group id.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from object_store import missing_requirement as missing_object_store
from postgres_server import missing_requirement as missing_postgres

from assets.gpu import VALID_CHECK
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from tests.conftest import skip_or_fail
from tests.dagster.automation_sensors import AUTOMATION
from tests.dagster.webserver import check_execution, statuses
from tests.e2e import api
from tests.e2e.browser import ARTEFACTS_ENV, chromium
from tests.e2e.browser import missing_requirement as missing_browser
from tests.e2e.stack import LOCATION, QUIET_S, DataFolders, Stack, running_stack, wait_for

#: Bounds of each phase's waits, not timings: every run is a new process that loads the
#: code, and the production pool lets one run at a time rebuild the tables.
PHASE_TIMEOUT_S = 600.0
#: How long PostgreSQL is down in the middle of a run: longer than dagster-postgres's
#: connection retries (about 6 s), so the run fails rather than waiting it out. The run
#: fails only where two event writes in a row give up (a step's event, then its
#: STEP_RETRY's: the RetryPolicy would otherwise run the step again within the run, which
#: then succeeds with no run retry to see), each after about 6 s, from the step's first
#: write after the stop: hence the margin.
OUTAGE_S = 30.0

#: Each landing or data-root sensor and the job it asks for.
SENSOR_JOBS = {"gpu_repetitions_lab": "gpu_energy_job", "tau_profile_landing": "tau_profiles_job",
               "geopm_report_landing": "geopm_job", "powerapi_landing": "powerapi_job",
               "cc_job_archive": "cc_job"}
#: The automation sensors (on by default) no test needs: no test here checks the accounting
#: or the tables derived beside it (the soak's short mode does), so the first turns them off
#: before its landings, whose runs would share the CPUs with theirs.
NEVER_NEEDED = ("joulehouse_automation_accounting", "joulehouse_automation_derived")
#: The sensors the second test turns off, no later test needing them.
#: The sources' and the trials' automation sensors are needed by the first alone (the
#: PowerAPI trials are the trials sensor's runs); afterwards they would only queue runs no
#: test checks (tables) ahead of those the tests wait for.
NOT_NEEDED_AFTER_THE_FIRST = ("tau_profile_landing", "geopm_report_landing", "cc_job_archive",
                              *(name for name in AUTOMATION if name not in NEVER_NEEDED))
#: The examples' partitions, by partitions definition.
PARTITIONS = {"gpu_repetition_days": 1, "tau_profile_days": 1, "geopm_days": 2,
              "powerapi_days": 1, "cc_job_blocks": 3}
#: The GPU run folder the PostgreSQL test lands (two repetitions, started on a day of their
#: own: a hand-out of the broken repetition's day would recheck it, and fail), and the GPU
#: partitions from then on (the backfill, after it, covers them too).
NEW_GPU_RUN = {"power-limit": {"bert": ["300W"]}}
NEW_GPU_START = "2021-02-03 10:00:00"
GPU_PARTITIONS_WITH_NEW_RUN = PARTITIONS["gpu_repetition_days"] + 1
#: The asset groups of the sources and the assets the graph shows in each.
SOURCE_GROUPS = ("gpu_benchmarks", "taudb", "geopm", "powerapi", "clustercockpit",
                 "energy_facts", "accounting")
#: A table over all partitions of each source, each kept per entry (a Delta table in the
#: bucket, read through read_table as every reader does).
TABLES = ("gpu_setting_energy", "gpu_benchmark_energy", "geopm_region_energy",
          "powerapi_window_energy", "cc_jobs")
#: The sources with rows in energy_facts (a table kept per entry: read through read_table).
FACT_SOURCES = {"gpu-benchmark", "geopm", "powerapi", "clustercockpit"}

#: The one sensor and day of the PowerAPI examples (one trial).
POWERAPI_DAY = "sensor_test/2021-01-13"
#: The broken inputs: a negative power on line 3 of the JSON-lines power reports (fixed in
#: place by the third test), and a row without its power on line 11 of a GPU repetition's
#: gpu-power.csv (broken throughout: the other repetition of its run keeps the run's trial).
BAD = "powerapi/2021-01-13"  # the day of the bundled PowerAPI entries, the broken one's too
BAD_LINE = '"power":0.531164'
BAD_GPU, BAD_GPU_LINE = "lab/power-limit/bert/250W/0", 11
BAD_GPU_DAY = "lab/2020-11-16"  # the bundled repetitions' day


def break_inputs(data: DataFolders) -> None:
    power = data.powerapi / "power.jsonl"
    lines = power.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace(BAD_LINE, BAD_LINE.replace(":", ":-"))
    power.write_text("".join(lines))
    gpu_power = _bad_gpu_file(data)
    lines = gpu_power.read_text().splitlines(keepends=True)
    lines[BAD_GPU_LINE - 1] = lines[BAD_GPU_LINE - 1].split(",")[0] + ",not-a-row\n"
    gpu_power.write_text("".join(lines))


def _bad_gpu_file(data: DataFolders) -> Path:
    return data.gpu / BAD_GPU.removeprefix("lab/") / "gpu-power.csv"


def assert_bad_gpu_repetition_failed(stack: Stack, partitions: int) -> None:
    """The broken GPU repetition's day failed alone (of ``partitions``), its check naming the
    repetition's file and line."""
    for asset in ("gpu_validated_frames", "gpu_repetition_energy"):
        node = statuses(stack.port, asset)
        assert node["assetPartitionStatuses"]["failedPartitions"] == [BAD_GPU_DAY], asset
        assert node["partitionStats"] == {"numMaterialized": partitions - 1,
                                          "numPartitions": partitions,
                                          "numFailed": 1}, asset
    check = check_execution(stack.port, "gpu_validated_frames", VALID_CHECK, BAD_GPU_DAY)
    assert check["status"] == "FAILED"
    gpu_power = _bad_gpu_file(stack.data)
    assert check["evaluation"]["description"].startswith(
        f"{BAD_GPU_DAY}: {gpu_power}:{BAD_GPU_LINE}: ")
    assert check["evaluation"]["entries"]["file"] == str(gpu_power)
    assert check["evaluation"]["entries"]["line"] == BAD_GPU_LINE


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    """Where the screenshots, and the processes' logs once the stack stopped, are kept."""
    folder = Path(os.environ.get(ARTEFACTS_ENV) or tmp_path_factory.mktemp("screenshots"))
    print(f"\nscreenshots and logs in {folder}")
    return folder


@pytest.fixture(scope="module")
def stack(tmp_path_factory, artefacts) -> Stack:
    for reason in (missing_postgres(), missing_object_store(), missing_browser()):
        if reason:
            skip_or_fail(reason)
    started = time.monotonic()
    base = tmp_path_factory.mktemp("stack")
    try:
        with running_stack(base, break_inputs) as the_stack:
            yield the_stack
    finally:
        shutil.copytree(base / "logs", artefacts / "logs", dirs_exist_ok=True)
    print(f"\nend-to-end stack: {time.monotonic() - started:.0f} s from start to stop")


def _ended(stack: Stack, job: str) -> list[dict]:
    """The ended runs of ``job``, newest first, once none of its runs is in flight."""
    runs = api.runs(stack.port, pipelineName=job)
    if any(run["status"] in api.IN_FLIGHT for run in runs):
        return []
    return runs


def _example_trials(stack: Stack) -> list[str]:
    """The source keys of the examples' trials, sorted: each ClusterCockpit job's folder,
    GEOPM report, GPU run folder and TAU profile set, and PowerAPI's sensor day."""
    data = stack.data
    return sorted([*(str(job) for job in data.archive.glob("*/*/*/*") if job.is_dir()),
                   *(str(report) for report in data.geopm.glob("*.report")),
                   *{str(repetition.parent) for repetition in data.gpu.glob("*/*/*/*")},
                   *(str(profiles) for profiles in data.tau.iterdir() if profiles.is_dir()),
                   f"{stack.tables.location('powerapi_window_energy')}#{POWERAPI_DAY}"])


def test_the_sensors_pick_up_every_source_and_runs_partitions_and_trials_are_stored(stack):
    sensors = wait_for("the code location to load", lambda: api.sensors_loaded(stack.port),
                       PHASE_TIMEOUT_S, lambda: stack.log_tail("code-server"))
    assert sorted(sensors) == sorted([*SENSOR_JOBS, "intensity_and_tariff_landing",
                                      *AUTOMATION])
    api.stop_sensors(stack.port, NEVER_NEEDED, PHASE_TIMEOUT_S)
    for sensor in SENSOR_JOBS:
        api.start_sensor(stack.port, sensor)

    ended = {job: wait_for(f"a run of {job}", lambda job=job: _ended(stack, job),
                           PHASE_TIMEOUT_S, lambda: stack.log_tail("daemon"))
             for job in SENSOR_JOBS.values()}
    # one run per source; the broken files' runs failed (a failure of its data is not
    # retried), every other succeeded
    assert {job: [run["status"] for run in runs] for job, runs in ended.items()} == {
        job: ["FAILURE" if job in ("powerapi_job", "gpu_energy_job") else "SUCCESS"]
        for job in ended}

    # the broken file failed its day, the day's other two entries went through
    frames = statuses(stack.port, "powerapi_validated_frames")["assetPartitionStatuses"]
    assert frames["failedPartitions"] == [BAD]
    assert frames["materializedPartitions"] == []
    assert sorted(stack.tables.partition_keys("powerapi_report_energy")) == [
        "powerapi/hwpc-csv", "powerapi/smartwatts_timeline.jsonl"]
    check = check_execution(stack.port, "powerapi_validated_frames", VALID_CHECK, BAD)
    assert check["status"] == "FAILED"
    assert check["evaluation"]["entries"]["file"] == str(stack.data.powerapi / "power.jsonl")
    assert check["evaluation"]["entries"]["line"] == 3
    assert_bad_gpu_repetition_failed(stack, PARTITIONS["gpu_repetition_days"])
    for asset in ("geopm_validated_frames", "cc_block_tables"):
        node = statuses(stack.port, asset)["partitionStats"]
        assert node["numFailed"] == 0 and node["numMaterialized"] == node["numPartitions"], (
            asset, node)

    # in PostgreSQL: every run the API lists, their events, the registered partitions
    all_runs = api.runs(stack.port)
    assert stack.sql("SELECT count(*) FROM runs") == [(len(all_runs),)]
    materialized = dict(stack.sql(
        "SELECT asset_key, count(*) FROM event_logs WHERE dagster_event_type = "
        "'ASSET_MATERIALIZATION' GROUP BY asset_key"))
    # (the GPU repetitions' and the PowerAPI files' one day each failed on its broken
    # entry: no materialization of their per-day assets, while their tables went through)
    for asset in ("gpu_setting_energy", "tau_profile_trials", "geopm_validated_frames",
                  "powerapi_window_energy", "cc_block_tables"):
        assert materialized.get(f'["{asset}"]', 0) >= 1, asset
    assert dict(stack.sql("SELECT partitions_def_name, count(*) FROM dynamic_partitions "
                          "GROUP BY partitions_def_name")) == PARTITIONS

    # the tables over every partition of each source, in the warehouse's bucket
    tables = stack.tables
    for table in TABLES:
        assert len(tables.read_table(table)) > 0, table
    assert set(tables.read_table("energy_facts")["source"]) == FACT_SOURCES

    # the trials of every source in the PostgreSQL TAUdb, each once
    expected = _example_trials(stack)
    assert wait_for("the trials of every source", lambda: stack.trial_keys() == expected,
                    PHASE_TIMEOUT_S, lambda: f"{stack.trial_keys()} != {expected}")


def test_the_ui_in_chromium_shows_every_source_metadata_a_plot_and_the_failed_partition(
        stack, artefacts, tmp_path):
    api.stop_sensors(stack.port, NOT_NEEDED_AFTER_THE_FIRST, PHASE_TIMEOUT_S)
    assert stack.graphql("mutation { setNuxSeen }")["setNuxSeen"]  # the newsletter dialog
    with chromium(stack.url, artefacts, tmp_path / "profile") as browser:
        # the asset graph: each source's group shows every one of its assets
        for group in SOURCE_GROUPS:
            names = api.group_assets(stack.port, group)  # as the graph shows them
            browser.open(f"/locations/{LOCATION}/asset-groups/{group}/lineage",
                         "Materialize")
            assert browser.graph_names(names) == set(names), group
            browser.shot(f"graph-{group}")

        # an asset page: its latest materialization's metadata (4 settings), and its plot
        browser.open("/assets/gpu_benchmark_energy?view=events", "dagster/row_count")
        shown = browser.text()
        assert re.search(r"dagster/row_count\s+4\s", shown)
        for label in ("dagster/column_schema", "energy_vs_time", "877MHz,1065MHz", "150W"):
            assert label in shown, label
        browser.shot("asset-gpu_benchmark_energy")
        browser.page.get_by_text("[Show Markdown]").first.click()
        plot = browser.page.locator("img[src^='data:image/png']").first
        plot.wait_for()
        assert len(plot.get_attribute("src")) > 10_000  # a PNG of some size, inline
        browser.shot("asset-gpu_benchmark_energy-plot")

        # the failed partition, and its run's log with the error: file, line, field
        browser.open(f"/assets/powerapi_validated_frames?view=partitions&partition={BAD}",
                     "did not materialize this asset")
        assert "Failed (1)" in browser.text()
        browser.shot("failed-partition")
        browser.page.get_by_text("View logs").first.click()
        error = (f"{BAD}: {stack.data.powerapi / 'power.jsonl'}:3: power: "
                 "negative or missing power -0.531164")
        browser.page.get_by_text(error).first.wait_for()
        browser.shot("failed-partition-log")
    assert sorted(path.name for path in artefacts.glob("*.png")) == sorted(
        [*(f"graph-{group}.png" for group in SOURCE_GROUPS), "failed-partition.png",
         "failed-partition-log.png",
         "asset-gpu_benchmark_energy.png", "asset-gpu_benchmark_energy-plot.png"])


def test_the_broken_file_fixed_in_place_is_materialized_by_the_next_ticks(stack):
    [failed] = api.runs(stack.port, pipelineName="powerapi_job")
    power = stack.data.powerapi / "power.jsonl"
    power.write_text(power.read_text().replace(BAD_LINE.replace(":", ":-"), BAD_LINE))
    time.sleep(QUIET_S + 0.1)  # the quiet period: only waiting ages a file

    def fixed_run() -> dict | None:
        runs = _ended(stack, "powerapi_job")
        return runs[0] if len(runs) == 2 else None

    run = wait_for("the fixed file's run", fixed_run, PHASE_TIMEOUT_S,
                   lambda: stack.log_tail("daemon"))
    assert run["status"] == "SUCCESS" and run["runId"] != failed["runId"]
    assert run["tags"]["dagster/asset_partition_range_start"] == BAD
    assert run["tags"]["dagster/asset_partition_range_end"] == BAD
    for asset in ("powerapi_validated_frames", "powerapi_report_energy"):
        assert statuses(stack.port, asset)["partitionStats"] == {
            "numMaterialized": 1, "numPartitions": 1, "numFailed": 0}, asset
    check = check_execution(stack.port, "powerapi_validated_frames", VALID_CHECK, BAD)
    assert check["status"] == "SUCCEEDED"


def test_postgres_restarted_in_the_middle_of_a_run_the_run_is_retried_and_completes(stack):
    # only the GPU data root's sensor from here
    api.stop_sensors(stack.port, ["powerapi_landing"], PHASE_TIMEOUT_S)
    before_runs = {run["runId"] for run in api.runs(stack.port)}
    events_before = stack.sql("SELECT count(*) FROM event_logs")[0][0]
    trials_before = stack.trial_keys()
    # a new GPU run folder (two repetitions) lands: one run of the GPU pipeline
    write_data_root(stack.data.gpu, NEW_GPU_RUN,
                    base=RepetitionSpec(duration_s=60.0, start_utc=NEW_GPU_START))

    def started() -> dict | None:
        return next((run for run in api.runs(stack.port, pipelineName="gpu_energy_job")
                     if run["runId"] not in before_runs and run["status"] == "STARTED"), None)

    run = wait_for("the new GPU run to start", started, PHASE_TIMEOUT_S,
                   lambda: stack.log_tail("daemon"))
    stack.postgres.stop("fast")
    time.sleep(OUTAGE_S)  # down for a fixed time: that is what is tested
    stack.postgres.start()

    def retried() -> list[dict] | None:
        runs = api.unless_unavailable(
            lambda: api.runs(stack.port, pipelineName="gpu_energy_job")) or []
        runs = [r for r in runs if r["runId"] == run["runId"]
                or r["tags"].get("dagster/root_run_id") == run["runId"]]
        return runs if len(runs) > 1 and runs[0]["status"] not in api.IN_FLIGHT else None

    def logs() -> str:
        return stack.log_tail("daemon") + stack.log_tail("webserver")

    attempts = wait_for("the run's retry to end", retried, PHASE_TIMEOUT_S, logs)
    assert [r["status"] for r in attempts] == ["SUCCESS", "FAILURE"], attempts
    assert attempts[0]["tags"]["dagster/parent_run_id"] == run["runId"]
    # nothing lost: every earlier run and event still there; the new run's trial once
    runs = wait_for("the runs", lambda: api.unless_unavailable(lambda: api.runs(stack.port)),
                    PHASE_TIMEOUT_S, logs)
    assert before_runs <= {r["runId"] for r in runs}
    assert stack.sql("SELECT count(*) FROM event_logs")[0][0] > events_before
    new_run = str(stack.data.gpu / "power-limit" / "bert" / "300W")
    assert stack.trial_keys() == sorted([*trials_before, new_run])
    energy = wait_for("the webserver to answer", lambda: api.unless_unavailable(
        lambda: statuses(stack.port, "gpu_repetition_energy")), PHASE_TIMEOUT_S, logs)
    assert energy["partitionStats"] == {"numMaterialized": GPU_PARTITIONS_WITH_NEW_RUN - 1,
                                        "numPartitions": GPU_PARTITIONS_WITH_NEW_RUN,
                                        "numFailed": 1}  # the broken one


#: The backfill: each source's per-partition assets, every partition.
BACKFILL_ASSETS = ["gpu_validated_frames", "gpu_repetition_energy", "geopm_validated_frames",
                   "geopm_host_energy", "powerapi_validated_frames", "powerapi_report_energy"]


def test_a_backfill_launched_through_graphql_runs_its_partitions_in_a_handful_of_runs(stack):
    # no sensor's run from here; the webserver's first answer after the PostgreSQL test
    # may still be a 500 (a connection of its storage lost in the restart)
    wait_for("the GPU sensor to be turned off", lambda: api.unless_unavailable(
        lambda: api.stop_sensor(stack.port, "gpu_repetitions_lab") or True),
        PHASE_TIMEOUT_S, lambda: stack.log_tail("webserver"))
    backfill_id = api.launch_backfill(stack.port, BACKFILL_ASSETS)

    def ended() -> dict | None:
        backfill = api.backfill(stack.port, backfill_id)
        return backfill if backfill["status"] not in ("REQUESTED", "CANCELING") else None

    backfill = wait_for("the backfill to end", ended, PHASE_TIMEOUT_S,
                        lambda: stack.log_tail("daemon"))
    assert backfill["status"] == "COMPLETED_FAILED", backfill  # the GPU run failed
    runs = backfill["runs"]
    partitions = GPU_PARTITIONS_WITH_NEW_RUN + sum(
        PARTITIONS[name] for name in ("geopm_days", "powerapi_days"))
    print(f"backfill: {len(runs)} run(s) for {partitions} partitions")
    # one run per source's pipeline (each a single-run backfill): the GPU one failed
    assert sorted(run["status"] for run in runs) == ["FAILURE", "SUCCESS", "SUCCESS"]
    assert_bad_gpu_repetition_failed(stack, GPU_PARTITIONS_WITH_NEW_RUN)
    for asset in BACKFILL_ASSETS[2:]:
        assert statuses(stack.port, asset)["partitionStats"]["numFailed"] == 0, asset
