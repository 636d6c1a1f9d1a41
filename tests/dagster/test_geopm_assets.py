"""The GEOPM Dagster layer: landing sensor, reports grouped by landing folder and UTC day,
one run over the reports handed out, a bad report failing its day alone."""

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

import assets.geopm
import sensors.geopm
from assets.geopm import (
    FACTS_TABLE,
    GEOPM_TABLES,
    HOST_TABLE,
    REGION_TABLE,
    REPORT_TABLE,
    GeopmHandOut,
    geopm_days,
    geopm_energy_facts,
    geopm_host_energy,
    geopm_region_energy,
    geopm_report_energy,
    geopm_report_files,
    geopm_validated_frames,
)
from assets.gpu import VALID_CHECK
from definitions import build_definitions
from joulehouse import entry_table
from joulehouse import landing as landing_module
from joulehouse.geopm import energy
from joulehouse.geopm.layout import identify_report
from joulehouse.geopm.store import load_frames
from joulehouse.warehouse import Warehouse as Tables
from resources import (
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    StepWorkers,
    TaudbResource,
    Warehouse,
    embedded_taudb_url,
)
from sensors.geopm import JOB_NAME, SENSOR_NAME
from sensors.partition_runs import (
    NO_RETRY_TAG,
    RANGE_END,
    RANGE_START,
    RETRY_OF_TAG,
    RUN_KEY_TAG,
)
from tests.dagster import source_runs
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.source_runs import Saved, SourceRuns, instance_in
from tests.dagster_sqlite import empty_instance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"
LEGACY = "geopmbench_1host.legacy.report"
YAML = "fm_stream_dgemm_2host.yaml.report"
# Application Totals, package + DRAM energy over all hosts (J), as the reports write them
ENERGY_J = {LEGACY: 4406.26 + 328.19, YAML: 83998.9 + 8218.69 + 85946.8 + 10142.6}
# (hosts, distinct regions, host energy rows: regions + 3 totals sections per host)
SHAPE = {LEGACY: (1, 6, 6 + 3), YAML: (2, 13, 26 + 6)}
# The day partition of each bundled report: its Start Time's UTC day
DAY = {LEGACY: "landing/2020-04-01", YAML: "landing/2019-05-30"}
DAYS = sorted(DAY.values())

#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a later run's
#: (the per-day plot asserted is the module's first run's, drawn as every first run's is).
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


def _land(folder: Path) -> Path:
    """A new landing ``folder`` holding copies of the two bundled reports."""
    folder.mkdir()
    for name in (LEGACY, YAML):
        shutil.copy(EXAMPLES / name, folder / name)
    return folder


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    """A landing folder ``landing`` holding copies of the two bundled reports, quiet."""
    return _land(tmp_path / "landing")


class Pipeline(SourceRuns):
    """The definitions over one landing folder: tick the GEOPM sensor, run what it asks."""

    def __init__(self, instance, landing: Path, warehouse: Path,
                 workers: StepWorkers | None = None):
        self.landing = landing
        self.source = GeopmReportSource(landing_folders=[str(landing)], quiet_period_s=QUIET_S)
        self.warehouse = Warehouse(root=str(warehouse))
        defs = build_definitions(
            GpuBenchmarkSource(data_roots=[DataRoot(path=str(landing))]), self.warehouse,
            geopm_source=self.source, workers=workers)
        super().__init__(instance, defs, SENSOR_NAME, JOB_NAME, "geopm_source", self.source,
                         geopm_days)
        self.tables = Tables(warehouse)


@pytest.fixture
def pipeline(instance, landing, tmp_path) -> Pipeline:
    return Pipeline(instance, landing, tmp_path / "warehouse")


@dataclass(frozen=True)
class FirstRun(source_runs.FirstRun):
    """A module's first run (:func:`_first_run`): what it left, saved; its result; and the
    run requests of the tick that asked for it."""

    requests: list[dg.RunRequest]


def _first_run(base: Path, extra: Callable[[Path], None] | None = None,
               succeeds: bool = True) -> FirstRun:
    """The two bundled reports landed in ``base / "root"`` (and what ``extra`` writes into
    the landing folder), quiet, and the run of the sensor's first tick over them (which
    ``succeeds``, or fails), as :func:`pipeline` would make them."""
    with instance_in(Saved.storage(base)) as instance:
        landing = _land(base / "root" / "landing")
        if extra is not None:
            extra(landing)
        pipeline = Pipeline(instance, landing, base / "root" / "warehouse")
        settle()
        requests = pipeline.tick().run_requests
        result = pipeline.launch(requests[0])
        assert result.success is succeeds
    return FirstRun(Saved.save(base, pipeline.cursor), result, requests)


@contextmanager
def _restored(first: FirstRun, tmp_path: Path) -> Iterator[Pipeline]:
    """The pipeline after ``first`` put back for this test (its landing folder
    ``.landing``)."""
    with first.saved.restored_source(tmp_path, lambda instance, root: Pipeline(
            instance, root / "landing", root / "warehouse")) as pipeline:
        yield pipeline


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory) -> FirstRun:
    """The run of the first tick over the two bundled reports: once per module."""
    return _first_run(tmp_path_factory.mktemp("geopm"))


@pytest.fixture
def ran(ran_once: FirstRun, tmp_path) -> Iterator[Pipeline]:
    """:func:`pipeline` after the run of its first tick over the two bundled reports
    (:func:`ran_once`, put back for this test; its landing folder ``ran.landing``)."""
    with _restored(ran_once, tmp_path) as pipeline:
        yield pipeline


@pytest.fixture(scope="module")
def failed_once(tmp_path_factory) -> FirstRun:
    """The failed run of the first tick over the two bundled reports and ``cut.report``:
    once per module."""
    return _first_run(tmp_path_factory.mktemp("geopm-bad"),
                      lambda landing: _cut(landing / "cut.report"), succeeds=False)


@pytest.fixture
def failed(failed_once: FirstRun, tmp_path) -> Iterator[Pipeline]:
    """:func:`pipeline` after the run of its first tick over the two bundled reports and
    the truncated ``cut.report`` (:func:`_cut`) of the legacy report's day, which failed
    that day (:func:`failed_once`, put back for this test; its landing folder
    ``failed.landing``)."""
    with _restored(failed_once, tmp_path) as pipeline:
        yield pipeline


@pytest.fixture(scope="module")
def varied_once(tmp_path_factory) -> FirstRun:
    """The run of the first tick over the two bundled reports and ``a.report``: once per
    module."""
    return _first_run(tmp_path_factory.mktemp("geopm-a"),
                      lambda landing: legacy_variant(landing / "a.report", 20, scale=2.0))


@pytest.fixture
def varied(varied_once: FirstRun, tmp_path) -> Iterator[Pipeline]:
    """:func:`pipeline` after the run of its first tick over the two bundled reports and
    ``a.report``, a variant of the legacy report of its day (:func:`legacy_variant`: 20 s
    later, twice its package energy) (:func:`varied_once`, put back for this test; its
    landing folder ``varied.landing``)."""
    with _restored(varied_once, tmp_path) as pipeline:
        yield pipeline


