"""The GEOPM Dagster layer: landing sensor, one run over many reports, a bad report alone."""

import os
import shutil
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

import sensors.geopm
from assets.geopm import (
    FACTS_TABLE,
    HOST_TABLE,
    REGION_TABLE,
    REPORT_TABLE,
    geopm_energy_facts,
    geopm_host_energy,
    geopm_region_energy,
    geopm_report_energy,
    geopm_report_files,
    geopm_reports,
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
from sensors.partition_runs import RANGE_END, RANGE_START
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.source_runs import SourceRuns
from tests.dagster_sqlite import empty_instance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"
LEGACY = "geopmbench_1host.legacy.report"
YAML = "fm_stream_dgemm_2host.yaml.report"
# Application Totals, package + DRAM energy over all hosts (J), as the reports write them
ENERGY_J = {LEGACY: 4406.26 + 328.19, YAML: 83998.9 + 8218.69 + 85946.8 + 10142.6}
# (hosts, distinct regions, host energy rows: regions + 3 totals sections per host)
SHAPE = {LEGACY: (1, 6, 6 + 3), YAML: (2, 13, 26 + 6)}


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    """A landing folder ``landing`` holding copies of the two bundled reports, quiet."""
    folder = tmp_path / "landing"
    folder.mkdir()
    for name in (LEGACY, YAML):
        shutil.copy(EXAMPLES / name, folder / name)
    return folder


class Pipeline(SourceRuns):
    """The definitions over one landing folder: tick the GEOPM sensor, run what it asks."""

    def __init__(self, instance, landing: Path, warehouse: Path,
                 workers: StepWorkers | None = None):
        self.source = GeopmReportSource(landing_folders=[str(landing)], quiet_period_s=QUIET_S)
        self.warehouse = Warehouse(root=str(warehouse))
        defs = build_definitions(
            GpuBenchmarkSource(data_roots=[DataRoot(path=str(landing))]), self.warehouse,
            geopm_source=self.source, workers=workers)
        super().__init__(instance, defs, SENSOR_NAME, JOB_NAME, "geopm_source", self.source,
                         geopm_reports)
        self.tables = Tables(warehouse)


@pytest.fixture
def pipeline(instance, landing, tmp_path) -> Pipeline:
    return Pipeline(instance, landing, tmp_path / "warehouse")


def test_the_bundled_reports_materialize_in_one_run(pipeline):
    settle()
    [request] = pipeline.tick().run_requests
    keys = [f"landing/{YAML}", f"landing/{LEGACY}"]  # sorted by file name
    assert pipeline.partitions() == keys
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == tuple(keys)
    result = pipeline.launch(request)
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
        metadata = _latest(pipeline.instance, geopm_host_energy.key, key).metadata
        hosts, regions, rows = SHAPE[name]
        assert metadata["dagster/row_count"].value == rows
        assert (metadata["host_count"].value, metadata["region_count"].value) == (hosts, regions)
        assert metadata["total_energy_j"].value == pytest.approx(ENERGY_J[name])
        assert metadata["energy_per_region"].value.startswith(
            f"![energy per region of {key}](data:image/png;base64,iVBORw0KGgo")
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
            if c.check_name == VALID_CHECK} == {key: True for key in keys}


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
            keys = pipeline.partitions()
            with TaudbResource(url=embedded_taudb_url(pipeline.warehouse.root)).open() as db:
                stored[workers] = {
                    HOST_TABLE: pipeline.tables.read_partitions(HOST_TABLE, keys),
                    **{table: sorted(db.query(f"SELECT * FROM {table}"), key=repr)
                       for table in TAUDB_TABLES}}
    one, two = stored[1], stored[2]
    pd.testing.assert_frame_equal(one.pop(HOST_TABLE), two.pop(HOST_TABLE))
    assert len(one["trial"]) == 2 and len(one["timer_value"]) > 100
    assert one == two


