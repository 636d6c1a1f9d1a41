"""Nothing dropped without a word (issue 30): each input that gives no row or loses a part
is said on the command line (stderr, exit code: docs/cli.md "Left out") and in the UI (the
partition's check a WARN, read through GraphQL; the ``left_out`` table), case by case:
PowerAPI's, and a GEOPM report without Start Time (no energy_facts row)."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from test_cli_conventions import joulehouse, one_error_line

from assets.powerapi import COMPUTED_CHECK, VALID_CHECK
from definitions import EXAMPLE_GEOPM_REPORTS, EXAMPLE_POWERAPI, build_definitions
from joulehouse.accounting.query import query
from joulehouse.errors import InputError
from joulehouse.geopm.days import report_day
from joulehouse.landing_days import day_key
from joulehouse.leftout import LEFT_OUT_TABLE, LeftOut
from joulehouse.powerapi import energy, layout, readers, reports
from joulehouse.powerapi.stream import ReportStore
from joulehouse.taudb.mapping.powerapi import read_trials
from joulehouse.warehouse import Warehouse as Tables
from resources import DataRoot, GeopmReportSource, GpuBenchmarkSource, PowerapiSource, Warehouse
from sensors import geopm, powerapi
from sensors.local import launch_in_process, tick
from tests.conftest import skip_or_fail
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.webserver import (
    WEBSERVER,
    check_execution,
    dagster_home,
    warning,
    webserver,
)

POWER = EXAMPLE_POWERAPI / "power.jsonl"
RAPL_CSV = EXAMPLE_POWERAPI / "hwpc-csv" / "rapl.csv"
HEADER = ("sensor,target,component,window_start,window_end,duration_s,covered_s,energy_j,"
          "method,measured_j,estimated_total_j,relative_error\n")
CUT = ("its last report (bytes 1483-1669): the file ends inside it: cut short (a file still "
       "being written is read on later; this one was read to its end)")
ONE_TIMESTAMP = ("power reports (4, targets influxdb, mongo, powerapi-sensor, rapl): all carry "
                 "one timestamp, and no HWPC reports of a machine-level target of the sensor "
                 "give its tick: no tick length, no energy")
NO_START = ("its energy_facts rows (1 host(s)): the report has no Start Time: a fact needs its "
            "window")
NOT_MACHINE = ("RAPL energy of target 'node' (10 report(s)): not a machine-level target "
               "(all, system; the setting JOULEHOUSE_POWERAPI_MACHINE_TARGETS)")


def csv_rows(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text))


def power_reports(count: int) -> list[dict]:
    return [json.loads(line) for line in POWER.read_text().splitlines()[:count]]


def write_array(path: Path, reports: list[dict]) -> Path:
    path.write_text("[" + ",\n".join(json.dumps(report) for report in reports) + "]\n")
    return path


def cut_array(path: Path) -> Path:
    """The first 8 power reports as a JSON array cut 40 bytes before its end: the 8th is
    left out (bytes 1483-1669)."""
    write_array(path, power_reports(8))
    path.write_bytes(path.read_bytes()[:-40])
    return path


def one_timestamp(path: Path) -> Path:
    """The 4 power reports of the first tick: one timestamp, no tick length."""
    path.write_text("".join(POWER.read_text().splitlines(keepends=True)[:4]))
    return path


def mixed_forms(path: Path) -> Path:
    """12 power reports, every other timestamp as epoch ms, the others ISO strings."""
    reports = power_reports(12)
    for report in reports[1::2]:
        report["timestamp"] = pd.Timestamp(report["timestamp"]).value // 1_000_000
    path.write_text("".join(json.dumps(report) + "\n" for report in reports))
    return path


def path_target(path: Path) -> Path:
    """8 power reports, the 6th of the target '../../etc'."""
    lines = POWER.read_text().splitlines(keepends=True)[:8]
    lines[5] = lines[5].replace('"target":"influxdb"', '"target":"../../etc"')
    assert "../../etc" in lines[5]
    path.write_text("".join(lines))
    return path


def rapl_of_target(folder: Path, target: str) -> Path:
    """The example's hwpc-sensor rapl.csv with its machine-level target named ``target``."""
    folder.mkdir()
    (folder / "rapl.csv").write_text(RAPL_CSV.read_text().replace(",all,", f",{target},"))
    return folder


def report_without_start_time(path: Path) -> Path:
    """The bundled legacy GEOPM report without its Start Time line."""
    text = (EXAMPLE_GEOPM_REPORTS / "geopmbench_1host.legacy.report").read_text()
    path.write_text("".join(line for line in text.splitlines(keepends=True)
                            if not line.startswith("Start Time")))
    return path


