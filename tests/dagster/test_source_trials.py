"""GEOPM reports and PowerAPI sensor days as TAUdb trials, loaded from Dagster.

GEOPM: ``geopm_trials`` in the GEOPM step, one trial per report, reported per day
partition (``assets/geopm.py``); PowerAPI: ``powerapi_trials``, one trial per sensor and
UTC day from the stored PowerAPI tables (``assets/taudb.py``). The trials have
the rows the mapping tests expect (``tests/geopm/test_geopm_taudb.py``,
``tests/taudb/test_powerapi_mapping.py``).

The first run over the landing folder that several tests start from is made once per
module (``tests/dagster/source_runs.Saved``): each of them starts from a copy of what it
left, put back at the same paths.
"""

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from assets.geopm import (
    FACTS_TABLE,
    REGION_TABLE,
    REPORT_TABLE,
    geopm_days,
    geopm_region_energy,
    geopm_report_energy,
    geopm_trials,
)
from assets.powerapi import powerapi_days, powerapi_validated_frames, powerapi_window_energy
from assets.taudb import LOADS_CHECK, powerapi_trials
from definitions import build_definitions
from joulehouse.digest import digest_pairs
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.read import read_trial_source
from joulehouse.taudb.stored import read_stored_trial
from joulehouse.warehouse import Warehouse as Tables
from resources import (
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    TaudbResource,
    Warehouse,
)
from sensors import geopm, powerapi
from sensors.local import launch_in_process, tick
from sensors.partition_runs import RANGE_END, RANGE_START
from tests.dagster.source_runs import Saved, instance_in
from tests.dagster.test_geopm_assets import (
    ENERGY_J,
    EXAMPLES,
    LEGACY,
    SHAPE,
    YAML,
)
from tests.geopm.test_geopm_taudb import SESSION_REPORT
from tests.geopm.test_geopm_traps import REPORT_3X

#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
POWERAPI_EXAMPLES = PROJECT_ROOT / "examples" / "powerapi"
SESSION = "session.report"
KEYS = [f"landing/{YAML}", f"landing/{LEGACY}", f"landing/{SESSION}"]
#: The day partition of each report: its start's UTC day
DAY = {f"landing/{YAML}": "landing/2019-05-30", f"landing/{LEGACY}": "landing/2020-04-01",
       f"landing/{SESSION}": "landing/2024-08-15"}
#: report -> (threads = hosts, timers = entries over all hosts: regions + 3 totals per host,
#: or one geopmsession timer per host)
TRIAL_SHAPE = {YAML: (2, SHAPE[YAML][2]), LEGACY: (1, SHAPE[LEGACY][2]), SESSION: (2, 2)}

#: A time to evaluate the automation from (UTC; the asset daemon evaluates at its clock's).
NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)


class Source:
    """One source's sensor and job over a landing folder, with a warehouse and a TAUdb."""

    def __init__(self, instance, tmp_path: Path, sensor, resource: str, source):
        self.instance, self.sensor_module = instance, sensor
        self.resource = {resource: source}
        self.warehouse = Warehouse(root=str(tmp_path / "warehouse"))
        self.taudb = TaudbResource(url=f"sqlite:///{tmp_path}/taudb.sqlite")
        self.defs = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(
            path=str(tmp_path))]), self.warehouse, self.taudb, **self.resource)
        self.tables = Tables(self.warehouse.root)
        self.cursor = None

    def tick_and_run(self) -> dg.ExecuteInProcessResult:
        """One sensor tick, and the one run it asks for."""
        name = self.sensor_module.SENSOR_NAME
        data = tick(self.defs.resolve_sensor_def(name), self.instance, self.resource,
                    self.cursor)
        self.cursor = data.cursor
        [request] = data.run_requests
        return launch_in_process(self.defs.resolve_job_def(self.sensor_module.JOB_NAME),
                                 self.instance, request, name, log_level="WARNING")

    def trials(self) -> dict[str, dict]:
        with self.taudb.open() as db:
            return {trial["name"]: trial for trial in list_trials(db)}

    def count(self, table: str, trial_id: int) -> int:
        """Rows of a per-thread table (``timer_call_data``, ``counter_value``) on the real
        threads of a trial."""
        with self.taudb.open() as db:
            return db.query(f"SELECT count(*) FROM {table} x JOIN thread h ON x.thread = h.id "
                            "WHERE h.trial = ? AND h.node_rank >= 0", (trial_id,))[0][0]