def _cut(path: Path) -> None:
    """The legacy report cut short at ``path``: the host's last line (memory HWM) missing,
    a truncated report failing at line 111."""
    path.write_text("".join((EXAMPLES / LEGACY).read_text().splitlines(keepends=True)[:111]))


def test_the_bundled_reports_materialize_in_one_run(ran, ran_once):
    pipeline = ran
    [request] = ran_once.requests
    keys = [f"landing/{YAML}", f"landing/{LEGACY}"]  # sorted by file name
    assert pipeline.partitions() == DAYS
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == tuple(DAYS)
    assert GeopmHandOut.named_in(request.run_config) == {DAY[YAML]: [keys[0]], DAY[LEGACY]: [keys[1]]}
    result = ran_once.result
    assert result.success

    tables = pipeline.tables
    host = tables.read_partitions(HOST_TABLE, keys)
    for key, name in zip(keys, (YAML, LEGACY)):
        hosts, regions, rows = SHAPE[name]
        assert (host["report"] == key).sum() == rows
        assert len(tables.read_partitions("geopm_validated_frames/regions", [key])) == (
            rows - 3 * hosts)
    region = tables.read_table(REGION_TABLE)
    assert region.groupby("report").size().to_dict() == {keys[0]: 13, keys[1]: 6}
    sleep = region[(region["report"] == keys[0]) & (region["region"] == "sleep")].iloc[0]
    assert sleep["host_count"] == 2
    assert sleep["power_w"] == pytest.approx(sleep["package_energy_j"]
                                             / sleep["sync_runtime_s"])
    report = tables.read_table(REPORT_TABLE).set_index(["report", "section"])
    assert len(report) == 6
    application = report.xs("application", level="section")
    assert (application["package_energy_j"] + application["dram_energy_j"]).to_dict() == {
        keys[0]: pytest.approx(ENERGY_J[YAML]), keys[1]: pytest.approx(ENERGY_J[LEGACY])}

    facts = tables.read_table(FACTS_TABLE)
    assert len(facts) == 6 and set(facts["source"]) == {"geopm"}  # cpu + dram per host
    order = ["entity", "component", "method"]
    pd.testing.assert_frame_equal(  # a rebuild from scratch, at Delta's microseconds
        facts.sort_values(order, ignore_index=True),
        entry_table.to_microseconds(energy.facts_rows(
            load_frames(tables, "header", keys), load_frames(tables, "totals", keys))
        ).sort_values(order, ignore_index=True))
    assert set(facts["entity"]) == {f"{keys[0]}/{h}" for h in ("mcfly11", "mcfly12")} | {
        f"{keys[1]}/mcfly13"}
    assert facts["energy_j"].sum() == pytest.approx(sum(ENERGY_J.values()))
    assert str(facts["window_start"].dtype) == "datetime64[ns, UTC]"
    # the tables' figures are of the reports the run wrote, and say so
    assert _latest(pipeline.instance, geopm_report_energy.key).metadata[
        "run_total_energy_j"].value == pytest.approx(sum(ENERGY_J.values()))
    assert _latest(pipeline.instance, geopm_region_energy.key).metadata[
        "run_regions"].value == region["region"].nunique()

    for name, key in zip((YAML, LEGACY), keys):
        metadata = _latest(pipeline.instance, geopm_host_energy.key, DAY[name]).metadata
        hosts, regions, rows = SHAPE[name]
        assert metadata["dagster/row_count"].value == rows
        assert metadata["reports"].value == 1
        [shown] = metadata["energy_per_report"].value.records
        assert shown.data == {"report": key, "hosts": hosts, "regions": regions,
                              "total_energy_kj": pytest.approx(ENERGY_J[name] / 1e3)}
        assert len(metadata["hosts"].value) == hosts
        assert metadata["total_energy_j"].value == pytest.approx(ENERGY_J[name])
        assert metadata["energy_per_region"].value.startswith(
            f"![energy per region of {DAY[name]}](data:image/png;base64,iVBORw0KGgo")
        regions_shown = metadata["regions"].value.records
        assert len(regions_shown) == regions
        if name == LEGACY:  # the most energy first, as the report writes it (kJ)
            assert regions_shown[0].data == {
                "region": "all2all", "package_energy_kj": pytest.approx(1.80226),
                "dram_energy_kj": pytest.approx(0.120414), "gpu_energy_kj": None}
        schema = metadata["dagster/column_schema"].value
        assert all(column.description for column in schema.columns)
    facts_event = _latest(pipeline.instance, geopm_energy_facts.key)
    assert facts_event.metadata["dagster/row_count"].value == 6
    assert {c.partition: c.passed for c in result.get_asset_check_evaluations()
            if c.check_name == VALID_CHECK} == {day: True for day in DAYS}


#: The TAUdb tables of a trial compared row by row (secondary_metadata's ids are UUIDs).
TAUDB_TABLES = ["trial", "metric", "thread", "timer", "timer_group", "timer_parameter",
                "timer_callpath", "timer_call_data", "timer_value", "counter", "counter_value",
                "primary_metadata"]


def test_one_process_and_two_store_the_same_rows_and_trials(landing, tmp_path):
    """The per-report work (frames, host energy, the trials' building) in the step's own
    process (JOULEHOUSE_STEP_WORKERS=1) or in two worker processes: the same rows."""
    stored = {}
    settle()
    for workers in (1, 2):
        with empty_instance() as instance:
            pipeline = Pipeline(instance, landing, tmp_path / f"warehouse-{workers}",
                                StepWorkers(max_workers=workers, partitions_per_worker=1))
            [request] = pipeline.tick().run_requests
            assert pipeline.launch(request).success
            keys = [f"landing/{YAML}", f"landing/{LEGACY}"]
            with TaudbResource(url=embedded_taudb_url(pipeline.warehouse.root)).open() as db:
                stored[workers] = {
                    HOST_TABLE: pipeline.tables.read_partitions(HOST_TABLE, keys),
                    **{table: sorted(db.query(f"SELECT * FROM {table}"), key=repr)
                       for table in TAUDB_TABLES}}
    one, two = stored[1], stored[2]
    pd.testing.assert_frame_equal(one.pop(HOST_TABLE), two.pop(HOST_TABLE))
    assert len(one["trial"]) == 2 and len(one["timer_value"]) > 100
    assert one == two


def test_host_energy_is_computed_from_each_report_as_read_not_read_back(
        landing, tmp_path, monkeypatch):
    """With frames and host energy in one run, each report's host energy comes from the
    report just read (the step's own process here): the reading back of its stored frames
    (``store_host_energy``) is never called, and the rows equal those it gives."""
    def read_back(*args):
        raise AssertionError("host energy read back from the stored frames")

    settle()
    with empty_instance() as instance:
        pipeline = Pipeline(instance, landing, tmp_path / "warehouse",
                            StepWorkers(max_workers=1))
        [request] = pipeline.tick().run_requests
        monkeypatch.setattr(assets.geopm, "store_host_energy", read_back)
        assert pipeline.launch(request).success
        monkeypatch.undo()
        keys = [f"landing/{YAML}", f"landing/{LEGACY}"]
        stored = pipeline.tables.read_partitions(HOST_TABLE, keys)
        for key in keys:
            assets.geopm.store_host_energy(pipeline.tables, key, landing / key.split("/")[1])
        pd.testing.assert_frame_equal(stored, pipeline.tables.read_partitions(HOST_TABLE, keys))
        assert len(stored) > 2