# --- the command line ---------------------------------------------------------------------


def test_powerapis_system_csv_gives_its_rapl_energy(peer_data):
    rapl2 = peer_data / "powerapi" / "powerapi_v2.10.0" / "csv_files" / "rapl2.csv"
    result = joulehouse("energy", "powerapi", rapl2)
    assert result.returncode == 0 and result.stderr == ""
    table = csv_rows(result.stdout)
    assert table[["sensor", "target", "component", "method", "duration_s"]].values.tolist() == [
        ["grvingt-12", "system", "cpu", "measured", 2.0],
        ["grvingt-12", "system", "dram", "measured", 2.0]]
    # the two ticks' RAPL values summed over the 2 sockets, x 2^-32
    assert table["energy_j"].tolist() == pytest.approx([27.64013671875, 3.2891693115234375])
    assert table["energy_j"].round(2).tolist() == [27.64, 3.29]


def test_a_target_that_is_not_machine_level_is_left_out_and_nothing_usable_is_exit_1(
        tmp_path, monkeypatch):
    folder = rapl_of_target(tmp_path / "node", "node")
    result = joulehouse("energy", "powerapi", folder)
    assert result.returncode == 1 and result.stdout == HEADER
    assert result.stderr == (f"joulehouse: {folder / 'rapl.csv'} (sensor 'sensor_test'): "
                             f"left out {NOT_MACHINE}\n")
    # the setting names it machine-level: its energy comes out
    monkeypatch.setenv("JOULEHOUSE_POWERAPI_MACHINE_TARGETS", "node")
    result = joulehouse("energy", "powerapi", folder)
    assert result.returncode == 0 and result.stderr == ""
    assert csv_rows(result.stdout)["energy_j"].tolist() == [12.19696044921875]
    # the option over the setting
    result = joulehouse("energy", "powerapi", folder, "--machine-targets", "all,system")
    assert result.returncode == 1 and result.stdout == HEADER
    monkeypatch.setenv("JOULEHOUSE_POWERAPI_MACHINE_TARGETS", " , ")
    assert one_error_line(joulehouse("energy", "powerapi", folder)) == (
        "$JOULEHOUSE_POWERAPI_MACHINE_TARGETS: no machine-level target name in ',' "
        "(e.g. all,system)")


def test_a_json_array_cut_inside_its_last_report_says_it_lost_that_report(tmp_path):
    cut = cut_array(tmp_path / "cut.json")
    whole = write_array(tmp_path / "seven.json", power_reports(7))
    result = joulehouse("energy", "powerapi", cut)
    assert result.returncode == 0  # rows came out: the record is a warning
    assert result.stderr == f"joulehouse: {cut}: left out {CUT}\n"
    assert result.stdout == joulehouse("energy", "powerapi", whole).stdout
    result = joulehouse("read", "powerapi", cut, "--out", tmp_path / "frames")
    assert result.returncode == 0 and result.stderr == f"joulehouse: {cut}: left out {CUT}\n"
    assert result.stdout.splitlines()[-1].endswith("power_reports.csv: 7 rows")


def test_a_quiet_file_cut_short_has_one_record_while_cut_and_none_once_completed(tmp_path):
    lines = POWER.read_text().splitlines(keepends=True)[:9]
    path = tmp_path / "landing" / "power.jsonl"
    path.parent.mkdir()
    path.write_text("".join(lines[:8]) + lines[8][:50])  # quiet, its 9th report cut
    tables = Tables(tmp_path / "warehouse")
    store = ReportStore(tables)

    def read() -> tuple[int, list[str]]:
        piece = store.ingest("landing/power.jsonl", path, now=time.time(), quiet_s=0.0)
        stored = tables.read_partitions(LEFT_OUT_TABLE, ["powerapi/read/landing/power.jsonl"])
        return len(piece.frames["power_reports"]), stored["part"].tolist()

    cut = f"its last report (bytes {len(''.join(lines[:8]))}-{path.stat().st_size})"
    assert read() == (8, [cut])
    assert read() == (0, [cut])  # unchanged: the same record, not a second one
    path.write_text("".join(lines))  # the writer completed it
    assert read() == (1, [])
    assert len(store.read("power_reports", ["landing/power.jsonl"])) == 9


def test_power_reports_of_one_timestamp_say_they_give_no_energy(tmp_path):
    one = one_timestamp(tmp_path / "one.jsonl")
    result = joulehouse("energy", "powerapi", one)
    assert result.returncode == 1 and result.stdout == HEADER
    assert result.stderr == f"joulehouse: {one} (sensor 'sensor_test'): left out {ONE_TIMESTAMP}\n"
    # with the sensor's HWPC reports, their tick gives the reports a duration
    result = joulehouse("energy", "powerapi", one, EXAMPLE_POWERAPI / "smartwatts_timeline.jsonl")
    assert result.returncode == 0 and result.stderr == ""
    assert len(csv_rows(result.stdout)) == 5  # the measurement and 4 estimates