def _latest(instance, asset: dg.AssetKey, partition: str | None = None):
    """The latest materialization of ``asset`` (of ``partition``)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset,
                              asset_partitions=[partition] if partition else None), limit=1)
    return records.records[0].asset_materialization


def test_a_bad_report_fails_alone_and_is_picked_up_once_fixed(pipeline, landing):
    bad = landing / "cut.report"
    lines = (EXAMPLES / LEGACY).read_text().splitlines(keepends=True)
    bad.write_text("".join(lines[:111]))  # the host's last line (memory HWM) missing
    settle()
    [request] = pipeline.tick().run_requests
    result = pipeline.launch(request)

    assert not result.success
    good = [f"landing/{YAML}", f"landing/{LEGACY}"]
    for asset in (geopm_validated_frames.key, geopm_host_energy.key):
        assert pipeline.status(asset) == {
            "landing/cut.report": dg.AssetPartitionStatus.FAILED,
            **{key: dg.AssetPartitionStatus.MATERIALIZED for key in good}}, asset
    checks = {c.partition: c for c in result.get_asset_check_evaluations()
              if c.check_name == VALID_CHECK}
    check = checks["landing/cut.report"]
    assert not check.passed and checks[good[0]].passed and checks[good[1]].passed
    assert check.metadata["file"].value == str(bad)
    assert check.metadata["line"].value == 111
    assert "truncated report" in check.metadata["error"].value
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        "1 of 3 partition(s) failed:\nlanding/cut.report: ")
    # the good reports reached the tables in the same run
    assert set(pipeline.tables.read_table(REGION_TABLE)["report"]) == set(good)
    facts = pipeline.tables.read_table(FACTS_TABLE)
    assert facts["energy_j"].sum() == pytest.approx(sum(ENERGY_J.values()))

    # nothing changed: nothing asked; fixed in place: asked again, alone, once quiet
    assert pipeline.tick().run_requests == []
    shutil.copy(EXAMPLES / LEGACY, bad)
    os.utime(bad)
    assert pipeline.tick().run_requests == []  # inside its quiet period
    settle()
    [fixed] = pipeline.tick().run_requests
    assert fixed.tags[RANGE_START] == fixed.tags[RANGE_END] == "landing/cut.report"
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


def test_a_first_run_of_only_bad_reports_names_them(pipeline, landing):
    for name in (LEGACY, YAML):
        (landing / name).unlink()
    (landing / "bad.report").write_text("##### geopm 1.1.0 #####\nHost: a\nRegion r (0x1):\n")
    settle()
    result = pipeline.launch(pipeline.tick().run_requests[0])
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        "1 of 1 partition(s) failed:\nlanding/bad.report: ")
    assert not pipeline.tables.table_dir(REGION_TABLE).exists()


def test_a_report_inside_its_quiet_period_waits(pipeline, landing):
    settle()
    first = pipeline.tick()
    assert pipeline.partitions() == [f"landing/{YAML}", f"landing/{LEGACY}"]
    assert len(first.run_requests) == 1
    (landing / "notes.txt").write_text("not a report\n")  # ignored
    shutil.copy(EXAMPLES / YAML, landing / "young.report")
    data = pipeline.tick()
    assert data.run_requests == [] and data.dynamic_partitions_requests == []
    assert "(1 waiting for the 1 s quiet period)" in data.skip_message
    settle()
    [request] = pipeline.tick().run_requests
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == "landing/young.report"
    assert pipeline.partitions()[-1] == "landing/young.report"


def test_no_run_is_asked_for_while_one_waits_in_the_queue_then_one_covers_both(
        pipeline, landing):
    """The sensor has a run of its own not yet taken from the queue (NOT_STARTED here, as
    QUEUED would need the daemon's origin): the tick asks for none (it would wait behind
    it) and keeps its cursor; once that run has left the queue, the next tick hands out,
    in one run, the reports ready meanwhile. Another's run of the job (a backfill's) holds
    nothing back."""
    settle()
    assert len(pipeline.tick().run_requests) == 1
    pipeline.instance.add_run(dg.DagsterRun(job_name=JOB_NAME, run_id="backfill",
                                            status=dg.DagsterRunStatus.NOT_STARTED))
    shutil.copy(EXAMPLES / LEGACY, landing / "first.report")
    settle()
    [request] = pipeline.tick().run_requests
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == "landing/first.report"
    pipeline.instance.add_run(dg.DagsterRun(job_name=JOB_NAME, run_id="waiting",
                                            status=dg.DagsterRunStatus.NOT_STARTED,
                                            tags={"dagster/sensor_name": SENSOR_NAME}))
    shutil.copy(EXAMPLES / YAML, landing / "second.report")
    shutil.copy(EXAMPLES / LEGACY, landing / "third.report")
    settle()
    before = pipeline.cursor
    data = pipeline.tick()
    assert data.run_requests == [] and data.dynamic_partitions_requests == []
    assert data.skip_message.startswith(f"a run of {JOB_NAME} is waiting in the queue (waiting)")
    assert pipeline.cursor == before
    pipeline.instance.report_run_failed(pipeline.instance.get_run_by_id("waiting"))
    [request] = pipeline.tick().run_requests
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (
        "landing/second.report", "landing/third.report")


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
    assert late.tags[RANGE_START] == late.tags[RANGE_END] == "landing/late.report"
    (tmp_path / "nfs.away").rename(nfs)
    back = pipeline.tick()
    assert back.run_requests == [] and back.skip_message.startswith(
        "no new or changed GEOPM report(s) ready (0 waiting")
    assert pipeline.partitions() == [f"landing/{YAML}", f"landing/{LEGACY}", "nfs/remote.report",
                                     "landing/late.report"]


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
    assert chmodded.tags[RANGE_START] == chmodded.tags[RANGE_END] == f"landing/{older}"
    assert chmodded.run_key != first.run_key
    assert pipeline.launch(chmodded).success
    data = pipeline.tick()
    assert data.run_requests == [] and data.skip_message.startswith(
        "no new or changed GEOPM report(s) ready (0 waiting")
    with open(landing / LEGACY, "a") as report:
        report.write("\n")  # rewritten: a new fingerprint
    settle()
    [again] = pipeline.tick().run_requests
    assert again.tags[RANGE_START] == again.tags[RANGE_END] == f"landing/{LEGACY}"
    assert again.run_key != first.run_key


def test_a_hand_out_whose_run_was_never_reserved_is_asked_again(pipeline):
    """The tick's files events are stored, then the daemon dies (or its gRPC call times
    out) before the run is reserved: the cursor is not kept, and the next tick asks again
    for the same reports, with the same run key (their frames were never materialized)."""
    settle()
    before = pipeline.cursor
    [first] = pipeline.tick().run_requests
    assert _latest(pipeline.instance, geopm_report_files.key, f"landing/{LEGACY}") is not None
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
    status = {f"landing/{LEGACY}": dg.AssetPartitionStatus.FAILED}
    if not alone:
        status[f"landing/{YAML}"] = dg.AssetPartitionStatus.MATERIALIZED
    assert pipeline.status(geopm_validated_frames.key) == status
    shutil.copy(EXAMPLES / YAML, landing / "later.report")  # the watermark passes LEGACY
    settle()
    [later] = pipeline.tick().run_requests
    assert later.tags[RANGE_START] == later.tags[RANGE_END] == "landing/later.report"
    for _ in range(2):
        assert pipeline.tick().run_requests == []
    path.write_bytes(good)  # cp -p of the good report over the bad one
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    settle()
    [fixed] = pipeline.tick().run_requests
    assert fixed.tags[RANGE_START] == fixed.tags[RANGE_END] == f"landing/{LEGACY}"
    if alone:
        assert fixed.run_key == first.run_key
        return
    assert fixed.run_key != first.run_key
    assert pipeline.launch(fixed).success
    assert pipeline.status(geopm_validated_frames.key)[f"landing/{LEGACY}"] == (
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
    assert pipeline.partitions()[-2:] == ["landing/late.report", "landing/locked.report"]
    assert pipeline.tick().run_requests == []