# --- GEOPM ------------------------------------------------------------------------------------

def _land_reports(folder: Path) -> Path:
    """The two bundled reports and a geopmsession report, in a new landing ``folder``."""
    folder.mkdir()
    for name in (LEGACY, YAML):
        shutil.copy(EXAMPLES / name, folder / name)
    (folder / SESSION).write_text(SESSION_REPORT)
    return folder


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    """The two bundled reports and a geopmsession report, in a landing folder ``landing``."""
    return _land_reports(tmp_path / "landing")


def _reports(instance, root: Path, timezone: str = "UTC") -> Source:
    """The GEOPM source over ``root``'s landing folder ``landing`` (its warehouse and TAUdb
    under ``root``), reading naive times in ``timezone``."""
    return Source(instance, root, geopm, "geopm_source", GeopmReportSource(
        landing_folders=[str(root / "landing")], quiet_period_s=0, timezone=timezone))


@pytest.fixture
def reports(instance, tmp_path, landing) -> Source:
    return _reports(instance, tmp_path)


@dataclass(frozen=True)
class Ran:
    """The GEOPM source (:func:`landing`'s reports in ``root / "landing"``) after its first
    sensor tick and run (``first``: its result)."""

    source: Source
    root: Path
    first: dg.ExecuteInProcessResult

    @property
    def range_tags(self) -> dict[str, str]:
        """The tags of the range of days the first run covered."""
        return {tag: self.first.dagster_run.tags[tag] for tag in (RANGE_START, RANGE_END)}

    @property
    def landing(self) -> Path:
        return self.root / "landing"


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory) -> tuple[Saved, dg.ExecuteInProcessResult]:
    """The reports landed and the GEOPM run over them (its first tick's), once per module;
    the run's result."""
    base = tmp_path_factory.mktemp("geopm")
    with instance_in(Saved.storage(base)) as instance:
        _land_reports(base / "root" / "landing")
        source = _reports(instance, base / "root")
        first = source.tick_and_run()
        assert first.success
    return Saved.save(base, source.cursor), first


@pytest.fixture
def ran(ran_once, tmp_path) -> Iterator[Ran]:
    """The reports landed and the GEOPM run over them (:func:`ran_once`), for this test."""
    saved, first = ran_once
    with saved.restored_source(tmp_path, _reports) as source:
        yield Ran(source, saved.root, first)