def _latest(instance, asset: dg.AssetKey, partition: str | None = None):
    """The latest materialization of ``asset`` (of ``partition``)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset,
                              asset_partitions=[partition] if partition else None), limit=1)
    return records.records[0].asset_materialization


def _observed(result) -> list[dg.AssetObservation]:
    """The outcomes per day a run recorded (observations of ``geopm_report_files``)."""
    return [e.asset_observation_data.asset_observation for e in result.all_events
            if e.is_asset_observation and e.asset_key == geopm_report_files.key]


def test_a_bad_report_fails_alone_and_is_picked_up_once_fixed(failed, failed_once):
    """A truncated report of the legacy report's day fails that day, named with its file and
    line; the day's good report and the other day are stored and reach the tables. Fixed
    in place, it is picked up by itself at a later tick, alone."""
    pipeline, landing = failed, failed.landing
    bad = landing / "cut.report"  # _cut: the host's last line (memory HWM) missing
    [request] = failed_once.requests
    assert GeopmHandOut.named_in(request.run_config)[DAY[LEGACY]] == ["landing/cut.report", f"landing/{LEGACY}"]
    result = failed_once.result
    assert not result.success
    good = [f"landing/{YAML}", f"landing/{LEGACY}"]
    for asset in (geopm_validated_frames.key, geopm_host_energy.key):
        assert pipeline.status(asset) == {
            DAY[LEGACY]: dg.AssetPartitionStatus.FAILED,
            DAY[YAML]: dg.AssetPartitionStatus.MATERIALIZED}, asset
    checks = {c.partition: c for c in result.get_asset_check_evaluations()
              if c.check_name == VALID_CHECK}
    check = checks[DAY[LEGACY]]
    assert not check.passed and checks[DAY[YAML]].passed
    assert check.metadata["file"].value == str(bad)
    assert check.metadata["line"].value == 111
    assert "truncated report" in check.metadata["error"].value
    assert f"(1 of 2 report(s) of day {DAY[LEGACY]} failed, 1 done)" in check.description
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        f"1 of 2 partition(s) failed:\n{DAY[LEGACY]}: ")
    assert {e.partition: e.metadata["failed_entries"].value for e in _observed(result)} == {
        DAY[LEGACY]: ["landing/cut.report"], DAY[YAML]: []}
    # the good reports, the failed day's one too, reached the tables in the same run
    assert set(pipeline.tables.read_table(REGION_TABLE)["report"]) == set(good)
    facts = pipeline.tables.read_table(FACTS_TABLE)
    assert facts["energy_j"].sum() == pytest.approx(sum(ENERGY_J.values()))
    assert not pipeline.tables.has_partition(HOST_TABLE, "landing/cut.report")

    # nothing changed: nothing asked; fixed in place: asked again, alone, once quiet
    assert pipeline.tick().run_requests == []
    shutil.copy(EXAMPLES / LEGACY, bad)
    os.utime(bad)
    assert pipeline.tick().run_requests == []  # inside its quiet period
    settle()
    [fixed] = pipeline.tick().run_requests
    assert fixed.tags[RANGE_START] == fixed.tags[RANGE_END] == DAY[LEGACY]
    assert GeopmHandOut.named_in(fixed.run_config) == {DAY[LEGACY]: ["landing/cut.report"]}
    assert fixed.run_key != request.run_key
    assert pipeline.launch(fixed).success
    assert set(pipeline.status(geopm_host_energy.key).values()) == {
        dg.AssetPartitionStatus.MATERIALIZED}
    # fixed as a copy of the legacy report: the same report given twice, counted once
    facts = pipeline.tables.read_table(FACTS_TABLE)
    assert facts["energy_j"].sum() == pytest.approx(sum(ENERGY_J.values()))
    written = _latest(pipeline.instance, geopm_energy_facts.key).metadata
    assert written["given_twice"].value == {f"landing/{LEGACY}": "landing/cut.report"}
    # the report's facts moved to the key it is now counted under: one entity each way
    assert (written["entities_written"].value, written["entities_removed"].value) == (1, 1)
    assert {entity.rsplit("/", 1)[0] for entity in facts["entity"]} == {
        "landing/cut.report", f"landing/{YAML}"}
    # so did its rows of the tables kept per report, in a run over that report alone
    for table in (REGION_TABLE, REPORT_TABLE):
        assert set(pipeline.tables.read_table(table)["report"]) == {
            "landing/cut.report", f"landing/{YAML}"}, table
    # the day passed: its next hand-out is what is new alone
    shutil.copy(EXAMPLES / YAML, landing / "later.report")
    settle()
    [later] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(later.run_config) == {DAY[YAML]: ["landing/later.report"]}


def test_a_first_run_of_only_bad_reports_names_them(pipeline, landing):
    for name in (LEGACY, YAML):
        (landing / name).unlink()
    bad = landing / "bad.report"
    bad.write_text("##### geopm 1.1.0 #####\nHost: a\nRegion r (0x1):\n")
    settle()
    [request] = pipeline.tick().run_requests
    # no Start Time: the day of the file's mtime
    day = f"landing/{datetime.fromtimestamp(bad.stat().st_mtime, UTC):%Y-%m-%d}"
    assert GeopmHandOut.named_in(request.run_config) == {day: ["landing/bad.report"]}
    result = pipeline.launch(request)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        f"1 of 1 partition(s) failed:\n{day}: ")
    assert not pipeline.tables.table_dir(REGION_TABLE).exists()


def test_a_report_inside_its_quiet_period_waits(pipeline, landing):
    settle()
    first = pipeline.tick()
    assert pipeline.partitions() == DAYS
    assert len(first.run_requests) == 1
    (landing / "notes.txt").write_text("not a report\n")  # ignored
    shutil.copy(EXAMPLES / YAML, landing / "young.report")
    data = pipeline.tick()
    assert data.run_requests == [] and data.dynamic_partitions_requests == []
    assert "(1 waiting for the 1 s quiet period)" in data.skip_message
    settle()
    [request] = pipeline.tick().run_requests
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == DAY[YAML]
    assert GeopmHandOut.named_in(request.run_config) == {DAY[YAML]: ["landing/young.report"]}
    assert pipeline.partitions() == [DAY[LEGACY], DAY[YAML]]  # its day moved to the end


def test_no_run_is_asked_for_while_one_of_its_own_is_in_flight_then_one_covers_both(
        pipeline, landing):
    """The sensor has a run of its own in flight, not yet taken from the queue (NOT_STARTED
    here, as QUEUED would need the daemon's origin), then running: the tick asks for none
    (it would wait behind it, or list its reports again) and keeps its cursor; once that
    run has ended, the next tick hands out, in one run, the reports ready meanwhile.
    Another's run of the job (a backfill's) holds nothing back."""
    settle()
    assert len(pipeline.tick().run_requests) == 1
    pipeline.instance.add_run(dg.DagsterRun(job_name=JOB_NAME, run_id="backfill",
                                            status=dg.DagsterRunStatus.STARTED))
    shutil.copy(EXAMPLES / LEGACY, landing / "first.report")
    settle()
    [request] = pipeline.tick().run_requests
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == DAY[LEGACY]
    assert GeopmHandOut.named_in(request.run_config) == {DAY[LEGACY]: ["landing/first.report"]}
    shutil.copy(EXAMPLES / YAML, landing / "second.report")
    shutil.copy(EXAMPLES / LEGACY, landing / "third.report")
    settle()
    before = pipeline.cursor
    for run_id, status in (("waiting", dg.DagsterRunStatus.NOT_STARTED),
                           ("running", dg.DagsterRunStatus.STARTED)):
        pipeline.instance.add_run(dg.DagsterRun(job_name=JOB_NAME, run_id=run_id,
                                                status=status,
                                                tags={"dagster/sensor_name": SENSOR_NAME}))
        data = pipeline.tick()
        assert data.run_requests == [] and data.dynamic_partitions_requests == []
        assert data.skip_message.startswith(
            f"a run of {JOB_NAME} asked for by this sensor is in flight ({run_id})")
        assert pipeline.cursor == before
        pipeline.instance.report_run_failed(pipeline.instance.get_run_by_id(run_id))
    [request] = pipeline.tick().run_requests
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == tuple(DAYS)
    assert GeopmHandOut.named_in(request.run_config) == {DAY[YAML]: ["landing/second.report"],
                                   DAY[LEGACY]: ["landing/third.report"]}


def test_the_source_settings_come_from_the_environment(tmp_path, monkeypatch):
    default = GeopmReportSource.from_env(tmp_path)
    assert (default.landing_folders, default.quiet_period_s, default.timezone) == (
        [str(tmp_path)], 60.0, "UTC")
    first, second = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("JOULEHOUSE_GEOPM_LANDING", f"{first}{os.pathsep}{second}")
    monkeypatch.setenv("JOULEHOUSE_GEOPM_TIMEZONE", "Europe/Berlin")
    monkeypatch.setenv("JOULEHOUSE_QUIET_PERIOD_S", "120")
    source = GeopmReportSource.from_env(tmp_path)
    assert (source.landing_folders, source.quiet_period_s, source.timezone) == (
        [str(first), str(second)], 120.0, "Europe/Berlin")
    assert source.resolve("b/job.report") == second.resolve() / "job.report"
    monkeypatch.setenv("JOULEHOUSE_GEOPM_TIMEZONE", "+01:00")
    with pytest.raises(ValueError, match="unknown time zone '\\+01:00'"):
        GeopmReportSource.from_env(tmp_path)


def test_a_missing_landing_folder_is_named_and_the_others_are_still_scanned(
        instance, landing, tmp_path):
    """Landing folder 'nfs' vanishes (a mount briefly absent): the tick names it and still
    hands out what lands in 'landing'; once 'nfs' is back, nothing of it is asked again."""
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    shutil.copy(EXAMPLES / LEGACY, nfs / "remote.report")
    pipeline = Pipeline(instance, landing, tmp_path / "warehouse")
    pipeline.source = GeopmReportSource(landing_folders=[str(landing), str(nfs)],
                                        quiet_period_s=QUIET_S)
    settle()
    [first] = pipeline.tick().run_requests
    assert first.tags["joulehouse/partitions"] == "3"
    nfs.rename(tmp_path / "nfs.away")
    data = pipeline.tick()
    assert data.run_requests == []
    assert data.skip_message == (
        "no new or changed GEOPM report(s) ready (0 waiting for the 1 s quiet period); "
        f"skipped: landing folder 'nfs' ({nfs}) cannot be listed (No such file or "
        "directory); its cursor is kept")
    shutil.copy(EXAMPLES / YAML, landing / "late.report")
    settle()
    [late] = pipeline.tick().run_requests
    assert late.tags[RANGE_START] == late.tags[RANGE_END] == DAY[YAML]
    assert GeopmHandOut.named_in(late.run_config) == {DAY[YAML]: ["landing/late.report"]}
    (tmp_path / "nfs.away").rename(nfs)
    back = pipeline.tick()
    assert back.run_requests == [] and back.skip_message.startswith(
        "no new or changed GEOPM report(s) ready (0 waiting")
    assert pipeline.partitions() == [DAY[LEGACY], "nfs/2020-04-01", DAY[YAML]]


def test_a_report_whose_mode_alone_changed_is_asked_again_once(pipeline, landing,
                                                                monkeypatch):
    """chmod moves a report's ctime past the watermark, but not its size nor mtime: the
    watermark passed the older report (the newer one sits at it, its fingerprint still in
    the cursor), so the cursor forgot its fingerprint and it is asked for again once, in
    a run of its own (the known cost: one idempotent re-run); a rewrite is asked for."""
    monkeypatch.setattr(landing_module, "CLOCK_MARGIN_S", 0.0)
    settle()
    [first] = pipeline.tick().run_requests
    assert pipeline.launch(first).success
    for _ in range(2):  # the watermark passes the reports
        assert pipeline.tick().run_requests == []
    older = min((LEGACY, YAML), key=lambda name: os.stat(landing / name).st_ctime_ns)
    for name in (LEGACY, YAML):
        os.chmod(landing / name, 0o600)
    settle()
    [chmodded] = pipeline.tick().run_requests
    assert chmodded.tags[RANGE_START] == chmodded.tags[RANGE_END] == DAY[older]
    assert GeopmHandOut.named_in(chmodded.run_config) == {DAY[older]: [f"landing/{older}"]}
    assert chmodded.run_key != first.run_key
    assert pipeline.launch(chmodded).success
    data = pipeline.tick()
    assert data.run_requests == [] and data.skip_message.startswith(
        "no new or changed GEOPM report(s) ready (0 waiting")
    with open(landing / LEGACY, "a") as report:
        report.write("\n")  # rewritten: a new fingerprint
    settle()
    [again] = pipeline.tick().run_requests
    assert again.tags[RANGE_START] == again.tags[RANGE_END] == DAY[LEGACY]
    assert again.run_key != first.run_key


def test_a_hand_out_whose_run_was_never_reserved_is_asked_again(pipeline):
    """The tick's files events are stored, then the daemon dies (or its gRPC call times
    out) before the run is reserved: the cursor is not kept, and the next tick asks again
    for the same reports, with the same run key (their frames were never materialized)."""
    settle()
    before = pipeline.cursor
    [first] = pipeline.tick().run_requests
    assert _latest(pipeline.instance, geopm_report_files.key, DAY[LEGACY]).metadata[
        "reports"].value == {f"landing/{LEGACY}": landing_module.read_landed_item(
            pipeline.source.resolve(f"landing/{LEGACY}"), f"landing/{LEGACY}",
            identify_report).fingerprint}
    pipeline.cursor = before  # the tick's result lost
    [again] = pipeline.tick().run_requests
    assert again.run_key == first.run_key
    assert again.tags["joulehouse/partitions"] == "2"
    assert pipeline.launch(again).success
    assert pipeline.tick().run_requests == []


@pytest.mark.parametrize("alone", [False, True], ids=["with-another", "alone"])
def test_a_failed_report_fixed_keeping_size_and_mtime_is_asked_again(pipeline, landing,
                                                                     monkeypatch, alone):
    """A report corrupted in place keeping its size and mtime fails its partition; fixed by
    ``cp -p`` (size and mtime as before, so its fingerprint too) after the watermark passed
    it, it is asked for again (its ctime moved past the watermark). Its failed run covered
    another report too: a new run key, and it runs. It failed alone in its run: the failed
    run's key, which the daemon does not run twice (the known limitation,
    docs/ARCHITECTURE.md)."""
    monkeypatch.setattr(landing_module, "CLOCK_MARGIN_S", 0.0)
    if alone:
        (landing / YAML).unlink()
    path = landing / LEGACY
    good = path.read_bytes()
    times = os.stat(path)
    path.write_bytes(good[:400] + b"x" * (len(good) - 800) + good[-400:])
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    settle()
    [first] = pipeline.tick().run_requests
    assert not pipeline.launch(first).success
    status = {DAY[LEGACY]: dg.AssetPartitionStatus.FAILED}
    if not alone:
        status[DAY[YAML]] = dg.AssetPartitionStatus.MATERIALIZED
    assert pipeline.status(geopm_validated_frames.key) == status
    shutil.copy(EXAMPLES / YAML, landing / "later.report")  # the watermark passes LEGACY
    settle()
    [later] = pipeline.tick().run_requests
    assert later.tags[RANGE_START] == later.tags[RANGE_END] == DAY[YAML]
    for _ in range(2):
        assert pipeline.tick().run_requests == []
    path.write_bytes(good)  # cp -p of the good report over the bad one
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    settle()
    [fixed] = pipeline.tick().run_requests
    assert fixed.tags[RANGE_START] == fixed.tags[RANGE_END] == DAY[LEGACY]
    assert GeopmHandOut.named_in(fixed.run_config) == {DAY[LEGACY]: [f"landing/{LEGACY}"]}
    if alone:
        assert fixed.run_key == first.run_key
        return
    assert fixed.run_key != first.run_key
    assert pipeline.launch(fixed).success
    assert pipeline.status(geopm_validated_frames.key)[DAY[LEGACY]] == (
        dg.AssetPartitionStatus.MATERIALIZED)


def test_an_unreadable_report_leaves_its_folder_unlisted_until_readable(
        pipeline, landing, tmp_path, monkeypatch):
    """A report the sensor cannot read (its identify raises PermissionError: another user's
    file) leaves its landing folder out of the tick, named in the message with the report
    and why, its cursor kept; once readable, it and the
    report landed meanwhile are asked for once, nothing else again."""
    locked = [True]

    def identify(path):
        if path.name == "locked.report" and locked[0]:
            raise PermissionError(13, "Permission denied", str(path))
        return identify_report(path)

    monkeypatch.setattr(sensors.geopm, "LANDING", replace(sensors.geopm.LANDING,
                                                          identify=identify))
    settle()
    [first] = pipeline.tick().run_requests
    assert first.tags["joulehouse/partitions"] == "2"
    cursor = pipeline.cursor
    shutil.copy(EXAMPLES / LEGACY, landing / "locked.report")
    shutil.copy(EXAMPLES / YAML, landing / "late.report")
    settle()
    for _ in range(2):
        data = pipeline.tick()
        assert data.run_requests == [] and data.skip_message == (
            "no new or changed GEOPM report(s) ready (0 waiting for the 1 s quiet period); "
            f"skipped: landing folder 'landing' ({landing}) not listed: entry "
            f"'landing/locked.report' ({landing / 'locked.report'}) cannot be read "
            "(Permission denied); its cursor is kept")
        assert pipeline.cursor == cursor
    locked[0] = False
    [readable] = pipeline.tick().run_requests
    assert readable.tags["joulehouse/partitions"] == "2"
    assert GeopmHandOut.named_in(readable.run_config) == {DAY[YAML]: ["landing/late.report"],
                                    DAY[LEGACY]: ["landing/locked.report"]}
    assert pipeline.tick().run_requests == []


def legacy_variant(path: Path, second: int, scale: float = 1.0,
                   start: str = "Wed Apr 01 09:00:{second:02d} 2020") -> None:
    """Write at ``path`` the legacy report started at ``second`` past 09:00 (its day:
    DAY[LEGACY], unless ``start`` says another), its package energies times ``scale``: a
    distinct report of that day."""
    lines = []
    for line in (EXAMPLES / LEGACY).read_text().splitlines(keepends=True):
        if line.startswith("Start Time:"):
            line = f"Start Time: {start.format(second=second)}\n"
        elif line.lstrip().startswith("package-energy (joules):"):
            label, _, value = line.partition(":")
            line = f"{label}: {float(value) * scale:.6g}\n"
        lines.append(line)
    path.write_text("".join(lines))


KEPT_TABLES = {REGION_TABLE: ["report", "region", "hash"],
               REPORT_TABLE: ["report", "section"],
               FACTS_TABLE: ["entity", "component", "method"]}


def kept_tables(tables: Tables) -> dict[str, pd.DataFrame]:
    """The tables kept per report, in one row order."""
    return {table: tables.read_table(table).sort_values(order, ignore_index=True)
            for table, order in KEPT_TABLES.items()}


#: What a rebuild (:func:`assert_equal_to_a_rebuild`) materializes: the tables kept per
#: report and what they are made from; not the trials, which it does not compare.
REBUILT = [geopm_validated_frames.key, geopm_host_energy.key,
           *(spec.key for spec in GEOPM_TABLES)]


def assert_equal_to_a_rebuild(pipeline: Pipeline, landing: Path, tmp_path: Path) -> None:
    """``pipeline``'s tables kept per report equal, row for row, those of a fresh instance
    and warehouse landing every report of ``landing`` in one run (of :data:`REBUILT`)."""
    with empty_instance() as instance:
        fresh = Pipeline(instance, landing, tmp_path / "rebuilt")
        [request] = fresh.tick().run_requests
        assert fresh.launch(request._replace(asset_selection=REBUILT)).success
        rebuilt = kept_tables(fresh.tables)
    for table, rows in kept_tables(pipeline.tables).items():
        pd.testing.assert_frame_equal(rows, rebuilt[table], check_like=True, obj=table)


def _frames_of(instance, day: str) -> list[str]:
    """The reports the latest run stored in ``day`` (its validated frames' metadata)."""
    return _latest(instance, geopm_validated_frames.key, day).metadata["report_keys"].value


def test_reports_of_one_day_landing_in_two_ticks_are_processed_once_each(ran, tmp_path):
    """Two reports of the legacy report's day land after the first run: the second run's
    hand-out is those two alone (the day's earlier report is not read again), and the
    tables kept per report equal a rebuild from scratch."""
    pipeline, landing = ran, ran.landing
    legacy_variant(landing / "a.report", 20, scale=2.0)
    legacy_variant(landing / "b.report", 25, scale=3.0)
    settle()
    [second] = pipeline.tick().run_requests
    assert second.tags[RANGE_START] == second.tags[RANGE_END] == DAY[LEGACY]
    assert GeopmHandOut.named_in(second.run_config) == {DAY[LEGACY]: ["landing/a.report", "landing/b.report"]}
    result = pipeline.launch(second)
    assert result.success
    assert _frames_of(pipeline.instance, DAY[LEGACY]) == ["landing/a.report",
                                                          "landing/b.report"]
    assert _latest(pipeline.instance, geopm_host_energy.key, DAY[LEGACY]).metadata[
        "reports"].value == 2
    written = _latest(pipeline.instance, geopm_report_energy.key).metadata
    assert (written["reports_written"].value, written["reports_removed"].value) == (2, 0)
    report = pipeline.tables.read_table(REPORT_TABLE).set_index(["report", "section"])
    application = report.xs("application", level="section")
    package = application["package_energy_j"]
    legacy = package[f"landing/{LEGACY}"]  # the variants' energies: 6 significant digits
    assert package["landing/a.report"] == pytest.approx(2 * legacy, rel=1e-5)
    assert package["landing/b.report"] == pytest.approx(3 * legacy, rel=1e-5)
    assert pipeline.partitions() == DAYS
    assert_equal_to_a_rebuild(pipeline, landing, tmp_path)


def test_a_day_with_nothing_handed_out_is_read_whole(varied):
    """A run over a day with no hand-out in its config (a backfill, a materialization from
    the UI) processes every report of that day in its landing folder, and only those."""
    pipeline = varied
    job = pipeline.defs.resolve_job_def(JOB_NAME)
    result = job.execute_in_process(instance=pipeline.instance, partition_key=DAY[LEGACY],
                                    raise_on_error=False)
    assert result.success
    assert _frames_of(pipeline.instance, DAY[LEGACY]) == ["landing/a.report",
                                                          f"landing/{LEGACY}"]
    assert set(pipeline.tables.read_table(REGION_TABLE)["report"]) == {
        "landing/a.report", f"landing/{LEGACY}", f"landing/{YAML}"}


def test_a_report_landed_again_in_place_replaces_its_rows(varied, tmp_path):
    """A report rewritten in place is handed out alone, in its day, and its rows are
    replaced; rewritten with a start on another day, it moves to that day's partition and
    its rows are replaced again: the tables equal a rebuild from scratch each time."""
    pipeline, landing = varied, varied.landing
    path = landing / "a.report"

    def package_j() -> float:
        report = pipeline.tables.read_table(REPORT_TABLE).set_index(["report", "section"])
        return report.loc[("landing/a.report", "application"), "package_energy_j"]

    before = package_j()
    legacy_variant(path, 20, scale=4.0)
    settle()
    [again] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(again.run_config) == {DAY[LEGACY]: ["landing/a.report"]}
    assert pipeline.launch(again).success
    assert package_j() == pytest.approx(2 * before, rel=1e-5)
    assert_equal_to_a_rebuild(pipeline, landing, tmp_path / "first")

    legacy_variant(path, 20, scale=4.0, start="Thu Apr 02 09:00:{second:02d} 2020")
    settle()
    [moved] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(moved.run_config) == {"landing/2020-04-02": ["landing/a.report"]}
    assert pipeline.launch(moved).success
    assert pipeline.partitions() == [*DAYS, "landing/2020-04-02"]
    frames = load_frames(pipeline.tables, "header", ["landing/a.report"])
    assert f"{frames['start_time'].iloc[0]:%Y-%m-%d}" == "2020-04-02"
    assert_equal_to_a_rebuild(pipeline, landing, tmp_path / "second")


def test_a_cursor_of_one_partition_per_report_is_not_taken(pipeline, landing):
    """Upgrading from one partition per report: the sensor's cursor then (a landing state
    saying every report was handed out) is not taken, so every report present is handed
    out again, into its day."""
    settle()
    state = landing_module.LandingState(seen={
        f"landing/{name}": landing_module.read_landed_item(
            landing / name, f"landing/{name}", identify_report).fingerprint
        for name in (LEGACY, YAML)})
    pipeline.cursor = state.to_json()
    [request] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(request.run_config) == {DAY[YAML]: [f"landing/{YAML}"],
                                   DAY[LEGACY]: [f"landing/{LEGACY}"]}
    assert pipeline.launch(request).success
    assert pipeline.tick().run_requests == []


def test_a_run_cancelled_before_the_upgrade_makes_no_later_run_a_retry(pipeline):
    """A hand-out of the old per-report partitions whose run was cancelled before the
    upgrade to days is no hand-out of a day: the first run over the days is no retry, so
    when it is cancelled in turn it is asked for again."""
    pipeline.cancelled_before_days(geopm_report_files.key, f"landing/{LEGACY}", "geopm-old")
    settle()
    request, retry = pipeline.cancelled_and_retried()
    assert GeopmHandOut.named_in(retry.run_config) == GeopmHandOut.named_in(request.run_config) == {
        DAY[YAML]: [f"landing/{YAML}"], DAY[LEGACY]: [f"landing/{LEGACY}"]}


def test_a_report_landed_again_broken_keeps_what_was_stored(ran):
    """The legacy report rewritten in place cut short: its day fails naming it, and its
    frames, host energy, rows and facts stay those of its good version."""
    pipeline, landing = ran, ran.landing
    key = f"landing/{LEGACY}"
    before = kept_tables(pipeline.tables)
    frames = load_frames(pipeline.tables, "regions", [key])
    lines = (EXAMPLES / LEGACY).read_text().splitlines(keepends=True)
    (landing / LEGACY).write_text("".join(lines[:111]))
    settle()
    [broken] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(broken.run_config) == {DAY[LEGACY]: [key]}
    result = pipeline.launch(broken)
    assert not result.success
    assert pipeline.status(geopm_validated_frames.key) == {
        DAY[YAML]: dg.AssetPartitionStatus.MATERIALIZED,
        DAY[LEGACY]: dg.AssetPartitionStatus.FAILED}
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == VALID_CHECK]
    assert (check.partition, check.metadata["line"].value) == (DAY[LEGACY], 111)
    pd.testing.assert_frame_equal(load_frames(pipeline.tables, "regions", [key]), frames)
    for table, rows in kept_tables(pipeline.tables).items():
        pd.testing.assert_frame_equal(rows, before[table], obj=table)


