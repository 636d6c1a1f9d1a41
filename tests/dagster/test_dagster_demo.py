"""The README's demo, end to end on the bundled example data, in a fresh instance."""

import importlib.util
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import dagster as dg
import pytest
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

from definitions import EXAMPLE_GPU_DATA, build_definitions
from joulehouse.accounting.rollups import primary
from joulehouse.gpu.layout import find_repetitions, is_complete
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials
from joulehouse.warehouse import Warehouse as Tables
from resources import (
    ClusterCockpitArchive,
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    TaudbResource,
    TauProfileSource,
    Warehouse,
    embedded_taudb_url,
)
from sensors.clustercockpit import SENSOR_NAME as CC_SENSOR
from sensors.geopm import SENSOR_NAME as GEOPM_SENSOR
from sensors.gpu_repetitions import sensor_name
from sensors.local import launch_in_process, tick
from sensors.partition_runs import RANGE_END, RANGE_START
from sensors.powerapi import SENSOR_NAME as POWERAPI_SENSOR
from sensors.tau_profiles import SENSOR_NAME as TAU_SENSOR
from tests.dagster.test_schedules import ROLLUPS, WEEKLY
from tests.dagster.test_schedules import tick as schedule_tick

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO = PROJECT_ROOT / "deploy" / "demo.py"
EXAMPLE = PROJECT_ROOT / "examples" / "gpu-data"
EXAMPLE_GEOPM = PROJECT_ROOT / "examples" / "geopm"
# The GEOPM table's rows: report, hosts, package kJ, DRAM kJ (the reports' Application Totals)
GEOPM_ROWS = [("geopm/fm_stream_dgemm_2host.yaml.report", 2, 169.946, 18.361),
              ("geopm/geopmbench_1host.legacy.report", 1, 4.406, 0.328)]
EXAMPLE_CC = PROJECT_ROOT / "examples" / "clustercockpit" / "archive"
# The ClusterCockpit table's rows: job, metric, hosts, energy kWh, cc-backend kWh
CC_ROWS = [("emmy/1403244/1608923076", "rapl_power", 4, 5.276, 5.27),
           ("fritz/398764/1675954353", "cpu_power", 1, 0.009, 0.01),
           ("fritz/398764/1675954353", "mem_power", 1, 0.000, 0.00),
           ("fritz/398955/1675956725", "cpu_power", 1, 0.029, 0.03),
           ("fritz/398955/1675956725", "mem_power", 1, 0.002, 0.00),
           ("taurus/20639587/1635856524", "cpu_power", 2, 0.014, 0.01)]


def test_demo_materializes_everything_in_one_run_and_prints_the_setting_table(demo):
    home, warehouse = demo.home, demo.warehouse

    complete = [r for r in find_repetitions(EXAMPLE) if is_complete(r.path)]
    settings = sorted({(r.experiment, r.benchmark, r.run) for r in complete})
    lines = demo.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:4] == [
        "data_root", "experiment", "benchmark", "setting"])
    end = lines.index("", header)
    rows = [line.split() for line in lines[header + 1:end]]
    assert [tuple(row[:4]) for row in rows] == [("gpu-data", *s) for s in settings]
    table = Tables(warehouse).read_table("gpu_setting_energy")
    for row in rows:
        stored = table[(table["data_root"] == row[0]) & (table["benchmark"] == row[2])
                       & (table["run"] == row[3])].iloc[0]
        assert int(row[4]) == stored["repetitions"]
        assert float(row[5]) == round(stored["duration_s_mean"], 3)  # time s
        assert float(row[7]) == round(stored["gpu_energy_j_mean"] / 1000, 3)  # GPU kJ

    with dg.DagsterInstance.from_config(str(home)) as instance:
        # the GPU pipeline, TAU profiles, PowerAPI, GEOPM, ClusterCockpit, accounting
        assert instance.get_runs_count() == 7  # GPU, TAU, PowerAPI + its trials, GEOPM, CC, accounting
        assert {r.status for r in instance.get_runs()} == {dg.DagsterRunStatus.SUCCESS}
        assert instance.get_dynamic_partitions("gpu_repetition_days") == [  # their starts' day
            "gpu-data/2020-11-16"]
        assert instance.get_dynamic_partitions("geopm_days") == [  # their Start Times' days
            "geopm/2019-05-30", "geopm/2020-04-01"]
        assert instance.get_dynamic_partitions("tau_profile_days") == [  # Starting Timestamp's
            "tau-profiles/2010-06-03"]
        assert instance.get_dynamic_partitions("cc_job_blocks") == [
            "emmy/1403", "fritz/398", "taurus/20639"]
        assert_turning_the_sensors_on_asks_for_nothing_new(instance, warehouse)
    facts = Tables(warehouse).read_table("energy_facts")
    assert set(facts["source"]) == {"gpu-benchmark", "powerapi", "geopm", "clustercockpit"}
    assert (facts["source"] == "geopm").sum() == 6  # cpu and dram of 3 hosts
    gpu_facts = facts[facts["source"] == "gpu-benchmark"]
    assert set(gpu_facts["entity"]) == {f"gpu-data/{r.key}" for r in complete}
    assert (facts["energy_j"] > 0).all()
    with TaudbDatabase(f"sqlite:///{warehouse}/taudb.sqlite") as db:
        trials = {t["name"]: t["data_source"] for t in list_trials(db)}
    jobs = {row[0] for row in CC_ROWS}
    assert trials == {**{"/".join(s): 999 for s in settings}, "tau2_wrap_mpi2": 1,
                      **{row[0]: 999 for row in GEOPM_ROWS},  # a trial per GEOPM report
                      **dict.fromkeys(jobs, 999),
                      "sensor_test/2021-01-13": 999}  # the PowerAPI sensor's day
    assert all(name in demo.stdout for name in trials)
    assert "TAUdb: 4 ClusterCockpit job trials" in lines
    start = lines.index("GEOPM reports (Application Totals summed over hosts):") + 2
    geopm = lines[start:lines.index("", start)]
    assert [(r[0], int(r[1]), float(r[3]), float(r[4])) for r in map(str.split, geopm)] == (
        GEOPM_ROWS)
    start = next(i for i, line in enumerate(lines) if line.startswith("ClusterCockpit jobs")) + 2
    cc = [line.split() for line in lines[start:lines.index("", start)]]
    assert [(r[0], r[1], int(r[2]), float(r[4]), float(r[6])) for r in cc] == CC_ROWS
    assert_the_powerapi_table_is_printed(lines)
    assert_the_daily_accounting_is_printed(lines, warehouse)