def test_timestamps_mixing_epoch_ms_and_iso_strings_are_read(tmp_path):
    mixed = mixed_forms(tmp_path / "mixed.jsonl")
    iso = tmp_path / "iso.jsonl"
    iso.write_text("".join(POWER.read_text().splitlines(keepends=True)[:12]))
    result = joulehouse("energy", "powerapi", mixed)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == joulehouse("energy", "powerapi", iso).stdout
    assert len(csv_rows(result.stdout)) == 4


def test_a_broken_line_among_mixed_timestamp_forms_is_an_input_error_naming_it(tmp_path):
    mixed = mixed_forms(tmp_path / "mixed.jsonl")
    lines = mixed.read_text().splitlines(keepends=True)
    lines[7] = lines[7][:40] + "\n"  # a report cut in the middle, then more reports
    mixed.write_text("".join(lines))
    with pytest.raises(InputError) as raised:  # was JSONDecodeError: an internal error
        reports.read_file(layout.classify(mixed))
    assert (raised.value.path, raised.value.line) == (str(mixed), 8)
    assert raised.value.reason.startswith("not valid JSON: ")


def test_a_field_of_two_json_types_names_the_real_problem(tmp_path):
    lines = POWER.read_text().splitlines(keepends=True)[:6]
    lines[3] = lines[3].replace('"power":0.609956', '"power":"0.609956"')
    assert '"0.609956"' in lines[3]
    bad = tmp_path / "two_types.jsonl"
    bad.write_text("".join(lines))
    result = joulehouse("energy", "powerapi", bad, EXAMPLE_POWERAPI / "smartwatts_timeline.jsonl")
    assert result.returncode == 1
    assert result.stderr == (f"joulehouse: {bad}:4: power: a string here where an earlier "
                             "report has a number: valid JSON, but a field must keep one type "
                             "in a file (Arrow's type inference)\n")


def test_a_path_like_target_refuses_its_whole_file(tmp_path):
    bad = path_target(tmp_path / "dotdot.jsonl")
    result = joulehouse("energy", "powerapi", bad, EXAMPLE_POWERAPI / "smartwatts_timeline.jsonl")
    assert result.returncode == 1
    assert result.stderr == (f"joulehouse: {bad}:6: target: target '../../etc' is a path "
                             "outside the report folder\n")
    assert csv_rows(result.stdout)["method"].tolist() == ["measured"]  # no estimate of it


def test_a_geopm_report_without_start_time_loses_nothing_the_cli_writes(tmp_path):
    report = report_without_start_time(tmp_path / "nostart.report")
    result = joulehouse("energy", "geopm", report)
    assert result.returncode == 0 and result.stderr == ""  # host energies need no start
    assert len(csv_rows(result.stdout)) == 9  # its facts are the UI's case below


def test_a_machine_level_series_of_one_report_gives_no_row_and_says_why(tmp_path):
    one = tmp_path / "rapl.csv"  # the header and the first tick
    one.write_text("".join(RAPL_CSV.read_text().splitlines(keepends=True)[:2]))
    rapl = readers.rapl_energy(readers.read_hwpc(one))
    assert len(rapl) == 1
    assert energy.window_energy(rapl, None).empty  # was int(NaN): an internal error
    assert energy.left_out(rapl, None) == [LeftOut(
        "powerapi", "sensor 'sensor_test'", "RAPL energy of target 'all' (1 report)",
        "one report: no tick length to measure over")]


def test_a_sensor_with_all_and_system_targets_is_measured_once(tmp_path):
    both = tmp_path / "rapl.csv"  # the example's rows, then the same again as 'system'
    rows = RAPL_CSV.read_text().splitlines(keepends=True)
    both.write_text("".join(rows + [row.replace(",all,", ",system,") for row in rows[1:]]))
    rapl = readers.rapl_energy(readers.read_hwpc(both))
    alone = energy.window_energy(readers.rapl_energy(readers.read_hwpc(RAPL_CSV)), None)
    table = energy.window_energy(rapl, None)
    assert table["target"].tolist() == ["all"]
    assert table["energy_j"].tolist() == pytest.approx(alone["energy_j"].tolist())
    assert table["energy_j"].tolist() == pytest.approx([12.19696044921875])
    assert energy.energy_facts_rows(table)["energy_j"].tolist() == pytest.approx(
        [12.19696044921875])
    assert energy.left_out(rapl, None) == [LeftOut(
        "powerapi", "sensor 'sensor_test'", "RAPL energy of target 'system' (10 report(s))",
        "also present: counted once, under 'all'")]
    # the setting's order chooses which
    table = energy.window_energy(rapl, None, targets=("system", "all"))
    assert table["target"].tolist() == ["system"]
    assert table["energy_j"].tolist() == pytest.approx([12.19696044921875])


