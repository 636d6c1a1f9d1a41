"""What the UI reads: a webserver started on 127.0.0.1 over the instance, asked through GraphQL
after a run with one bad repetition, and again after its fix is picked up; and after a
backfill launched through GraphQL with two bad repetitions, run by the daemon."""

import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from assets.gpu import VALID_CHECK
from definitions import build_definitions
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from tests.conftest import skip_or_fail
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.webserver import (
    WEBSERVER,
    check_execution,
    dagster_home,
    free_port,
    graphql,
    launch_backfill,
    started,
    statuses,
    wait_until_serving,
    webserver,
)

BAD = "lab/power-limit/bert/250W/0"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    return dagster_home(tmp_path, monkeypatch)


def test_the_ui_reads_the_bad_partition_failed_with_its_file_and_line_then_fixed(
        home, data_root, tmp_path):
    if not WEBSERVER.is_file():
        skip_or_fail(f"dagster-webserver not found beside {sys.executable}")
    gpu_power = data_root / BAD.removeprefix("lab/") / "gpu-power.csv"
    original = gpu_power.read_bytes()
    lines = original.decode().splitlines(keepends=True)
    lines[10] = lines[10].split(",")[0] + ",not-a-row\n"  # line 11 of the file
    gpu_power.write_text("".join(lines))
    settle()
    env = {"JOULEHOUSE_GPU_DATA_ROOTS": str(data_root),
           "JOULEHOUSE_WAREHOUSE": str(tmp_path / "warehouse"),
           "JOULEHOUSE_QUIET_PERIOD_S": str(QUIET_S), "JOULEHOUSE_FULL_RESCAN_S": "none"}
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(data_root))],
                                quiet_period_s=QUIET_S, full_rescan_s=None)
    defs = build_definitions(source, Warehouse(root=env["JOULEHOUSE_WAREHOUSE"]))
    sensor, job = defs.resolve_sensor_def(sensor_name("lab")), defs.resolve_job_def(JOB_NAME)

    with dg.DagsterInstance.get() as instance:
        first = tick(sensor, instance, {"gpu_source": source})
        [request] = first.run_requests
        assert not launch_in_process(job, instance, request, sensor.name).success
        keys = sorted(instance.get_dynamic_partitions("gpu_repetitions"))
        good = [key for key in keys if key != BAD]
        assert len(keys) == 6

        with webserver(env, tmp_path / "webserver.log") as port:
            # every good partition through every per-repetition asset; the bad one failed
            for asset in ("gpu_validated_frames", "gpu_repetition_energy"):
                node = statuses(port, asset)
                partitions = node["assetPartitionStatuses"]
                assert sorted(partitions["materializedPartitions"]) == good, asset
                assert partitions["failedPartitions"] == [BAD], asset
                assert node["partitionStats"] == {"numMaterialized": 5, "numPartitions": 6,
                                                  "numFailed": 1}, asset
            # the raw files read as there, not as missing data ("100% filled")
            assert statuses(port, "gpu_repetition_files")["partitionStats"][
                "numMaterialized"] == 6
            # the bad partition's check result names its partition, file and line
            execution = check_execution(port, "gpu_validated_frames", VALID_CHECK, BAD)
            assert execution["status"] == "FAILED"
            evaluation = execution["evaluation"]
            assert evaluation["partition"] == BAD
            assert evaluation["description"].startswith(f"{BAD}: {gpu_power}:11: ")
            entries = evaluation["entries"]
            assert entries["partition"] == BAD
            assert entries["file"] == str(gpu_power) and entries["line"] == 11

            gpu_power.write_bytes(original)  # fixed in place
            settle()
            fixed = tick(sensor, instance, {"gpu_source": source}, first.cursor)
            [again] = fixed.run_requests  # one run, the fixed repetition
            assert [event.partition for event in fixed.asset_events] == [BAD]
            assert launch_in_process(job, instance, again, sensor.name).success
            for asset in ("gpu_validated_frames", "gpu_repetition_energy"):
                partitions = statuses(port, asset)["assetPartitionStatuses"]
                assert sorted(partitions["materializedPartitions"]) == keys, asset
                assert partitions["failedPartitions"] == [], asset
            execution = check_execution(port, "gpu_validated_frames", VALID_CHECK, BAD)
            assert execution["status"] == "SUCCEEDED"
            assert execution["evaluation"]["description"] == f"{BAD}: passed"


