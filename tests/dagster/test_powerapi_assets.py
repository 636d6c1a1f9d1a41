"""PowerAPI in Dagster: report entries in day partitions, one step to the tables, the landing
sensor (a day's hand-outs, rechecks and upgrade: test_powerapi_days.py)."""

import os
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from assets.powerapi import (
    COMPUTED_CHECK,
    PLOTS_SHOWN,
    REPORT_ENERGY_TABLE,
    VALID_CHECK,
    WINDOW_TABLE,
    PowerapiHandOut,
    power_plots,
    powerapi_days,
    store_piece,
    store_pieces_and_energy,
    store_report_energy,
)
from definitions import build_definitions
from joulehouse import entry_table
from joulehouse.powerapi import layout, report_energy
from joulehouse.powerapi.energy import energy_facts_rows
from joulehouse.powerapi.reports import read_reports
from joulehouse.powerapi.stream import ReportStore
from joulehouse.warehouse import Warehouse as Tables
from resources import DataRoot, GpuBenchmarkSource, PowerapiSource, StepWorkers, Warehouse
from resources.powerapi import LANDING_ENV, READER_ENV
from sensors.partition_runs import RANGE_END, RANGE_START
from sensors.powerapi import JOB_NAME, SENSOR_NAME
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.source_runs import SourceRuns
from tests.dagster_sqlite import empty_instance

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = PROJECT_ROOT / "examples" / "powerapi"
FIXTURE_J = 12.19696044921875  # the ten-tick SmartWatts fixture's RAPL energy
VALID = dg.AssetKey("powerapi_validated_frames")
ENERGY = dg.AssetKey("powerapi_report_energy")
FACTS = dg.AssetKey(["energy_facts", "powerapi"])
#: The UTC day of the bundled reports' first report.
DATE = "2021-01-13"


class Landing(SourceRuns):
    """The PowerAPI sensor and job over one landing folder, in one instance."""

    def __init__(self, instance, folder: Path, tmp_path: Path, quiet_s: float = QUIET_S,
                 workers: StepWorkers | None = None, **settings):
        self.source = PowerapiSource(landing_folders=[str(folder)], quiet_period_s=quiet_s,
                                     **settings)
        self.warehouse = Warehouse(root=str(tmp_path / "warehouse"))
        defs = build_definitions(
            GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path))]), self.warehouse,
            powerapi_source=self.source, workers=workers)
        super().__init__(instance, defs, SENSOR_NAME, JOB_NAME,
                         "powerapi_source", self.source, powerapi_days)

    def tables(self) -> Tables:
        return self.warehouse.tables()

    def run_whole(self, **kwargs) -> dg.ExecuteInProcessResult:
        """The job executed as a backfill or the UI does: no entry named."""
        return self.defs.resolve_job_def(JOB_NAME).execute_in_process(
            instance=self.instance, raise_on_error=False, **kwargs)


def frames_of(result: dg.ExecuteInProcessResult, day: str) -> dict:
    """The validated frames' metadata of ``day`` in ``result``."""
    [frames] = [m.metadata for m in result.asset_materializations_for_node("powerapi_pipeline")
                if m.asset_key == VALID and m.partition == day]
    return frames


def _measured(table: pd.DataFrame) -> float:
    return table.loc[table["method"] == "measured", "energy_j"].sum()