def test_a_machine_level_target_of_the_setting_is_no_cgroup_in_estimates_and_facts(tmp_path):
    folder = rapl_of_target(tmp_path / "node", "node")
    rapl = readers.rapl_energy(readers.read_hwpc(folder / "rapl.csv"))
    renamed = tmp_path / "power.jsonl"  # mongo's estimates become the machine's, 'node'
    renamed.write_text(POWER.read_text().replace('"target":"mongo"', '"target":"node"'))
    power = readers.read_power(renamed)
    table = energy.window_energy(rapl, power, "1min", ("node",))
    cgroups = table[(table["method"] == "estimated")
                    & table["target"].isin(["influxdb", "powerapi-sensor"])]
    assert set(table["target"]) == {"node", "influxdb", "powerapi-sensor", "rapl"}
    assert table["estimated_total_j"].iloc[0] == pytest.approx(cgroups["energy_j"].sum())
    facts = energy.energy_facts_rows(table, ("node",))
    assert sorted(facts["entity"] + " " + facts["method"]) == [
        "sensor_test/influxdb estimated", "sensor_test/node measured",
        "sensor_test/powerapi-sensor estimated"]
    # the TAUdb mapping takes the setting too
    with pytest.raises(InputError, match=r"no RAPL energy of a machine-level target \(all, sy"):
        read_trials(folder)
    [trial] = read_trials(folder, targets=("node",))
    assert trial.name == "sensor_test/2021-01-13"


def test_power_reports_beside_a_one_tick_hwpc_series_use_their_own_tick(tmp_path):
    one = tmp_path / "rapl.csv"  # the header and the first tick
    one.write_text("".join(RAPL_CSV.read_text().splitlines(keepends=True)[:2]))
    rapl = readers.rapl_energy(readers.read_hwpc(one))
    power = readers.read_power(POWER)
    with_one = energy.window_energy(rapl, power)
    alone = energy.window_energy(None, power)  # the power reports' own median tick
    assert len(alone) == 4 and (alone["method"] == "estimated").all()
    pd.testing.assert_frame_equal(
        with_one[["target", "energy_j"]], alone[["target", "energy_j"]])
    assert energy.left_out(rapl, power) == [LeftOut(
        "powerapi", "sensor 'sensor_test'", "RAPL energy of target 'all' (1 report)",
        "one report: no tick length to measure over")]


def test_the_machine_targets_setting_of_the_dagster_source(monkeypatch):
    assert PowerapiSource(landing_folders=[]).targets == ("all", "system")
    monkeypatch.setenv("JOULEHOUSE_POWERAPI_MACHINE_TARGETS", " node , all ")
    source = PowerapiSource.from_env(EXAMPLE_POWERAPI)
    assert (source.machine_targets, source.targets) == ("node,all", ("node", "all"))
    monkeypatch.setenv("JOULEHOUSE_POWERAPI_MACHINE_TARGETS", ",")
    with pytest.raises(ValueError, match="no machine-level target name in ','"):
        PowerapiSource.from_env(EXAMPLE_POWERAPI)


# --- the UI ---------------------------------------------------------------------------------


