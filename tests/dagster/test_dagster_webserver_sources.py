"""What the UI reads for the landing sources (GEOPM reports, PowerAPI report files,
ClusterCockpit job-id blocks): one webserver over the instance, asked through GraphQL after
each source's sensor run with one bad input, and again after the fixes are picked up."""

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from assets.clustercockpit import CONFORMANCE_CHECK, LOADS_CHECK, READ_CHECK
from assets.gpu import COMPUTED_CHECK, VALID_CHECK
from definitions import (
    EXAMPLE_CC_ARCHIVE,
    EXAMPLE_GEOPM_REPORTS,
    EXAMPLE_POWERAPI,
    build_definitions,
)
from joulehouse.clustercockpit.generator import JobSpec, write_job
from joulehouse.clustercockpit.layout import job_folder
from resources import (
    ClusterCockpitArchive,
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    Warehouse,
)
from sensors import clustercockpit, geopm, powerapi
from sensors.local import launch_in_process, tick
from sensors.partition_runs import RANGE_END, RANGE_START
from tests.conftest import skip_or_fail
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.webserver import (
    WEBSERVER,
    check_execution,
    dagster_home,
    statuses,
    webserver,
)

#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")
LEGACY = "geopmbench_1host.legacy.report"
YAML = "fm_stream_dgemm_2host.yaml.report"
GEOPM_KEYS = ["geopm/2019-05-30", "geopm/2020-04-01"]  # landing folder "geopm", by day
GEOPM_BAD = "geopm/2020-04-01"  # the legacy report's day
POWERAPI_KEYS = ["powerapi/2021-01-13"]  # landing folder "powerapi": its entries' one day
CC_BLOCKS = ["emmy/1403", "fritz/398", "taurus/20639"]
FRITZ = ["fritz/398764/1675954353", "fritz/398955/1675956725"]  # the bundled fritz jobs
#: A third job of the block fritz/398, written as cc-backend writes a job (data.json.gz).
BAD_JOB = JobSpec(cluster="fritz", job_id=398_001, start_time=1_675_900_000, gzip=True)