def _loads(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {c.partition: c for c in result.get_asset_check_evaluations()
            if c.check_name == LOADS_CHECK}


def _trial_events(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    """Day -> the metadata of its geopm_trials materialization in this run."""
    return {event.partition: event.materialization.metadata
            for event in result.get_asset_materialization_events()
            if event.asset_key == geopm_trials.key}


def test_every_report_is_one_trial_loaded_in_the_geopm_run(ran):
    reports, landing, result = ran.source, ran.landing, ran.first
    assert result.success
    assert {day: c.passed for day, c in _loads(result).items()} == dict.fromkeys(
        DAY.values(), True)
    trials = reports.trials()
    assert set(trials) == set(KEYS)
    for key in KEYS:
        name = key.removeprefix("landing/")
        threads, timers = TRIAL_SHAPE[name]
        trial = trials[key]
        assert (trial["total_threads"], trial["source_key"]) == (threads, str(landing / name))
        assert reports.count("timer_call_data", trial["id"]) == timers
    legacy = trials[f"landing/{LEGACY}"]
    assert reports.count("counter_value", legacy["id"]) == 9 + 8 + 8 + 2 + 17
    with reports.taudb.open() as db:
        # TAU's TOTAL thread (-2) of the Application Totals: the report's package energy
        total = db.query(
            "SELECT sum(v.inclusive_value) FROM timer_value v "
            "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
            "JOIN timer_callpath c ON d.timer_callpath = c.id JOIN timer t ON c.timer = t.id "
            "JOIN metric m ON v.metric = m.id WHERE h.trial = ? AND h.thread_index = -2 "
            "AND t.name = 'Application Totals' AND m.name IN ('PACKAGE_ENERGY (J)', "
            "'DRAM_ENERGY (J)')", (trials[f"landing/{YAML}"]["id"],))[0][0]
    assert total == pytest.approx(ENERGY_J[YAML])
    events = _trial_events(result)
    assert {key: events[DAY[key]]["trial_ids"].value[key] for key in KEYS} == {
        key: trials[key]["id"] for key in KEYS}
    assert all(events[DAY[key]]["reports_loaded"].value == 1 for key in KEYS)


def _rows(trial: TrialData) -> dict[str, list]:
    """Every row of a stored trial but its name, each frame sorted."""
    frames = {"threads": trial.threads, "timers": trial.timers, "values": trial.timer_values,
              "counters": trial.counters, "metadata": trial.metadata}
    return {"metrics": trial.metrics, "source_key": trial.source_key,
            "fingerprint": trial.fingerprint, "trial_metadata": trial.trial_metadata,
            **{name: sorted(map(tuple, frame.astype(str).to_numpy().tolist()))
               for name, frame in frames.items()}}


def test_the_dagster_trial_is_the_trial_taudb_load_writes(ran, tmp_path):
    """So what TAU's own reader shows of the CLI's trials (tests/taudb/test_tau_reader.py,
    the bundled reports and a session report) holds for the Dagster ones."""
    reports, landing = ran.source, ran.landing
    trials = reports.trials()
    with TaudbDatabase(f"sqlite:///{tmp_path}/cli.sqlite") as cli, reports.taudb.open() as db:
        for key in KEYS:
            path = landing / key.removeprefix("landing/")
            expected = read_stored_trial(cli, load_trial(cli, read_trial_source(path)))
            stored = read_stored_trial(db, trials[key]["id"])
            assert (stored.name, expected.name) == (key, path.name)
            # the Dagster fingerprint digests the CLI's with the timezone setting
            assert stored.fingerprint == digest_pairs({"report": expected.fingerprint,
                                                       "timezone": "UTC"})
            assert _rows(replace(stored, fingerprint="")) == _rows(
                replace(expected, fingerprint="")), key


def test_rerunning_unchanged_reports_loads_nothing_new(ran):
    reports = ran.source
    before = reports.trials()
    job = reports.defs.resolve_job_def(geopm.JOB_NAME)
    again = launch_in_process(job, reports.instance, dg.RunRequest(tags=ran.range_tags),
                              log_level="WARNING")  # the same range, nothing changed
    assert again.success
    assert reports.trials() == before  # same ids, same fingerprints: nothing reloaded
    events = _trial_events(again)  # every day read whole: no hand-out in its config
    assert set(events) == set(DAY.values())
    assert all((meta["reports_loaded"].value, meta["reports_unchanged"].value,
                meta["dagster/row_count"].value) == (0, 1, 0) for meta in events.values())
    assert all(c.passed for c in _loads(again).values())


def test_a_changed_timezone_reloads_the_trials(ran):
    """The trials' times depend on the source's ``timezone``: changing it reloads every
    report's trial; an unchanged rerun loads none."""
    reports, instance = ran.source, ran.source.instance
    before = reports.trials()
    same = dg.RunRequest(tags=ran.range_tags)
    zoned = _reports(instance, ran.root, timezone="Europe/Berlin")
    job = zoned.defs.resolve_job_def(geopm.JOB_NAME)
    assert launch_in_process(job, instance, same, log_level="WARNING").success
    after = zoned.trials()
    assert set(after) == set(before)
    assert all(after[key]["id"] != before[key]["id"] for key in KEYS)
    assert launch_in_process(job, instance, same, log_level="WARNING").success
    assert zoned.trials() == after


def test_a_bad_report_fails_only_itself_and_keeps_its_earlier_trial(ran):
    reports, landing = ran.source, ran.landing
    before = reports.trials()
    legacy = landing / LEGACY
    lines = (EXAMPLES / LEGACY).read_text().splitlines(keepends=True)
    legacy.write_text("".join(lines[:111]))  # the host's last line (memory HWM) missing
    # frames that pass but no trial: two region names alike once TAU trims them
    twice = REPORT_3X.replace('region: "say "hi" \\now"', 'region: "Application  Totals"')
    (landing / "twice.report").write_text(twice.lstrip("\n"))
    result = reports.tick_and_run()

    assert not result.success
    checks = _loads(result)  # twice.report: the session report's day
    assert {day: c.passed for day, c in checks.items()} == {
        DAY[f"landing/{LEGACY}"]: False, DAY[f"landing/{SESSION}"]: False}
    assert "not computed" in checks[DAY[f"landing/{LEGACY}"]].description
    bad = checks[DAY[f"landing/{SESSION}"]]
    assert bad.metadata["file"].value == str(landing / "twice.report")
    assert "host '0012' has two timers named 'Application Totals'" in (
        bad.metadata["error"].value)
    assert reports.trials() == before  # the bad legacy report keeps its trial; twice: none
    status = reports.instance.get_status_by_partition(
        geopm_trials.key, sorted(DAY.values()), geopm_days)
    assert status == {DAY[f"landing/{YAML}"]: dg.AssetPartitionStatus.MATERIALIZED,
                      DAY[f"landing/{LEGACY}"]: dg.AssetPartitionStatus.FAILED,
                      DAY[f"landing/{SESSION}"]: dg.AssetPartitionStatus.FAILED}
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        "2 of 2 partition(s) failed:\n")


# --- GEOPM: a report given twice --------------------------------------------------------------

def test_a_report_landed_under_two_names_counts_once(reports, landing):
    shutil.copy(landing / YAML, landing / "copy.report")  # the same file, a second name
    result = reports.tick_and_run()
    assert result.success
    tables = reports.tables
    assert set(tables.read_table(REGION_TABLE)["report"]) == {
        "landing/copy.report", f"landing/{LEGACY}"}  # the copy's key sorts first: kept
    report = tables.read_table(REPORT_TABLE)
    application = report[report["section"] == "application"]
    assert (application["package_energy_j"] + application["dram_energy_j"]).sum() == (
        pytest.approx(sum(ENERGY_J.values())))
    facts = tables.read_table(FACTS_TABLE)  # kept per entry: every source, here GEOPM alone
    assert len(facts) == 6 and facts["energy_j"].sum() == pytest.approx(sum(ENERGY_J.values()))
    for asset in (geopm_region_energy, geopm_report_energy):
        [event] = [e for e in result.get_asset_materialization_events()
                   if e.asset_key == asset.key]
        metadata = event.materialization.metadata
        assert metadata["reports_given_twice"].value == 1
        assert metadata["given_twice"].value == {f"landing/{YAML}": "landing/copy.report"}
        assert metadata["reports"].value == 3  # legacy, session, the YAML report once


# --- PowerAPI ---------------------------------------------------------------------------------

def _powerapi(instance, root: Path) -> Source:
    """The PowerAPI source over ``root``'s landing folder ``landing`` (its warehouse and
    TAUdb under ``root``)."""
    return Source(instance, root, powerapi, "powerapi_source",
                  PowerapiSource(landing_folders=[str(root / "landing")], quiet_period_s=0))


@pytest.fixture(scope="module")
def sensor_days_once(tmp_path_factory) -> Saved:
    """The bundled PowerAPI examples landed in ``landing``, through the PowerAPI run: once
    per module."""
    base = tmp_path_factory.mktemp("powerapi")
    with instance_in(Saved.storage(base)) as instance:
        shutil.copytree(POWERAPI_EXAMPLES, base / "root" / "landing",
                        ignore=shutil.ignore_patterns("*.md"))
        source = _powerapi(instance, base / "root")
        assert source.tick_and_run().success
    return Saved.save(base, source.cursor)


@pytest.fixture
def sensor_days(sensor_days_once: Saved, tmp_path) -> Iterator[tuple[Source, Path]]:
    """The bundled PowerAPI examples landed in ``landing``, through the PowerAPI run
    (:func:`sensor_days_once`), for this test."""
    with sensor_days_once.restored_source(tmp_path, _powerapi) as source:
        yield source, sensor_days_once.root / "landing"


def test_the_automation_starts_powerapi_trials_only_once_windows_are_stored(instance, tmp_path):
    """A frames partition stored while the window table never was (the landing's only file was
    bad) starts no trials run, whose only outcome would be its verdict; the window table
    stored, the next tick asks for one."""
    defs = dg.Definitions(
        assets=[powerapi_validated_frames, powerapi_window_energy, powerapi_trials],
        resources={"powerapi_source": PowerapiSource(landing_folders=[str(tmp_path)]),
                   "warehouse": Warehouse(root=str(tmp_path / "warehouse")),
                   "taudb": TaudbResource(url=f"sqlite:///{tmp_path}/taudb.sqlite")})
    trials = powerapi_trials.key

    def landed(spec: dg.AssetSpec, partition: str | None = None) -> None:
        instance.report_runless_asset_event(dg.AssetMaterialization(spec.key, partition=partition))

    # the cadence's tick (assets/follow_cadence.py) passes while the window table is
    # missing: the trials are asked for once it is stored
    at = [NOON + timedelta(minutes=minutes) for minutes in (1, 7, 8)]
    start = dg.evaluate_automation_conditions(defs=defs, instance=instance, evaluation_time=at[0])
    instance.add_dynamic_partitions(powerapi_days.name, ["landing/2021-01-13"])
    landed(powerapi_validated_frames, "landing/2021-01-13")
    frames = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=start.cursor,
                                               evaluation_time=at[1])
    assert frames.get_num_requested(trials) == 0
    landed(powerapi_window_energy)
    windows = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                cursor=frames.cursor, evaluation_time=at[2])
    assert windows.get_num_requested(trials) == 1


