"""What the UI reads: a webserver started on 127.0.0.1 over the instance, asked through GraphQL
after a run with one bad repetition, and again after its fix is picked up. (A backfill
launched through GraphQL with a bad repetition, run by the daemon: the end-to-end test,
tests/e2e/test_whole_stack.py.)"""

import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.gpu import VALID_CHECK, GpuHandOut
from definitions import build_definitions
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from tests.conftest import skip_or_fail
from tests.dagster.conftest import QUIET_S, settle, write_started_on
from tests.dagster.webserver import (
    WEBSERVER,
    check_execution,
    dagster_home,
    statuses,
    webserver,
)

#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")
BAD = "lab/power-limit/bert/250W/0"
BAD_DAY = "lab/2020-11-16"  # the bert repetitions' day
GOOD_DAY = "lab/2021-02-03"  # the resnet repetitions', moved there


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
    for seed, repetition in enumerate(sorted((data_root / "power-limit/resnet/200W").iterdir())):
        write_started_on(repetition, "2021-02-03", seed)
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
        keys = sorted(instance.get_dynamic_partitions("gpu_repetition_days"))
        assert keys == [BAD_DAY, GOOD_DAY]

        with webserver(env, tmp_path / "webserver.log") as port:
            # the good day through every per-repetition asset; the bad repetition's failed
            for asset in ("gpu_validated_frames", "gpu_repetition_energy"):
                node = statuses(port, asset)
                partitions = node["assetPartitionStatuses"]
                assert partitions["materializedPartitions"] == [GOOD_DAY], asset
                assert partitions["failedPartitions"] == [BAD_DAY], asset
                assert node["partitionStats"] == {"numMaterialized": 1, "numPartitions": 2,
                                                  "numFailed": 1}, asset
            # the raw files read as there, not as missing data ("100% filled")
            assert statuses(port, "gpu_repetition_files")["partitionStats"][
                "numMaterialized"] == 2
            # the bad day's check result names its day, the bad repetition's file and line
            execution = check_execution(port, "gpu_validated_frames", VALID_CHECK, BAD_DAY)
            assert execution["status"] == "FAILED"
            evaluation = execution["evaluation"]
            assert evaluation["partition"] == BAD_DAY
            assert evaluation["description"].startswith(f"{BAD_DAY}: {gpu_power}:11: ")
            entries = evaluation["entries"]
            assert entries["partition"] == BAD_DAY
            assert entries["file"] == str(gpu_power) and entries["line"] == 11

            gpu_power.write_bytes(original)  # fixed in place
            settle()
            fixed = tick(sensor, instance, {"gpu_source": source}, first.cursor)
            [again] = fixed.run_requests  # one run, the fixed repetition
            assert [event.partition for event in fixed.asset_events] == [BAD_DAY]
            assert GpuHandOut.named_in(again.run_config) == {
                BAD_DAY: [BAD]}
            assert launch_in_process(job, instance, again, sensor.name).success
            for asset in ("gpu_validated_frames", "gpu_repetition_energy"):
                partitions = statuses(port, asset)["assetPartitionStatuses"]
                assert sorted(partitions["materializedPartitions"]) == keys, asset
                assert partitions["failedPartitions"] == [], asset
            execution = check_execution(port, "gpu_validated_frames", VALID_CHECK, BAD_DAY)
            assert execution["status"] == "SUCCEEDED"
            assert execution["evaluation"]["description"] == f"{BAD_DAY}: passed"