@dataclass
class Source:
    """One landing source in the test: its sensor and job, the resource the sensor reads,
    its per-partition assets and check, and its bad partition and file."""

    sensor: str
    job: str
    resource_key: str
    resource: dg.ConfigurableResource
    assets: tuple[str, ...]  # per-partition assets, the first one carrying ``check``
    check: str
    keys: list[str]  # the registered partitions, in order
    bad: str  # the partition of the broken input
    file: Path  # the broken input
    cursor: str | None = None

    def tick(self, defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.RunRequest:
        """One tick of the sensor; returns its one run request."""
        data = tick(defs.resolve_sensor_def(self.sensor), instance,
                    {self.resource_key: self.resource}, self.cursor)
        self.cursor = data.cursor
        [request] = data.run_requests
        return request

    def run(self, defs: dg.Definitions, instance: dg.DagsterInstance,
            request: dg.RunRequest) -> dg.ExecuteInProcessResult:
        return launch_in_process(defs.resolve_job_def(self.job), instance, request,
                                 self.sensor, log_level="WARNING")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    return dagster_home(tmp_path, monkeypatch)


def _write_bad_job(archive: Path) -> Path:
    """``BAD_JOB`` written into ``archive``; returns its folder."""
    write_job(archive, BAD_JOB)
    return job_folder(archive, BAD_JOB.cluster, BAD_JOB.job_id, BAD_JOB.start_time)


def test_the_ui_reads_each_landing_source_failed_alone_with_its_file_then_fixed(
        home, tmp_path):
    if not WEBSERVER.is_file():
        skip_or_fail(f"dagster-webserver not found beside {sys.executable}")
    geopm_landing = tmp_path / "geopm"
    shutil.copytree(EXAMPLE_GEOPM_REPORTS, geopm_landing)
    powerapi_landing = tmp_path / "powerapi"
    shutil.copytree(EXAMPLE_POWERAPI, powerapi_landing)
    archive = tmp_path / "archive"
    shutil.copytree(EXAMPLE_CC_ARCHIVE, archive)

    # GEOPM: the legacy report cut short (its host's last line, memory HWM, missing)
    report = geopm_landing / LEGACY
    report_text = report.read_text()
    report.write_text("".join(report_text.splitlines(keepends=True)[:111]))
    # PowerAPI: a negative power on line 3 of the JSON-lines power reports
    power = powerapi_landing / "power.jsonl"
    power_text = power.read_text()
    lines = power_text.splitlines(keepends=True)
    lines[2] = lines[2].replace('"power":0.531164', '"power":-0.531164')
    power.write_text("".join(lines))
    # ClusterCockpit: a third job in the block fritz/398 whose data.json.gz is cut short; the
    # sensor hands out the block for its two complete jobs and the run reads the block whole
    # (a truncated job alone in its block is handed out after incomplete_after_s: the test
    # below)
    bad_job = _write_bad_job(archive)
    gz = bad_job / "data.json.gz"
    gz.write_bytes(gz.read_bytes()[:-20])
    settle()

    sources = [
        Source(geopm.SENSOR_NAME, geopm.JOB_NAME, "geopm_source",
               GeopmReportSource(landing_folders=[str(geopm_landing)], quiet_period_s=QUIET_S),
               ("geopm_validated_frames", "geopm_host_energy", "geopm_trials"), VALID_CHECK,
               GEOPM_KEYS, GEOPM_BAD, report),
        Source(powerapi.SENSOR_NAME, powerapi.JOB_NAME, "powerapi_source",
               PowerapiSource(landing_folders=[str(powerapi_landing)], quiet_period_s=QUIET_S),
               ("powerapi_validated_frames", "powerapi_report_energy"), VALID_CHECK,
               POWERAPI_KEYS, POWERAPI_KEYS[0], power),
        Source(clustercockpit.SENSOR_NAME, clustercockpit.JOB_NAME, "cc_archive",
               ClusterCockpitArchive(archive_roots=[str(archive)], quiet_period_s=QUIET_S,
                                     full_rescan_s=None),
               ("cc_block_tables",), READ_CHECK, CC_BLOCKS, "fritz/398", gz),
    ]
    gpu_root = tmp_path / "lab"
    gpu_root.mkdir()
    warehouse = tmp_path / "warehouse"
    env = {"JOULEHOUSE_GPU_DATA_ROOTS": str(gpu_root), "JOULEHOUSE_WAREHOUSE": str(warehouse),
           "JOULEHOUSE_GEOPM_LANDING": str(geopm_landing),
           "JOULEHOUSE_POWERAPI_LANDING": str(powerapi_landing),
           "JOULEHOUSE_CC_ARCHIVE": str(archive),
           "JOULEHOUSE_QUIET_PERIOD_S": str(QUIET_S), "JOULEHOUSE_FULL_RESCAN_S": "none"}
    defs = build_definitions(
        GpuBenchmarkSource(data_roots=[DataRoot(path=str(gpu_root))]),
        Warehouse(root=str(warehouse)), powerapi_source=sources[1].resource,
        geopm_source=sources[0].resource, cc_archive=sources[2].resource)

    with dg.DagsterInstance.get() as instance:
        for source in sources:
            assert not source.run(defs, instance, source.tick(defs, instance)).success
            assert list(instance.get_dynamic_partitions(
                defs.resolve_assets_def(source.assets[0]).partitions_def.name)) == source.keys

        with webserver(env, tmp_path / "webserver.log") as port:
            for source in sources:
                good = sorted(key for key in source.keys if key != source.bad)
                for asset in source.assets:
                    node = statuses(port, asset)
                    partitions = node["assetPartitionStatuses"]
                    assert sorted(partitions["materializedPartitions"]) == good, asset
                    assert partitions["failedPartitions"] == [source.bad], asset
                    assert node["partitionStats"] == {
                        "numMaterialized": len(good), "numPartitions": len(source.keys),
                        "numFailed": 1}, asset
                execution = check_execution(port, source.assets[0], source.check, source.bad)
                assert execution["status"] == "FAILED", source.bad
                evaluation = execution["evaluation"]
                assert evaluation["partition"] == evaluation["entries"]["partition"] == (
                    source.bad)
                assert evaluation["severity"] == "ERROR"
                assert evaluation["entries"]["file"] == str(source.file)
                for key in good:
                    assert check_execution(port, source.assets[0], source.check, key)[
                        "status"] == "SUCCEEDED", key

            # each source's files read as there ("100% filled"), the bad one's too
            for files, count in (("geopm_report_files", 2), ("powerapi_report_files", 1),
                                 ("cc_job_files", 3)):
                assert statuses(port, files)["partitionStats"] == {
                    "numMaterialized": count, "numPartitions": count, "numFailed": 0}, files

            geopm_check = check_execution(port, "geopm_validated_frames", VALID_CHECK,
                                          GEOPM_BAD)["evaluation"]
            assert geopm_check["description"].startswith(f"{GEOPM_BAD}: {report}:111: ")
            assert geopm_check["entries"]["line"] == 111
            assert geopm_check["entries"]["error"] == (
                "truncated report: host 'mcfly13' has no 'geopmctl memory HWM' line "
                f"(GEOPM writes it last) (1 of 1 report(s) of day {GEOPM_BAD} failed, 0 done)")
            for asset, check in (("geopm_host_energy", COMPUTED_CHECK),
                                 ("geopm_trials", LOADS_CHECK)):
                assert check_execution(port, asset, check, GEOPM_BAD)[
                    "evaluation"]["description"] == (
                    f"{GEOPM_BAD}: not computed, an earlier asset failed in this run for 1 "
                    "of its 1 report(s)"), asset

            day = POWERAPI_KEYS[0]
            powerapi_check = check_execution(port, "powerapi_validated_frames", VALID_CHECK,
                                             day)["evaluation"]
            assert powerapi_check["description"].startswith(f"{day}: {power}:3: ")
            assert powerapi_check["entries"]["line"] == 3
            assert powerapi_check["entries"]["field"] == "power"
            assert powerapi_check["entries"]["error"] == (
                f"negative or missing power -0.531164 (1 of 3 entry(s) of day {day} failed, "
                "2 done)")
            assert check_execution(port, "powerapi_report_energy", COMPUTED_CHECK, day)[
                "evaluation"]["description"] == (
                f"{day}: not computed, its validated frames failed in this run for 1 of its 3 "
                "entry(s)")

            # the block's check names the bad job's folder; its other jobs were read
            read = check_execution(port, "cc_block_tables", READ_CHECK, "fritz/398")[
                "evaluation"]
            assert read["description"].startswith(f"fritz/398: {bad_job}/data.json.gz: ")
            assert "truncated or invalid" in read["entries"]["error"]
            assert "1 of 3 job(s) of block fritz/398 failed, 2 done" in read["description"]
            assert "line" not in read["entries"]  # a gzip stream has no line to give
            # the block's good jobs loaded their trials: its trial partition is current
            assert sorted(statuses(port, "cc_job_trials")["assetPartitionStatuses"][
                "materializedPartitions"]) == CC_BLOCKS
            assert check_execution(port, "cc_job_trials", LOADS_CHECK, "fritz/398")[
                "evaluation"]["description"] == "fritz/398: passed"
            # the real jobs violate the archive's JSON schemas: a warning, not a failure
            for block in CC_BLOCKS:
                conformance = check_execution(port, "cc_block_tables", CONFORMANCE_CHECK,
                                              block)
                assert conformance["status"] == "FAILED", block
                assert conformance["evaluation"]["severity"] == "WARN", block
            assert check_execution(port, "cc_block_tables", CONFORMANCE_CHECK, "fritz/398")[
                "evaluation"]["entries"]["jobs"] == FRITZ

            # fixed in place: one tick past the quiet period asks for the bad partition alone
            report.write_text(report_text)
            power.write_text(power_text)
            _write_bad_job(archive)
            settle()
            for source in sources:
                request = source.tick(defs, instance)
                assert request.tags[RANGE_START] == request.tags[RANGE_END] == source.bad
                assert source.run(defs, instance, request).success, source.bad
            for source in sources:
                for asset in source.assets:
                    partitions = statuses(port, asset)["assetPartitionStatuses"]
                    assert sorted(partitions["materializedPartitions"]) == sorted(
                        source.keys), asset
                    assert partitions["failedPartitions"] == [], asset
                execution = check_execution(port, source.assets[0], source.check, source.bad)
                assert execution["status"] == "SUCCEEDED", source.bad
                assert execution["evaluation"]["description"] == f"{source.bad}: passed"


def test_a_job_left_truncated_alone_in_its_block_fails_that_block(instance, tmp_path):
    archive = tmp_path / "archive"
    shutil.copytree(EXAMPLE_CC_ARCHIVE, archive)
    folder = job_folder(archive, "emmy", 1_403_244, 1_608_923_076)  # the block's one job
    gz = folder / "data.json.gz"
    gz.write_bytes(gz.read_bytes()[:-20])
    settle()
    # handed out once quiet for incomplete_after_s, complete or not: the read names the file
    source = ClusterCockpitArchive(archive_roots=[str(archive)], quiet_period_s=QUIET_S,
                                   full_rescan_s=None, incomplete_after_s=QUIET_S)
    defs = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(path=str(archive))]),
                             Warehouse(root=str(tmp_path / "warehouse")), cc_archive=source)
    sensor = defs.resolve_sensor_def(clustercockpit.SENSOR_NAME)
    first = tick(sensor, instance, {"cc_archive": source})
    settle()  # quiet for longer than the quiet period, and still truncated
    again = tick(sensor, instance, {"cc_archive": source}, first.cursor)
    requests = [*first.run_requests, *again.run_requests]
    assert "emmy/1403" in instance.get_dynamic_partitions("cc_job_blocks")
    results = [launch_in_process(defs.resolve_job_def(clustercockpit.JOB_NAME), instance,
                                 request, clustercockpit.SENSOR_NAME, log_level="WARNING")
               for request in requests]
    checks = {c.partition: c for result in results
              for c in result.get_asset_check_evaluations() if c.check_name == READ_CHECK}
    assert not checks["emmy/1403"].passed
    assert checks["emmy/1403"].metadata["file"].value == str(gz)
    assert instance.get_status_by_partition(
        dg.AssetKey("cc_block_tables"), ["emmy/1403"],
        defs.resolve_assets_def("cc_block_tables").partitions_def) == {
        "emmy/1403": dg.AssetPartitionStatus.FAILED}