def test_an_empty_stored_window_table_loads_no_trial_and_is_no_failure(sensor_days):
    """Every entry removed from the landing folder (a note left in it), the tables are
    rebuilt empty: powerapi_trials, started by that materialization, succeeds with nothing
    to load (its verdict is for a window table never stored), and the trial loaded before
    stays."""
    source, folder = sensor_days
    before = _load_days(source)["trial_ids"].value
    (folder / "notes.md").write_text("not a report\n")
    for entry in folder.iterdir():
        if entry.name != "notes.md":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    rebuilt = source.defs.resolve_job_def(powerapi.JOB_NAME).execute_in_process(
        instance=source.instance, asset_selection=[powerapi_window_energy.key])
    assert rebuilt.success and source.tables.read_table("powerapi_window_energy").empty
    after = _load_days(source)
    assert (after["days_loaded"].value, after["trial_ids"].value) == (0, {})
    assert {trial["id"] for trial in source.trials().values()} == set(before.values())


def _load_days(source: Source) -> dict:
    result = dg.materialize([powerapi_trials], instance=source.instance, resources={
        **source.resource, "warehouse": source.warehouse, "taudb": source.taudb})
    [event] = result.get_asset_materialization_events()
    return event.materialization.metadata


def test_powerapi_examples_are_one_trial_of_their_sensor_and_day(sensor_days):
    source, _ = sensor_days
    metadata = _load_days(source)
    [trial] = source.trials().values()
    assert trial["name"] == "sensor_test/2021-01-13" and trial["total_threads"] == 5
    table = Tables(source.warehouse.root).table_dir("powerapi_window_energy").resolve()
    assert trial["source_key"] == f"{table}#sensor_test/2021-01-13"
    # one window entered by each of the 5 targets, 3 metrics; 5 user events (as the mapping
    # test of the same files): the reports landed in two forms count once
    assert source.count("timer_call_data", trial["id"]) == 5
    assert source.count("counter_value", trial["id"]) == 5
    with source.taudb.open() as db:
        measured = db.query(
            "SELECT v.inclusive_value FROM timer_value v "
            "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
            "JOIN metric m ON v.metric = m.id WHERE h.trial = ? AND h.thread_index = -2 "
            "AND m.name = 'MEASURED CPU ENERGY (J)'", (trial["id"],))
    assert measured == [(pytest.approx(12.19696044921875, rel=1e-12),)]
    assert metadata["days_loaded"].value == 1 and metadata["trial_ids"].value == {
        "sensor_test/2021-01-13": trial["id"]}


def test_only_the_days_a_new_file_touches_are_loaded_again(sensor_days):
    source, folder = sensor_days
    first = _load_days(source)["trial_ids"].value
    again = _load_days(source)
    assert again["days_loaded"].value == 0 and again["trial_ids"].value == first

    hwpc = (POWERAPI_EXAMPLES / "smartwatts_timeline.jsonl").read_text()
    (folder / "node2.jsonl").write_text(hwpc.replace("sensor_test", "node2"))
    assert source.tick_and_run().success
    after = _load_days(source)
    assert (after["days_loaded"].value, after["days_unchanged"].value) == (1, 1)
    assert list(after["rows_loaded"].value) == ["node2/2021-01-13"]
    assert after["trial_ids"].value["sensor_test/2021-01-13"] == first["sensor_test/2021-01-13"]
    trials = source.trials()
    assert {name: t["total_threads"] for name, t in trials.items()} == {
        "sensor_test/2021-01-13": 5, "node2/2021-01-13": 1}  # its HWPC reports only