def test_a_day_failing_on_a_bad_report_hands_out_that_report_again_alone(failed):
    """While a bad report is not fixed, its day stays failed: each later hand-out of the day
    is its new reports and the bad one (what its failed run named), not the day's good
    ones again; fixed, it is handed out alone and the day passes."""
    pipeline, landing = failed, failed.landing
    bad = landing / "cut.report"
    for name, second in (("a.report", 20), ("b.report", 25)):
        legacy_variant(landing / name, second, scale=2.0)
        settle()
        [request] = pipeline.tick().run_requests
        assert GeopmHandOut.named_in(request.run_config) == {DAY[LEGACY]: [f"landing/{name}", "landing/cut.report"]}
        assert not pipeline.launch(request).success
        assert pipeline.status(geopm_validated_frames.key)[DAY[LEGACY]] == (
            dg.AssetPartitionStatus.FAILED)
        assert f"landing/{name}" in set(pipeline.tables.read_table(REGION_TABLE)["report"])
    legacy_variant(bad, 30, scale=3.0)  # fixed: a whole report of the same day
    settle()
    [fixed] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(fixed.run_config) == {DAY[LEGACY]: ["landing/cut.report"]}
    assert pipeline.launch(fixed).success
    assert pipeline.status(geopm_validated_frames.key) == {
        DAY[YAML]: dg.AssetPartitionStatus.MATERIALIZED,
        DAY[LEGACY]: dg.AssetPartitionStatus.MATERIALIZED}
    assert set(pipeline.tables.read_table(REGION_TABLE)["report"]) == {
        "landing/a.report", "landing/b.report", "landing/cut.report", f"landing/{LEGACY}",
        f"landing/{YAML}"}