def assert_the_powerapi_table_is_printed(lines: list[str]) -> None:
    """One row per report and target: the fixture's 12.197 J measured by each of its two
    forms, the generated estimates 10 % under it."""
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == [
        "report", "sensor", "target"])
    end = lines.index("", header)
    rows = {(row[0], row[2]): row for row in map(str.split, lines[header + 1:end])}
    assert set(rows) == {("hwpc-csv", "all"), ("smartwatts_timeline.jsonl", "all"),
                         *(("power.jsonl", t) for t in ("influxdb", "mongo", "powerapi-sensor",
                                                         "rapl"))}
    assert rows[("hwpc-csv", "all")][4:] == ["measured", "12.197", "1.215", "-0.100"]
    assert rows[("power.jsonl", "rapl")][4:6] == ["estimated", "12.197"]
    assert sum(float(rows[("power.jsonl", t)][5]) for t in (
        "influxdb", "mongo", "powerapi-sensor")) == pytest.approx(0.9 * 12.197, abs=2e-3)


def assert_the_daily_accounting_is_printed(lines: list[str], warehouse) -> None:
    """Every source has printed daily rows with carbon and cost; a source's days (primary
    method) sum to its facts' energy (a fact across midnight split, not lost)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("Energy and carbon per UTC"))
    printed = lines[start + 2:lines.index("", start)]
    for source in ("gpu-benchmark", "powerapi", "geopm", "clustercockpit"):
        assert any(f" {source} " in line for line in printed), source
    assert ("Facts without carbon (no intensity or zone): 0; without cost (no tariff band): 0"
            in lines)
    assert lines[start + 1].split()[-2:] == ["cost", "currency"]
    assert all(line.split()[-1] == "EUR" for line in printed)
    tables = Tables(warehouse)
    facts, daily = tables.read_table("energy_facts"), tables.read_table("accounting_daily")
    emmy = daily[(daily["calendar"] == "UTC") & (daily["group"] == "emmy")
                 & (daily["method"] == "power")]
    assert emmy["day"].dt.strftime("%Y-%m-%d").tolist() == ["2020-12-25", "2020-12-26"]
    assert emmy["energy_j"].sum() == pytest.approx(facts.loc[
        facts["entity"].str.startswith("emmy/") & (facts["method"] == "power"), "energy_j"].sum())
    assert (emmy["co2_g"] > 0).all()
    assert len(printed) == len(primary(daily[daily["calendar"] == "UTC"]))


def assert_turning_the_sensors_on_asks_for_nothing_new(instance, warehouse) -> None:
    """A sensor turned on after the demo asks for the runs the demo ran: the daemon skips a
    request whose run key a run of that sensor already has (what it checks, as here)."""
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(EXAMPLE))], quiet_period_s=0)
    profiles = TauProfileSource(landing_folders=[str(PROJECT_ROOT / "examples" / "tau-profiles")],
                                quiet_period_s=0)
    powerapi = PowerapiSource(landing_folders=[str(PROJECT_ROOT / "examples" / "powerapi")],
                              quiet_period_s=0)
    reports = GeopmReportSource(landing_folders=[str(EXAMPLE_GEOPM)], quiet_period_s=0)
    archive = ClusterCockpitArchive(archive_roots=[str(EXAMPLE_CC)], quiet_period_s=0)
    defs = build_definitions(source, Warehouse(root=str(warehouse)), tau_profiles=profiles,
                             powerapi_source=powerapi, geopm_source=reports, cc_archive=archive)
    for name, resources in ((sensor_name("gpu-data"), {"gpu_source": source}),
                            (TAU_SENSOR, {"tau_profiles": profiles}),
                            (POWERAPI_SENSOR, {"powerapi_source": powerapi}),
                            (GEOPM_SENSOR, {"geopm_source": reports}),
                            (CC_SENSOR, {"cc_archive": archive})):
        [request] = tick(defs.resolve_sensor_def(name), instance, resources).run_requests
        runs = instance.get_runs(filters=dg.RunsFilter(
            tags={RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: name}))
        assert len(runs) == 1, name


def load_demo() -> ModuleType:
    """deploy/demo.py as a module (it is a script, not in a package), for its ``main``."""
    spec = importlib.util.spec_from_file_location("joulehouse_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_exits_non_zero_when_a_run_fails(tmp_path, monkeypatch, capsys):
    """The demo's exit status on a GPU data root whose one repetition fails validation: its
    ``main``, which ``python deploy/demo.py`` exits with, called in this process (the
    command itself runs in :func:`demo_once`; another process would import everything
    again). The demo stops at the first failed run: the GPU run, before any other source."""
    root = tmp_path / "data" / "e" / "b" / "150W" / "0"
    root.mkdir(parents=True)
    (root / "timestamps.csv").write_text(
        "timestamp,event,data\n2020-11-16 13:49:17,experiment_begin,0\n"
        "2020-11-16 13:49:27,experiment_end,0\n")
    (root / "gpu-power.csv").write_text(",timestamp,power\n0,2020-11-16 13:49:17,-5\n")
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "deploy" / "dagster.yaml", home)  # as make demo does
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")  # what main sets when unset
    status = load_demo().main([str(tmp_path / "data"), "--warehouse", str(tmp_path / "warehouse")])
    assert status == 1
    assert "run(s) failed" in capsys.readouterr().err


# Here, not in test_schedules.py, so that the demo runs once in the suite: pytest-xdist's
# --dist loadfile keeps a module on one worker, and the demo is made once per worker.
#: The weekly schedule whose run is launched: the GPU repetitions' days, read whole (the
#: schedule names no repetition), the most entries.
WEEKLY_LAUNCHED = "weekly_revalidation_gpu_repetition_days"


def test_each_schedule_asks_for_its_run_on_the_example_data_and_one_of_each_kind_succeeds(demo):
    """The daily rollups' run, and every weekly schedule's request over exactly the
    partitions the demo registered; one weekly run (:data:`WEEKLY_LAUNCHED`) is launched.
    The weekly schedules are one function (``sensors/schedules.py``: ``weekly_revalidation``)
    whose request names a range of the source's partitions, as the source's sensor does:
    the demo has run each of their jobs over that same range (every registered partition),
    so one re-validation run proves a job runs again over partitions already stored; each
    further one cost seconds of CPU and proved the same of another source."""
    home, warehouse = demo.home, demo.warehouse
    store = Warehouse(root=str(warehouse))
    built = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(path=str(EXAMPLE_GPU_DATA))]),
                              store, TaudbResource(url=embedded_taudb_url(warehouse)))
    tables = Tables(warehouse)
    before = {name: len(tables.read_table(name)) for name in ("cc_rollup", "accounting_daily")}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        daily = schedule_tick("daily_rollups", instance, datetime(2026, 11, 25, 2, tzinfo=UTC)).run_requests
        schedule = built.resolve_schedule_def("daily_rollups")
        materialized = set()
        for request in daily:  # the sources' runs, then the accounting's
            result = launch_in_process(built.resolve_job_def(schedule.job_name), instance,
                                       request, log_level="WARNING")
            assert result.success
            materialized |= {event.asset_key.to_user_string()
                             for event in result.get_asset_materialization_events()}
        assert materialized == ROLLUPS
        assert {name: len(tables.read_table(name)) for name in before} == before
        requests = {}
        for name, (_, partitions, _) in WEEKLY.items():
            registered = instance.get_dynamic_partitions(partitions)
            [requests[name]] = schedule_tick(name, instance, datetime(2026, 11, 29, 4, tzinfo=UTC)).run_requests
            assert (requests[name].tags[RANGE_START], requests[name].tags[RANGE_END]) == (
                registered[0], registered[-1]), name  # the examples: fewer than the newest
        job, partitions, _ = WEEKLY[WEEKLY_LAUNCHED]
        registered = instance.get_dynamic_partitions(partitions)
        result = launch_in_process(built.resolve_job_def(job), instance,
                                   requests[WEEKLY_LAUNCHED], log_level="WARNING")
        assert result.success
        assert sorted(result.dagster_run.tags[tag] for tag in (RANGE_START, RANGE_END)) == (
            sorted([registered[0], registered[-1]]))
        stored = {event.partition for event in result.get_asset_materialization_events()
                  if event.partition is not None}
        assert stored == set(registered)