def test_the_bundled_examples_reach_the_tables_in_one_run(instance, tmp_path):
    landing = Landing(instance, EXAMPLES, tmp_path, quiet_s=0)
    [request] = landing.tick().run_requests
    keys = ["powerapi/hwpc-csv", "powerapi/power.jsonl", "powerapi/smartwatts_timeline.jsonl"]
    day = f"powerapi/{DATE}"
    assert landing.partitions() == [day]  # one day; PROVENANCE.md is not a report file
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == day
    assert PowerapiHandOut.named_in(request.run_config) == {day: keys}
    result = landing.launch(request)
    assert result.success

    checks = {(c.check_name, c.partition): c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {(VALID_CHECK, day): True, (COMPUTED_CHECK, day): True}
    for asset in (VALID, ENERGY):
        assert landing.status(asset) == {day: dg.AssetPartitionStatus.MATERIALIZED}
    frames = frames_of(result, day)
    # counters + RAPL rows + power reports of the day's entries: one data set in two forms
    # (HWPC CSV, JSON lines) and its power reports
    assert frames["rows"].value == {"counters": 2 * 1870, "rapl_energy": 20, "power_reports": 40}
    assert (frames["entries"].value, frames["entry_keys"].value) == (3, keys)
    assert {key: read["read"] for key, read in frames["reads"].value.items()} == dict.fromkeys(
        keys, "whole")
    assert ReportStore(landing.tables()).stored_keys() == keys

    tables = landing.tables()
    for key in ("powerapi/hwpc-csv", "powerapi/smartwatts_timeline.jsonl"):
        own = tables.read_partitions(REPORT_ENERGY_TABLE, [key])
        assert _measured(own) == pytest.approx(FIXTURE_J, rel=1e-12)
    table = tables.read_table(WINDOW_TABLE)
    assert _measured(table) == pytest.approx(FIXTURE_J, rel=1e-12)  # counted once, not twice
    estimated = table[table["method"] == "estimated"].groupby("target")["energy_j"].sum()
    assert set(estimated.index) == {"rapl", "influxdb", "mongo", "powerapi-sensor"}
    assert estimated["rapl"] == pytest.approx(FIXTURE_J, rel=1e-6)
    cgroups = estimated.drop("rapl").sum()
    assert cgroups == pytest.approx(0.9 * FIXTURE_J, rel=1e-5)  # 10 % under by construction
    assert table["relative_error"].to_numpy() == pytest.approx(-0.1, abs=1e-5)

    [window] = [m for m in result.asset_materializations_for_node("powerapi_pipeline")
                if m.asset_key == dg.AssetKey(WINDOW_TABLE)]
    assert window.metadata["dagster/row_count"].value == len(table) == 5
    assert window.metadata["reports_given_twice"].value == {"rapl_energy": 10,
                                                            "power_reports": 0}
    assert "data:image/png;base64," in window.metadata["power_over_time"].value
    described = {c.name: c.description for c in window.metadata["dagster/column_schema"].value.columns}
    assert described["relative_error"].startswith("(estimated_total_j - measured_j)")

    facts = landing.tables().read_table("energy_facts")
    order = ["entity", "component", "window_start", "method"]
    pd.testing.assert_frame_equal(  # a rebuild from scratch, at Delta's microseconds
        facts.sort_values(order, ignore_index=True),
        entry_table.to_microseconds(energy_facts_rows(table)).sort_values(order, ignore_index=True))
    # the formula's whole-machine estimate (target rapl) is no fact: the measurement is
    assert len(facts) == len(table) - 1 and set(facts["source"]) == {"powerapi"}
    assert set(facts["entity"]) == {f"sensor_test/{t}" for t in [*estimated.index.drop("rapl"), "all"]}
    by_method = facts.groupby("method")["energy_j"].sum()
    assert by_method["measured"] == pytest.approx(FIXTURE_J)
    assert by_method["estimated"] == pytest.approx(0.9 * FIXTURE_J, rel=1e-5)
    [facts_event] = [m for m in result.asset_materializations_for_node("powerapi_pipeline")
                     if m.asset_key == FACTS]
    assert facts_event.metadata["dagster/row_count"].value == 4


def test_one_process_and_two_store_the_same_energy(tmp_path):
    """Each entry's frames and energy in the step's own process (JOULEHOUSE_STEP_WORKERS=1)
    or in two worker processes: the same rows."""
    stored = {}
    for workers in (1, 2):
        with empty_instance() as instance:
            landing = Landing(instance, EXAMPLES, tmp_path / str(workers), quiet_s=0,
                              workers=StepWorkers(
                                  max_workers=workers, partitions_per_worker=1))
            assert landing.launch(landing.tick().run_requests[0]).success
            tables = landing.tables()
            stored[workers] = (tables.read_partitions(
                REPORT_ENERGY_TABLE, sorted(tables.partition_keys(REPORT_ENERGY_TABLE))),
                tables.read_table(WINDOW_TABLE))
    for one, two in zip(*stored.values(), strict=True):
        pd.testing.assert_frame_equal(one, two)
    energy, table = stored[1]
    assert _measured(energy) == pytest.approx(2 * FIXTURE_J, rel=1e-12)  # two RAPL entries
    assert len(table) == 5


def test_energy_from_the_piece_in_memory_is_the_energy_from_the_stored_pieces(tmp_path):
    """An entry's own energy in the task that read it (its first piece's frames in memory;
    a later piece's read back) is the energy computed apart from the stored pieces, with
    the same inputs in its footer (what the window table trusts)."""
    path = tmp_path / "landing" / "hwpc.jsonl"
    path.parent.mkdir()
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    both, apart = Tables(tmp_path / "both"), Tables(tmp_path / "apart")
    key, targets = "landing/hwpc.jsonl", ("all", "system")
    for read, part in (("whole", lines[:12]), ("new reports only", lines[12:])):
        with path.open("a") as file:
            file.write("".join(part))
        [(frames, _)] = store_pieces_and_energy(
            [(both, key, path, 0.0, 0.0, "UTC", None, "1min", targets)])
        store_piece(apart, key, path, 0.0, 0.0, "UTC", None)
        store_report_energy(apart, key, path, "1min", targets)
        assert frames.metadata["read"] == read
        pd.testing.assert_frame_equal(
            *(tables.read_partitions(REPORT_ENERGY_TABLE, [key]) for tables in (both, apart)),
            check_exact=True)
        footers = [tables.partition_metadata(REPORT_ENERGY_TABLE, key).get(
            report_energy.INPUTS_METADATA) for tables in (both, apart)]
        assert footers[0] is not None and footers[0] == footers[1], read


def test_a_bad_file_fails_alone_and_the_others_reach_the_tables(instance, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    for name in ("smartwatts_timeline.jsonl", "power.jsonl"):
        shutil.copy(EXAMPLES / name, folder / name)
    lines = (EXAMPLES / "power.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"power":0.531164', '"power":-0.531164')
    bad = folder / "broken.jsonl"
    bad.write_text("".join(lines))
    landing = Landing(instance, folder, tmp_path, quiet_s=0)
    [request] = landing.tick().run_requests
    day = f"landing/{DATE}"
    keys = ["landing/broken.jsonl", "landing/power.jsonl", "landing/smartwatts_timeline.jsonl"]
    assert PowerapiHandOut.named_in(request.run_config) == {day: keys}

    result = landing.launch(request)
    assert not result.success and len(instance.get_runs()) == 1
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        f"1 of 1 partition(s) failed:\n{day}: {bad}:3: ")
    checks = {(c.check_name, c.partition): c for c in result.get_asset_check_evaluations()}
    assert {k: c.passed for k, c in checks.items()} == {(VALID_CHECK, day): False,
                                                        (COMPUTED_CHECK, day): False}
    check = checks[(VALID_CHECK, day)]
    assert check.metadata["file"].value == str(bad)
    assert check.metadata["line"].value == 3
    assert "power" in check.metadata["field"].value
    assert "(1 of 3 entry(s) of day landing/2021-01-13 failed, 2 done)" in check.description
    assert "not computed" in checks[(COMPUTED_CHECK, day)].description
    for asset in (VALID, ENERGY):
        assert landing.status(asset) == {day: dg.AssetPartitionStatus.FAILED}
    tables = landing.tables()
    assert ReportStore(tables).stored_keys() == keys[1:]  # nothing stored for the bad one
    assert sorted(tables.partition_keys(REPORT_ENERGY_TABLE)) == keys[1:]
    table = tables.read_table(WINDOW_TABLE)  # the good ones reached the table in that run
    assert _measured(table) == pytest.approx(FIXTURE_J, rel=1e-12)
    assert table["relative_error"].to_numpy() == pytest.approx(-0.1, abs=1e-5)
    assert len(tables.read_table("energy_facts")) == len(table) - 1  # no rapl estimate

    bad.write_text((EXAMPLES / "power.jsonl").read_text())  # fixed in place
    [fixed] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(fixed.run_config) == {day: ["landing/broken.jsonl"]}
    fixed_run = landing.launch(fixed)
    assert fixed_run.success
    assert frames_of(fixed_run, day)["entry_keys"].value == ["landing/broken.jsonl"]
    assert landing.status(VALID) == {day: dg.AssetPartitionStatus.MATERIALIZED}
    # the same power reports in two files count once
    assert landing.tables().read_table(WINDOW_TABLE).equals(table)
    assert landing.tick().run_requests == []


def test_a_first_run_whose_only_file_is_bad_fails_at_once_with_its_verdict(instance, tmp_path):
    """Nothing stored yet and the one file bad: the run fails with the file's error, once
    (a verdict is not retried), and stores no fact (the soak's first PowerAPI run failed
    instead on the missing window table, retried for minutes)."""
    folder = tmp_path / "landing"
    folder.mkdir()
    lines = (EXAMPLES / "power.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"power":0.531164', '"power":-0.531164')
    (folder / "broken.jsonl").write_text("".join(lines))
    landing = Landing(instance, folder, tmp_path, quiet_s=0)
    [request] = landing.tick().run_requests

    result = landing.launch(request)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        f"1 of 1 partition(s) failed:\nlanding/{DATE}: ")
    assert not [e for e in result.all_events if e.is_step_up_for_retry]
    assert not landing.tables().files("energy_facts")


def test_a_file_still_being_written_waits_for_its_quiet_period(instance, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    shutil.copy(EXAMPLES / "power.jsonl", folder / "power.jsonl")
    (folder / "notes.md").write_text("not a report\n")
    settle()
    landing = Landing(instance, folder, tmp_path)
    [first] = landing.tick().run_requests
    day = f"landing/{DATE}"
    assert PowerapiHandOut.named_in(first.run_config) == {day: ["landing/power.jsonl"]}

    growing = folder / "hwpc.jsonl"
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    growing.write_text("".join(lines[:10]))
    data = landing.tick()
    assert data.run_requests == [] and "(1 waiting for the" in data.skip_message
    with growing.open("a") as file:
        file.write("".join(lines[10:]))
    os.utime(growing)
    assert landing.tick().run_requests == []  # changed again: waits again
    settle()
    [request] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(request.run_config) == {day: ["landing/hwpc.jsonl"]}
    assert request.run_key != first.run_key
    assert landing.partitions() == [day]
    data = landing.tick()
    assert data.run_requests == [] and "(0 waiting for the" in data.skip_message


def test_the_source_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(LANDING_ENV, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    monkeypatch.setenv(READER_ENV["timezone"], "Europe/Paris")
    monkeypatch.setenv(READER_ENV["window"], "10s")
    monkeypatch.setenv("JOULEHOUSE_QUIET_PERIOD_S", "5")
    source = PowerapiSource.from_env(EXAMPLES)
    assert source.landing_folders == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert (source.timezone, source.window, source.quiet_period_s) == ("Europe/Paris", "10s", 5.0)
    assert source.epoch_zone is None
    assert source.resolve("b/power.jsonl") == (tmp_path / "b" / "power.jsonl").resolve()
    monkeypatch.delenv(LANDING_ENV)
    assert PowerapiSource.from_env(EXAMPLES).landing_folders == [str(EXAMPLES)]
    for variable, value, error in ((READER_ENV["timezone"], "Mars/Olympus", "unknown time zone"),
                                   (READER_ENV["window"], "soon", "not a time length"),
                                   (READER_ENV["window"], "0s", "longer than 0")):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ValueError, match=error):
            PowerapiSource.from_env(EXAMPLES)
        monkeypatch.delenv(variable)


def test_a_powerapi_2_10_output_folder_is_one_partition_read_in_its_epoch_zone(
        instance, tmp_path, peer_data):
    """PowerAPI 2.10.0's ``<sensor>-<target>/PowerReport.csv`` tree, written on a machine set
    to Europe/Paris (epoch ms shifted by its offset), landed as one folder: with the
    source's epoch zone its windows are those of the same run written on a UTC machine."""
    generated = peer_data / "powerapi"
    folder = tmp_path / "landing"
    shutil.copytree(generated / "generated_by_powerapi_2.10.0_TZ-Europe-Paris" / "csv_output",
                    folder / "csv_output")
    landing = Landing(instance, folder, tmp_path, quiet_s=0, epoch_zone="Europe/Paris")
    [request] = landing.tick().run_requests
    utc = read_reports(layout.discover(generated / "generated_by_powerapi_2.10.0_TZ-UTC" /
                                       "csv_output"))
    day = f"landing/{utc.power['timestamp'].min():%Y-%m-%d}"  # as read on a UTC machine
    assert PowerapiHandOut.named_in(request.run_config) == {day: ["landing/csv_output"]}
    result = landing.launch(request)
    assert result.success
    assert frames_of(result, day)["rows"].value["power_reports"] == len(utc.power) > 0
    table = landing.tables().read_table(WINDOW_TABLE)
    expected = utc.window_energy(landing.source.window)
    assert set(table["target"]) == {"influxdb", "rapl"}
    pd.testing.assert_frame_equal(table, expected, check_exact=False, rtol=1e-12)


def test_rebuilding_the_tables_with_nothing_stored_fails_and_writes_nothing(instance, tmp_path):
    """No stored partition at all: a clear Failure, as GEOPM and GPU do, not empty tables."""
    folder = tmp_path / "landing"
    folder.mkdir()
    landing = Landing(instance, folder, tmp_path)
    result = landing.defs.resolve_job_def(JOB_NAME).execute_in_process(
        instance=instance, raise_on_error=False,
        asset_selection=[dg.AssetKey(WINDOW_TABLE), FACTS])
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description == (
        "no PowerAPI report stored yet: materialize powerapi_validated_frames for a day "
        "first")
    assert not (Path(landing.warehouse.root) / WINDOW_TABLE).exists()
    assert not (Path(landing.warehouse.root) / "energy_facts").exists()


def test_a_run_without_partitions_drops_removed_entries_but_not_an_unlistable_folder(
        instance, tmp_path):
    """The tables materialized without partitions keep the stored entries still in their
    landing folder: a folder that cannot be listed, or lists nothing (unmounted), keeps
    all of its; one whose every report entry was removed (a note left) empties the window
    table and the facts, as a rebuild from scratch would."""
    folder = tmp_path / "landing"
    shutil.copytree(EXAMPLES, folder)
    landing = Landing(instance, folder, tmp_path, quiet_s=0)
    assert landing.launch(landing.tick().run_requests[0]).success
    stored = landing.tables().read_table(WINDOW_TABLE)
    assert len(stored) == 5

    def rebuilt() -> pd.DataFrame:
        assert landing.run_whole(asset_selection=[dg.AssetKey(WINDOW_TABLE), FACTS]).success
        return landing.tables().read_table(WINDOW_TABLE)

    unmounted = folder.rename(tmp_path / "unmounted")
    pd.testing.assert_frame_equal(rebuilt(), stored)
    folder.mkdir()  # a mount point with nothing mounted on it: an empty folder
    pd.testing.assert_frame_equal(rebuilt(), stored)
    folder.rmdir()
    unmounted.rename(folder)
    (folder / "power.jsonl").unlink()  # the estimates go, the measurement stays
    measured = rebuilt()
    assert set(measured["method"]) == {"measured"} and len(measured) == 1
    assert _measured(measured) == pytest.approx(FIXTURE_J, rel=1e-12)
    assert len(landing.tables().read_table("energy_facts")) == 1
    for entry in ("hwpc-csv", "smartwatts_timeline.jsonl"):
        shutil.rmtree(folder / entry) if entry == "hwpc-csv" else (folder / entry).unlink()
    assert rebuilt().empty  # PROVENANCE.md is left: the folder is listed
    assert landing.tables().read_table("energy_facts").empty


def test_a_growing_file_is_read_on_at_each_run_never_twice(instance, tmp_path):
    """A live sensor's JSON lines, never quiet, written in three steps (the second ends inside
    a report): each tick that finds it grown by grown_bytes asks for a run, each run stores
    only the complete reports written since the last, and the tables equal the whole file's."""
    folder = tmp_path / "landing"
    folder.mkdir()
    path = folder / "hwpc.jsonl"
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    cut = len(lines[25]) // 2
    steps = ["".join(lines[:12]), "".join(lines[12:25]) + lines[25][:cut],
             lines[25][cut:] + "".join(lines[26:])]
    landing = Landing(instance, folder, tmp_path, quiet_s=600, grown_bytes=4096)
    day, key = f"landing/{DATE}", "landing/hwpc.jsonl"
    stored, reads = [], []
    for step in steps:
        with path.open("a") as file:
            file.write(step)
        [request] = landing.tick().run_requests  # not quiet, but grown
        assert PowerapiHandOut.named_in(request.run_config) == {day: [key]}  # its first day
        result = landing.launch(request)
        assert result.success
        frames = frames_of(result, day)
        stored.append(frames["rows"].value["counters"])
        reads.append(frames["reads"].value[key]["read"])
    data = landing.tick()
    assert data.run_requests == [] and "(0 waiting" in data.skip_message
    assert landing.partitions() == [day]
    whole = [len(read_reports(layout.discover(part)).counters) for part in (
        _lines_file(tmp_path / "a.jsonl", lines[:12]),
        _lines_file(tmp_path / "b.jsonl", lines[12:25]),
        _lines_file(tmp_path / "c.jsonl", lines[25:]))]
    assert stored == whole and sum(stored) == 1870  # each report read once
    assert reads == ["whole", "new reports only", "new reports only"]
    table = landing.tables().read_table(WINDOW_TABLE)
    assert _measured(table) == pytest.approx(FIXTURE_J, rel=1e-12)
    pd.testing.assert_frame_equal(table, read_reports(layout.discover(path)).window_energy(
        landing.source.window))


def _lines_file(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines))
    return path


def test_window_plots_are_drawn_for_the_first_sensors_and_the_rest_counted():
    """A landing of many sensors draws PLOTS_SHOWN of them (sensor order), then says how many
    more the table has, rather than one plot per sensor in one metadata entry."""
    start = pd.Timestamp("2021-01-13 09:51", tz="UTC")
    sensors = [f"s{index:02d}" for index in range(PLOTS_SHOWN + 3)]
    table = pd.DataFrame({
        "sensor": sensors, "component": "cpu", "method": "measured", "window_start": start,
        "window_end": start + pd.Timedelta("1min"), "duration_s": 60.0, "energy_j": 600.0,
        "estimated_total_j": 540.0})
    markdown = power_plots(table.sample(frac=1.0, random_state=0))
    titles = [line for line in markdown.splitlines() if line.startswith("### ")]
    assert titles == [f"### {sensor} / cpu" for sensor in sensors[:PLOTS_SHOWN]]
    assert markdown.count("data:image/png;base64,") == PLOTS_SHOWN
    assert markdown.endswith("... and 3 more sensor and component pairs, not drawn: every "
                             "window is in the table")
    assert power_plots(table.head(2)).count("data:image/png;base64,") == 2