def test_a_bad_report_fixed_into_another_day_clears_its_old_day(failed):
    """A bad report fixed so that it starts on another day is handed out in that day, and its
    old day, FAILED on it alone, is in the same run naming no report (its good one is not
    read again): it passes without the bad one, and both days show MATERIALIZED."""
    pipeline, landing = failed, failed.landing
    bad = landing / "cut.report"
    legacy_variant(bad, 30, scale=3.0, start="Thu Apr 02 09:00:30 2020")
    settle()
    [fixed] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(fixed.run_config) == {DAY[LEGACY]: [], "landing/2020-04-02": ["landing/cut.report"]}
    assert (fixed.tags[RANGE_START], fixed.tags[RANGE_END]) == (DAY[LEGACY], "landing/2020-04-02")
    assert pipeline.launch(fixed).success
    assert pipeline.status(geopm_validated_frames.key) == {
        DAY[YAML]: dg.AssetPartitionStatus.MATERIALIZED,
        DAY[LEGACY]: dg.AssetPartitionStatus.MATERIALIZED,
        "landing/2020-04-02": dg.AssetPartitionStatus.MATERIALIZED}
    assert _frames_of(pipeline.instance, DAY[LEGACY]) == []
    assert f"landing/{LEGACY}" in set(pipeline.tables.read_table(REGION_TABLE)["report"])
    settle()
    assert pipeline.tick().run_requests == []