BACKFILL_STATUS = """
query($id: String!) { partitionBackfillOrError(backfillId: $id) {
  ... on PartitionBackfill { status } } }"""
#: A bound, not a timing: the daemon evaluates backfills every 30 s and starts each run's
#: process, which loads the code.
BACKFILL_TIMEOUT_S = 600.0


def test_a_backfill_from_the_ui_shows_each_bad_partition_failed_with_its_file_and_line(
        home, data_root, tmp_path):
    """A backfill launched as the UI launches it (GraphQL, run by the daemon in run
    processes, the per-repetition work in two worker processes however few the
    partitions): each bad repetition's partition reads failed with its file and line, every
    good one materialized."""
    if not WEBSERVER.is_file():
        skip_or_fail(f"dagster-webserver not found beside {sys.executable}")
    bad = {BAD: 11, "lab/power-limit/resnet/200W/1": 5}
    files = {}
    for key, line in bad.items():
        files[key] = data_root / key.removeprefix("lab/") / "gpu-power.csv"
        lines = files[key].read_text().splitlines(keepends=True)
        lines[line - 1] = lines[line - 1].split(",")[0] + ",not-a-row\n"
        files[key].write_text("".join(lines))
    settle()
    env = {"JOULEHOUSE_GPU_DATA_ROOTS": str(data_root),
           "JOULEHOUSE_WAREHOUSE": str(tmp_path / "warehouse"),
           "JOULEHOUSE_QUIET_PERIOD_S": str(QUIET_S), "JOULEHOUSE_FULL_RESCAN_S": "none",
           "JOULEHOUSE_STEP_WORKERS": "2", "JOULEHOUSE_STEP_PARTITIONS_PER_WORKER": "1",
           "DAGSTER_EVENT_BATCH_SIZE": "1000",
           "DAGSTER_BIN": str(WEBSERVER.parent), "JOULEHOUSE_DEV_PORT": str(free_port())}
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(data_root))],
                                quiet_period_s=QUIET_S, full_rescan_s=None)
    defs = build_definitions(source, Warehouse(root=env["JOULEHOUSE_WAREHOUSE"]))
    selection = defs.resolve_job_def(JOB_NAME).asset_layer.selected_asset_keys
    with dg.DagsterInstance.get() as instance:
        tick(defs.resolve_sensor_def(sensor_name("lab")), instance, {"gpu_source": source})
        keys = sorted(instance.get_dynamic_partitions("gpu_repetitions"))
        good = [key for key in keys if key not in bad]
        assert len(keys) == 6
    port = int(env["JOULEHOUSE_DEV_PORT"])
    with started(["bash", "deploy/dev.sh"], env, tmp_path / "dev.log") as dev:
        wait_until_serving(dev, port, tmp_path / "dev.log")
        backfill_id = launch_backfill(port, {
            "assetSelection": [{"path": key.path} for key in selection], "partitionNames": keys})
        deadline = time.monotonic() + BACKFILL_TIMEOUT_S
        while time.monotonic() < deadline and graphql(port, BACKFILL_STATUS, {
                "id": backfill_id})["partitionBackfillOrError"]["status"] in (
                    "REQUESTED", "CANCELING"):
            time.sleep(2)
        for asset in ("gpu_validated_frames", "gpu_repetition_energy"):
            node = statuses(port, asset)
            partitions = node["assetPartitionStatuses"]
            assert sorted(partitions["materializedPartitions"]) == good, asset
            assert sorted(partitions["failedPartitions"]) == sorted(bad), asset
            assert node["partitionStats"] == {"numMaterialized": 4, "numPartitions": 6,
                                              "numFailed": 2}, asset
        for key, line in bad.items():
            execution = check_execution(port, "gpu_validated_frames", VALID_CHECK, key)
            assert execution["status"] == "FAILED"
            assert execution["evaluation"]["description"].startswith(
                f"{key}: {files[key]}:{line}: ")
            entries = execution["evaluation"]["entries"]
            assert entries["file"] == str(files[key]) and entries["line"] == line
        for key in good:
            execution = check_execution(port, "gpu_validated_frames", VALID_CHECK, key)
            assert execution["status"] == "SUCCEEDED", key
