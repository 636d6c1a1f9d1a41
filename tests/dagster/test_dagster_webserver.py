"""What the UI reads: a webserver started on 127.0.0.1 over the instance, asked through GraphQL
after a run with one bad repetition, and again after its fix is picked up."""

import shutil
import sys
from pathlib import Path

import dagster as dg
import pytest

from definitions import build_definitions
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from tests.conftest import skip_or_fail
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.webserver import PROJECT, free_port, graphql, started, wait_until_serving

BAD = "lab/power-limit/bert/250W/0"
WEBSERVER = Path(sys.executable).parent / "dagster-webserver"

STATUSES = """
query Statuses($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      partitionStats { numMaterialized numPartitions numFailed }
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses { materializedPartitions failedPartitions }
      }
    }
  }
}"""

CHECK = """
query Check($partition: String!) {
  assetCheckExecutions(assetKey: {path: ["gpu_validated_frames"]}, checkName: "pandera_valid",
                       partition: $partition, limit: 1) {
    status
    evaluation {
      partition
      description
      metadataEntries {
        label
        ... on TextMetadataEntry { text }
        ... on PathMetadataEntry { path }
        ... on IntMetadataEntry { intValue }
      }
    }
  }
}"""


def statuses(port: int, asset: str) -> dict:
    return graphql(port, STATUSES, {"path": [asset]})["assetNodeOrError"]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A DAGSTER_HOME with the project's local instance configuration."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


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

        port = free_port()
        log = tmp_path / "webserver.log"
        command = [str(WEBSERVER), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
        with started(command, env, log) as webserver:
            wait_until_serving(webserver, port, log)
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
            [execution] = graphql(port, CHECK, {"partition": BAD})["assetCheckExecutions"]
            assert execution["status"] == "FAILED"
            evaluation = execution["evaluation"]
            assert evaluation["partition"] == BAD
            assert evaluation["description"].startswith(f"{BAD}: {gpu_power}:11: ")
            entries = {e["label"]: e.get("text") or e.get("path") or e.get("intValue")
                       for e in evaluation["metadataEntries"]}
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
            [execution] = graphql(port, CHECK, {"partition": BAD})["assetCheckExecutions"]
            assert execution["status"] == "SUCCEEDED"
            assert execution["evaluation"]["description"] == f"{BAD}: passed"