def test_a_landing_while_its_days_run_is_in_flight_waits_and_rereads_only_its_failures(failed):
    """A report landing while the sensor's own run over its day is in flight (the day
    IN_PROGRESS, not FAILED) is handed out once that run has ended, with the reports that
    run recorded as failed and no other: its good reports are not read again (when a
    hand-out listed the one in flight, each run re-read the day so far), and the day
    stays failed until the bad report is fixed."""
    pipeline, landing = failed, failed.landing
    bad = landing / "cut.report"
    legacy_variant(landing / "a.report", 20, scale=2.0)
    settle()
    [second] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(second.run_config) == {DAY[LEGACY]: ["landing/a.report", "landing/cut.report"]}
    in_flight = pipeline.instance.create_run_for_job(
        pipeline.defs.resolve_job_def(JOB_NAME), run_config=second.run_config,
        status=dg.DagsterRunStatus.STARTED,
        tags={**second.tags, RUN_KEY_TAG: second.run_key, "dagster/sensor_name": SENSOR_NAME})
    assert pipeline.status(geopm_validated_frames.key)[DAY[LEGACY]] == (
        dg.AssetPartitionStatus.IN_PROGRESS)
    legacy_variant(landing / "e.report", 40, scale=3.0)
    settle()
    before = pipeline.cursor
    data = pipeline.tick()
    assert data.run_requests == [] and pipeline.cursor == before
    assert data.skip_message.startswith(
        f"a run of {JOB_NAME} asked for by this sensor is in flight ({in_flight.run_id})")
    pipeline.instance.delete_run(in_flight.run_id)
    assert not pipeline.launch(second).success  # the run in flight: a.report passes
    [third] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(third.run_config) == {DAY[LEGACY]: ["landing/cut.report", "landing/e.report"]}
    assert not pipeline.launch(third).success
    assert pipeline.status(geopm_validated_frames.key)[DAY[LEGACY]] == (
        dg.AssetPartitionStatus.FAILED)
    bad.write_text((EXAMPLES / LEGACY).read_text())
    settle()
    [fixed] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(fixed.run_config) == {DAY[LEGACY]: ["landing/cut.report"]}
    assert pipeline.launch(fixed).success