def test_the_ui_warns_of_each_partition_that_left_something_out(tmp_path, monkeypatch):
    if not WEBSERVER.is_file():
        skip_or_fail(f"dagster-webserver not found beside {sys.executable}")
    dagster_home(tmp_path, monkeypatch)
    landing = tmp_path / "powerapi"
    landing.mkdir()
    cut_array(landing / "cut.json")
    one_timestamp(landing / "one.jsonl")
    mixed_forms(landing / "mixed.jsonl")
    dotdot = path_target(landing / "dotdot.jsonl")
    dotdot.write_text(dotdot.read_text().replace("2021-01-13", "2021-01-14"))  # a day of its own
    rapl_of_target(landing / "node", "node")
    rapl_of_target(landing / "system", "system")
    geopm_landing = tmp_path / "geopm"
    geopm_landing.mkdir()
    no_start = report_without_start_time(geopm_landing / "nostart.report")
    settle()
    # the bad file's day, and the day of the others (each entry keeps its own left_out)
    keys = ["powerapi/2021-01-13", "powerapi/2021-01-14"]
    source = PowerapiSource(landing_folders=[str(landing)], quiet_period_s=QUIET_S)
    gpu_root = tmp_path / "lab"
    gpu_root.mkdir()
    warehouse = tmp_path / "warehouse"
    geopm_source = GeopmReportSource(landing_folders=[str(geopm_landing)],
                                     quiet_period_s=QUIET_S)
    defs = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(path=str(gpu_root))]),
                             Warehouse(root=str(warehouse)), powerapi_source=source,
                             geopm_source=geopm_source)
    env = {"JOULEHOUSE_GPU_DATA_ROOTS": str(gpu_root), "JOULEHOUSE_WAREHOUSE": str(warehouse),
           "JOULEHOUSE_POWERAPI_LANDING": str(landing),
           "JOULEHOUSE_GEOPM_LANDING": str(geopm_landing),
           "JOULEHOUSE_QUIET_PERIOD_S": str(QUIET_S), "JOULEHOUSE_FULL_RESCAN_S": "none"}
    with dg.DagsterInstance.get() as instance:
        [request] = tick(defs.resolve_sensor_def(powerapi.SENSOR_NAME), instance,
                         {"powerapi_source": source}).run_requests
        result = launch_in_process(defs.resolve_job_def(powerapi.JOB_NAME), instance, request,
                                   powerapi.SENSOR_NAME, log_level="WARNING")
        assert not result.success  # dotdot.jsonl failed
        assert sorted(instance.get_dynamic_partitions("powerapi_days")) == keys
        [request] = tick(defs.resolve_sensor_def(geopm.SENSOR_NAME), instance,
                         {"geopm_source": geopm_source}).run_requests
        assert launch_in_process(defs.resolve_job_def(geopm.JOB_NAME), instance, request,
                                 geopm.SENSOR_NAME, log_level="WARNING").success
        with webserver(env, tmp_path / "webserver.log") as port:
            evaluation = warning(port, "powerapi_validated_frames", VALID_CHECK, keys[0])
            cut = landing / "cut.json"
            assert evaluation["description"] == (
                f"{keys[0]}: 1 input(s) left something out (1 record(s)): {cut}: "
                f"left out {CUT}")
            assert evaluation["entries"]["left_out"] == 1
            assert evaluation["entries"]["first_left_out"] == [f"{cut}: left out {CUT}"]
            warned = warning(port, "powerapi_report_energy", COMPUTED_CHECK, keys[0])
            assert warned["description"] == (
                f"{keys[0]}: 2 input(s) left something out (2 record(s)): "
                f"{landing / 'node'} (sensor 'sensor_test'): left out {NOT_MACHINE}; "
                f"{landing / 'one.jsonl'} (sensor 'sensor_test'): left out {ONE_TIMESTAMP}")
            failed = check_execution(port, "powerapi_validated_frames", VALID_CHECK, keys[1])
            assert failed["status"] == "FAILED"
            assert failed["evaluation"]["severity"] == "ERROR"
            assert failed["evaluation"]["entries"]["file"] == str(dotdot)
            assert failed["evaluation"]["entries"]["line"] == 6
            # without a Start Time, the report is in its file's day (joulehouse/geopm/days.py)
            no_start_day = day_key("geopm", report_day(no_start, "UTC"))
            warned = warning(port, "geopm_validated_frames", VALID_CHECK, no_start_day)
            assert warned["description"] == (
                f"{no_start_day}: 1 input(s) left something out (1 record(s)): "
                f"{no_start}: left out {NO_START}")

    # the table beside energy_facts, as `joulehouse sql` reads it
    rows = query(warehouse, "SELECT source, stage, partition_key, input, part, reason "
                 "FROM left_out ORDER BY input")
    assert rows.values.tolist() == [
        ["geopm", "read", "geopm/nostart.report", str(no_start), *NO_START.split(": ", 1)],
        ["powerapi", "read", "powerapi/cut.json", str(landing / "cut.json"),
         *CUT.split(": ", 1)],
        ["powerapi", "energy", "powerapi/node", f"{landing / 'node'} (sensor 'sensor_test')",
         *NOT_MACHINE.split(": ", 1)],
        ["powerapi", "energy", "powerapi/one.jsonl",
         f"{landing / 'one.jsonl'} (sensor 'sensor_test')", *ONE_TIMESTAMP.split(": ", 1)],
    ]
    facts = query(warehouse, "SELECT entity, component, energy_j FROM energy_facts "
                  "WHERE method = 'measured'")
    assert facts.values.tolist() == [["sensor_test/system", "cpu", 12.19696044921875]]