def test_a_failure_found_by_a_whole_day_run_is_rechecked(ran):
    """A whole-day run (the UI's, the weekly re-validation) records which reports failed
    in each day, as every run does: the day's next hand-out rechecks them even though
    the latest hand-out's run passed; a later whole-day run that passes clears them."""
    pipeline, landing = ran, ran.landing
    bad = landing / "cut.report"
    bad.write_text("".join((EXAMPLES / LEGACY).read_text().splitlines(keepends=True)[:111]))
    job = pipeline.defs.resolve_job_def(JOB_NAME)
    whole = job.execute_in_process(instance=pipeline.instance, partition_key=DAY[LEGACY],
                                   raise_on_error=False)
    assert not whole.success
    assert [e.metadata["failed_entries"].value for e in _observed(whole)] == [
        ["landing/cut.report"]]
    legacy_variant(landing / "a.report", 20, scale=2.0)
    settle()
    [request] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(request.run_config) == {DAY[LEGACY]: ["landing/a.report", "landing/cut.report"]}
    bad.unlink()
    assert job.execute_in_process(instance=pipeline.instance, partition_key=DAY[LEGACY]).success
    legacy_variant(landing / "b.report", 25, scale=2.0)
    settle()
    [later] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(later.run_config) == {DAY[LEGACY]: ["landing/b.report"]}


def test_a_run_that_reads_no_report_again_keeps_the_days_failures(ran):
    """A run of a day's host energy alone (from the frames stored: the UI materializing it)
    reads no report again, so it records nothing: the failure the day's last reading found
    stays rechecked, though the older frames of the report broken since give it energy."""
    pipeline, landing = ran, ran.landing
    legacy = landing / LEGACY
    legacy.write_text("".join(legacy.read_text().splitlines(keepends=True)[:111]))
    settle()
    [broken] = pipeline.tick().run_requests
    assert not pipeline.launch(broken).success
    job = pipeline.defs.resolve_job_def(JOB_NAME)
    energy_only = job.execute_in_process(instance=pipeline.instance, partition_key=DAY[LEGACY],
                                         asset_selection=[geopm_host_energy.key])
    assert energy_only.success and _observed(energy_only) == []
    legacy_variant(landing / "a.report", 20, scale=2.0)
    settle()
    [request] = pipeline.tick().run_requests
    assert sorted(GeopmHandOut.named_in(request.run_config)[DAY[LEGACY]]) == ["landing/a.report", f"landing/{LEGACY}"]


def test_a_cancelled_hand_out_into_a_failed_day_is_asked_again_once(failed):
    """The reports handed out to a CANCELED run are asked for again once though their day
    FAILED, those still there, each in one day of the run: a report of the cancelled
    hand-out that moved to another day since is processed there alone."""
    pipeline, landing = failed, failed.landing
    for name in ("a.report", "b.report"):
        legacy_variant(landing / name, 20, scale=2.0)
    settle()
    [request] = pipeline.tick().run_requests
    run = pipeline.instance.create_run_for_job(
        pipeline.defs.resolve_job_def(JOB_NAME), run_config=request.run_config,
        tags={**request.tags, RUN_KEY_TAG: request.run_key})
    pipeline.instance.report_run_canceled(run)
    (landing / "b.report").unlink()
    legacy_variant(landing / "a.report", 20, scale=2.0, start="Thu Apr 02 09:00:20 2020")
    settle()
    [retry] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(retry.run_config) == {DAY[LEGACY]: ["landing/cut.report"],
                                 "landing/2020-04-02": ["landing/a.report"]}
    assert retry.tags[RETRY_OF_TAG] == request.run_key
    assert not pipeline.launch(retry).success
    assert "landing/a.report" in set(pipeline.tables.read_table(REGION_TABLE)["report"])
    settle()
    assert pipeline.tick().run_requests == []


def test_a_cancelled_hand_out_whose_reports_are_all_gone_asks_for_nothing(ran):
    """A CANCELED run's day none of whose reports is left is not handed out empty (a run
    storing "0 reports" would mark the day materialized): the next tick asks for nothing."""
    pipeline, landing = ran, ran.landing
    legacy_variant(landing / "a.report", 20, scale=2.0)
    settle()
    [request] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(request.run_config) == {DAY[LEGACY]: ["landing/a.report"]}
    run = pipeline.instance.create_run_for_job(
        pipeline.defs.resolve_job_def(JOB_NAME), run_config=request.run_config,
        tags={**request.tags, RUN_KEY_TAG: request.run_key})
    pipeline.instance.report_run_canceled(run)
    (landing / "a.report").unlink()
    settle()
    assert pipeline.tick().run_requests == []


def test_a_cancelled_hand_out_tagged_not_to_retry_is_not_rechecked_with_its_day(ran):
    """The reports of a CANCELED run tagged ``joulehouse/no_retry=true`` (an operator's "leave
    them be") are not listed again with the next hand-out of their day: that run asks for the
    report landed since alone."""
    pipeline, landing = ran, ran.landing
    legacy_variant(landing / "a.report", 20, scale=2.0)
    settle()
    [request] = pipeline.tick().run_requests
    run = pipeline.instance.create_run_for_job(
        pipeline.defs.resolve_job_def(JOB_NAME), run_config=request.run_config,
        tags={**request.tags, RUN_KEY_TAG: request.run_key, NO_RETRY_TAG: "true"})
    pipeline.instance.report_run_canceled(run)
    legacy_variant(landing / "b.report", 25, scale=3.0)
    settle()
    [request] = pipeline.tick().run_requests
    assert GeopmHandOut.named_in(request.run_config) == {DAY[LEGACY]: ["landing/b.report"]}


def test_a_whole_day_run_of_a_day_with_no_report_left_passes(ran):
    """A day read whole (the UI, the weekly re-validation) whose reports are all gone
    stores nothing and passes, showing zero reports."""
    pipeline, landing = ran, ran.landing
    (landing / YAML).unlink()
    result = pipeline.defs.resolve_job_def(JOB_NAME).execute_in_process(
        instance=pipeline.instance, partition_key=DAY[YAML])
    assert result.success
    energy_day = _latest(pipeline.instance, geopm_host_energy.key, DAY[YAML]).metadata
    assert (energy_day["reports"].value, energy_day["total_energy_j"].value) == (0, 0.0)


def test_a_run_without_partitions_drops_a_removed_report_but_not_an_unmounted_folder(ran):
    """The tables over all reports, materialized without partitions, keep the stored
    reports still in their landing folder: a removed report's rows and facts go; a
    landing folder that cannot be listed, or lists nothing (unmounted), keeps all of its."""
    pipeline, landing = ran, ran.landing
    job = pipeline.defs.resolve_job_def(JOB_NAME)
    tables_only = [geopm_region_energy.key, geopm_report_energy.key, geopm_energy_facts.key]

    def reports() -> dict[str, set[str]]:
        assert job.execute_in_process(instance=pipeline.instance,
                                      asset_selection=tables_only).success
        return {table: {entity.rsplit("/", 1)[0] if table == FACTS_TABLE else entity
                        for entity in pipeline.tables.read_table(table)[column]}
                for table, column in ((REGION_TABLE, "report"), (REPORT_TABLE, "report"),
                                      (FACTS_TABLE, "entity"))}

    both = frozenset({f"landing/{LEGACY}", f"landing/{YAML}"})
    unmounted = landing.rename(landing.with_name("unmounted"))
    assert reports() == dict.fromkeys((REGION_TABLE, REPORT_TABLE, FACTS_TABLE), both)
    landing.mkdir()  # a mount point with nothing mounted on it: an empty folder
    assert reports() == dict.fromkeys((REGION_TABLE, REPORT_TABLE, FACTS_TABLE), both)
    landing.rmdir()
    unmounted.rename(landing)
    (landing / YAML).unlink()
    assert reports() == dict.fromkeys((REGION_TABLE, REPORT_TABLE, FACTS_TABLE),
                                      frozenset({f"landing/{LEGACY}"}))


def test_a_report_gone_between_tick_and_run_fails_its_day_alone(pipeline, landing):
    """A report removed after it was handed out fails its day, naming its file; the run's
    other day is stored."""
    settle()
    [request] = pipeline.tick().run_requests
    (landing / YAML).unlink()
    result = pipeline.launch(request)
    assert not result.success
    [check] = [c for c in result.get_asset_check_evaluations()
               if c.check_name == VALID_CHECK and not c.passed]
    assert check.partition == DAY[YAML]
    assert check.metadata["file"].value == str(landing / YAML)
    assert "no GEOPM report here any more" in check.metadata["error"].value
    assert pipeline.status(geopm_host_energy.key) == {
        DAY[YAML]: dg.AssetPartitionStatus.FAILED,
        DAY[LEGACY]: dg.AssetPartitionStatus.MATERIALIZED}
