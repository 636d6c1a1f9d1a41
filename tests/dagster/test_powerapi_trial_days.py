"""``powerapi_trials`` reads only the sensor-days changed since the trials were last loaded
(``joulehouse/powerapi/trial_days.py``), and loads what a whole read loads.

Five days of one sensor land (the bundled fixture's reports moved to 2021-01-10 .. 14, one
entry per day: a folder of its HWPC and power reports); a landing in one day then reads
that day's windows and power reports alone, though the PowerAPI pipeline rewrote the
sensor's windows of every day. The five days are landed and loaded once per module; each
test starts from a copy of what that left, put back at the same paths.
"""

import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from assets.pools import TRIALS_POOL, tables_pool
from assets.powerapi import (
    powerapi_pipeline,
    powerapi_validated_frames,
    powerapi_window_energy,
    stored_frame,
    stored_keys,
)
from assets.taudb import powerapi_trials
from joulehouse import entry_table
from joulehouse.powerapi import trial_days
from joulehouse.taudb.stored import read_stored_trial
from joulehouse.warehouse import Warehouse as Tables
from resources import TaudbResource, Warehouse
from sensors import powerapi
from sensors.local import tick
from tests.dagster.source_runs import Saved, instance_in
from tests.dagster.test_source_trials import (
    POWERAPI_EXAMPLES,
    Source,
    _load_days,
    _rows,
)
from tests.dagster.test_source_trials import _powerapi as _source

DAYS = [f"2021-01-{day}" for day in range(10, 15)]
SENSOR = "sensor_test"


def _day_entry(folder: Path, name: str, day: str, target: str | None = None) -> None:
    """An entry ``name``: the fixture's HWPC and power reports moved to ``day``; with
    ``target``, its power reports alone, of that cgroup."""
    entry = folder / name
    entry.mkdir()
    power = (POWERAPI_EXAMPLES / "power.jsonl").read_text().replace("2021-01-13", day)
    if target is not None:
        (entry / "power.jsonl").write_text(power.replace('"influxdb"', f'"{target}"'))
        return
    (entry / "power.jsonl").write_text(power)
    (entry / "hwpc.jsonl").write_text((POWERAPI_EXAMPLES / "smartwatts_timeline.jsonl")
                                      .read_text().replace("2021-01-13", day))


@pytest.fixture(scope="module")
def landed(tmp_path_factory) -> Saved:
    """Five days of the sensor landed through the PowerAPI run, their trials loaded: once
    per module, saved for each test to start from."""
    base = tmp_path_factory.mktemp("days")
    with instance_in(Saved.storage(base)) as instance:
        (base / "root" / "landing").mkdir()
        for day in DAYS:
            _day_entry(base / "root" / "landing", f"day{day[-2:]}", day)
        source = _source(instance, base / "root")
        assert source.tick_and_run().success
        first = _load_days(source)
        assert (first["read_whole"].value, first["days_loaded"].value) == (
            "first run: no state", 5)
    return Saved.save(base, source.cursor)


#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a later run's.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


@pytest.fixture
def days(landed: Saved, tmp_path) -> Iterator[tuple[Source, Path]]:
    """The five days landed and their trials loaded (:func:`landed`), for this test: put
    back at the same paths, with the instance and the sensor's cursor of then."""
    with landed.restored_source(tmp_path, _source) as source:
        yield source, landed.root / "landing"


class Reads:
    """What the trials step reads of the window table and the power reports' pieces (those
    read whole, and those read for a changed day, with the reports it kept)."""

    def __init__(self, monkeypatch):
        self.windows, self.whole, self.pieces, self.power = [], [], [], []
        read_where, read_partitions, read_table, power_reports = (
            entry_table.read_where, Tables.read_partitions, Tables.read_table,
            trial_days._power_reports)

        def where(tables, table, predicate, *args):
            rows = read_where(tables, table, predicate, *args)
            if table == trial_days.WINDOW_TABLE:
                if predicate is None:  # the table read whole
                    self.whole.append(table)
                else:
                    self.windows.append(rows)
            return rows

        def partitions(tables, table, keys):
            keys = list(keys)
            if table == trial_days.POWER_TABLE:
                self.pieces += keys
            return read_partitions(tables, table, keys)

        def whole(tables, table):
            self.whole.append(table)
            return read_table(tables, table)

        def power(tables, pieces, where):
            pieces = list(pieces)
            self.pieces += pieces
            self.power += power_reports(tables, pieces, where)
            return self.power

        monkeypatch.setattr(entry_table, "read_where", where)
        monkeypatch.setattr(trial_days, "_power_reports", power)
        monkeypatch.setattr(Tables, "read_partitions", partitions)
        monkeypatch.setattr(Tables, "read_table", whole)

    def window_days(self) -> set[str]:
        return {f"{sensor}/{start:%Y-%m-%d}" for rows in self.windows
                for sensor, start in zip(rows["sensor"], rows["window_start"])}

    def power_days(self) -> set[str]:
        return {name for rows in self.power if len(rows)
                for name in trial_days._power_names(rows)}


def _recompute_windows(source: Source) -> None:
    """The PowerAPI run that recomputes the window table (after an entry was removed)."""
    assert source.defs.resolve_job_def(powerapi.JOB_NAME).execute_in_process(
        instance=source.instance, asset_selection=[powerapi_window_energy.key]).success


def test_a_landing_in_one_day_reads_and_loads_that_day_alone(days, monkeypatch):
    source, folder = days
    ids = _load_days(source)["trial_ids"].value
    _day_entry(folder, "cgroup12", "2021-01-12", target="newcg")
    assert source.tick_and_run().success
    reads = Reads(monkeypatch)
    after = _load_days(source)
    changed = f"{SENSOR}/2021-01-12"
    assert reads.whole == [] and reads.window_days() == reads.power_days() == {changed}
    # the pieces of the two entries holding the day's power reports, none of another day
    assert sorted(piece.split("@")[0] for piece in reads.pieces) == [
        "landing/cgroup12", "landing/day12"]
    assert (after["read_whole"].value, after["days_read"].value) == ("", 1)
    assert (after["days_loaded"].value, after["days_unchanged"].value) == (1, 4)
    assert list(after["rows_loaded"].value) == [changed]
    assert {name: trial for name, trial in after["trial_ids"].value.items()
            if name != changed} == {name: trial for name, trial in ids.items() if name != changed}
    assert source.trials()[changed]["total_threads"] == 6  # the new cgroup's thread


def _stored(source: Source) -> dict[str, dict]:
    """Every trial's rows by name (ids left out)."""
    with source.taudb.open() as db:
        return {name: _rows(read_stored_trial(db, trial["id"]))
                for name, trial in source.trials().items()}


def test_an_incremental_sequence_loads_what_a_whole_read_loads(days, tmp_path):
    """A landing in one day, then a day's entry removed (its sensor recomputed by a run
    without partitions): the trials kept step by step equal those a first run loads into an
    empty TAUdb from the same tables; the removed day's trial stays, as before, out of the
    step's metadata."""
    source, folder = days
    _day_entry(folder, "cgroup12", "2021-01-12", target="newcg")
    assert source.tick_and_run().success
    assert _load_days(source)["days_loaded"].value == 1
    shutil.rmtree(folder / "day14")
    _recompute_windows(source)
    removed = _load_days(source)
    assert (removed["read_whole"].value, removed["days_read"].value) == ("", 0)
    assert sorted(removed["trial_ids"].value) == [f"{SENSOR}/{day}" for day in DAYS[:4]]
    kept = _stored(source)
    assert sorted(kept) == [f"{SENSOR}/{day}" for day in DAYS]  # 2021-01-14's stays

    for table in (trial_days.STATE_TABLE, trial_days.PIECES_TABLE):
        shutil.rmtree(source.tables.table_dir(table))
    source.taudb = TaudbResource(url=f"sqlite:///{tmp_path}/rebuilt.sqlite")
    rebuilt = _load_days(source)
    assert (rebuilt["read_whole"].value, rebuilt["days_loaded"].value) == (
        "first run: no state", 4)
    assert _stored(source) == {name: rows for name, rows in kept.items()
                               if name != f"{SENSOR}/2021-01-14"}


def test_without_a_state_every_day_is_read_and_none_reloaded(days, monkeypatch):
    source, _ = days
    ids = _load_days(source)["trial_ids"].value
    shutil.rmtree(source.tables.table_dir(trial_days.STATE_TABLE))
    reads = Reads(monkeypatch)
    again = _load_days(source)
    assert reads.whole == [trial_days.WINDOW_TABLE]
    assert (again["read_whole"].value, again["days_read"].value) == ("first run: no state", 5)
    assert (again["days_loaded"].value, again["trial_ids"].value) == (0, ids)
    # the state written again, the next run reads nothing
    assert _load_days(source)["days_read"].value == 0


def test_an_unreadable_state_is_read_whole(days):
    source, _ = days
    inputs = source.tables.partition_path(trial_days.STATE_TABLE, trial_days.INPUTS)
    Path(inputs).write_bytes(b"not parquet")
    again = _load_days(source)
    assert again["read_whole"].value.startswith("the state cannot be read")
    assert (again["days_read"].value, again["days_loaded"].value) == (5, 0)


def _as_a_whole_read(source: Source, loaded: dict) -> None:
    """The step's trials (``loaded``: its metadata) are those a whole read loads, as the
    step read them before it kept a state: the same sensor-days, each with the fingerprint
    of its windows and power reports read whole (every stored entry still landed)."""
    settings = source.resource["powerapi_source"]
    power = stored_frame(source.tables, "power_reports", stored_keys(settings, source.tables))
    whole = trial_days.sensor_days(source.tables.read_table(trial_days.WINDOW_TABLE), power[0])
    with source.taudb.open() as db:
        assert {name: read_stored_trial(db, trial).fingerprint
                for name, trial in loaded["trial_ids"].value.items()} == {
            day.name: day.fingerprint(settings.window) for day in whole}


def _read_days(loaded: dict) -> list[str]:
    """The days of the sensor the step loaded, after checking it read those alone."""
    assert (loaded["read_whole"].value, loaded["days_read"].value) == (
        "", loaded["days_loaded"].value)
    return [name.split("/")[1] for name in loaded["rows_loaded"].value]


def test_a_rewritten_file_reloads_every_day_whose_windows_changed(days):
    """An entry's power reports rewritten (rotated: another day and cgroup): its new
    generation's pieces give the days they left and entered; the sensor's recomputed
    windows differ on 2021-01-14 too, which the window path alone finds."""
    source, folder = days
    (folder / "day13" / "power.jsonl").write_text(
        (POWERAPI_EXAMPLES / "power.jsonl").read_text().replace("2021-01-13", "2021-01-11")
        .replace('"influxdb"', '"rotated"'))
    assert source.tick_and_run().success
    loaded = _load_days(source)
    assert _read_days(loaded) == ["2021-01-11", "2021-01-13", "2021-01-14"]
    _as_a_whole_read(source, loaded)


def test_an_hwpc_only_landing_loads_its_day_from_the_windows(days):
    """An entry of HWPC reports alone on a new day: its windows are new, no power report
    changed (the window path alone finds the day)."""
    source, folder = days
    (folder / "hwpc15").mkdir()
    (folder / "hwpc15" / "hwpc.jsonl").write_text(
        (POWERAPI_EXAMPLES / "smartwatts_timeline.jsonl").read_text()
        .replace("2021-01-13", "2021-01-15"))
    assert source.tick_and_run().success
    loaded = _load_days(source)
    assert _read_days(loaded) == ["2021-01-15"]
    _as_a_whole_read(source, loaded)


def test_an_entry_removed_reloads_its_days_before_the_pipeline_runs(days):
    """An entry removed from its folder, no PowerAPI run since: the windows are those
    stored, its power reports no longer count (the power path alone finds the day)."""
    source, folder = days
    _day_entry(folder, "cgroup12", "2021-01-12", target="newcg")
    assert source.tick_and_run().success
    assert _read_days(_load_days(source)) == ["2021-01-12"]
    shutil.rmtree(folder / "cgroup12")
    loaded = _load_days(source)
    assert _read_days(loaded) == ["2021-01-12"]
    _as_a_whole_read(source, loaded)


def test_a_grown_file_reloads_the_days_of_its_new_piece(days):
    """A power report file grown (another cgroup's reports of its day appended), stored
    by a run of the frames alone: the windows are those stored, the new piece's reports
    count (the index of the new piece alone finds the day)."""
    source, folder = days
    power = folder / "day12" / "power.jsonl"
    text = power.read_text()
    with power.open("a") as grown:
        grown.write(text.replace('"influxdb"', '"grown"'))
    [request] = tick(source.defs.resolve_sensor_def(powerapi.SENSOR_NAME), source.instance,
                     source.resource, source.cursor).run_requests
    assert source.defs.resolve_job_def(powerapi.JOB_NAME).execute_in_process(
        instance=source.instance, tags=request.tags, run_config=request.run_config,
        asset_selection=[powerapi_validated_frames.key]).success
    loaded = _load_days(source)
    assert sorted(entry_table.read(source.tables, trial_days.PIECES_TABLE)["piece"]) == [
        "landing/day10@0.0", "landing/day11@0.0", "landing/day12@0.0", "landing/day12@0.1",
        "landing/day13@0.0", "landing/day14@0.0"]
    assert _read_days(loaded) == ["2021-01-12"]
    _as_a_whole_read(source, loaded)


def _restored_taudb(source: Source, tmp_path: Path) -> None:
    """JOULEHOUSE_TAUDB_URL now names a new (or restored) database, the state kept."""
    source.taudb = TaudbResource(url=f"sqlite:///{tmp_path}/restored.sqlite")


def _moved_warehouse(source: Source, tmp_path: Path) -> None:
    """The warehouse copied elsewhere (its files' names kept), the step pointed there."""
    moved = shutil.copytree(source.warehouse.root, tmp_path / "moved")
    source.warehouse, source.tables = Warehouse(root=str(moved)), Tables(str(moved))


@pytest.mark.parametrize("switch", [_restored_taudb, _moved_warehouse])
def test_another_taudb_or_warehouse_location_has_every_day_loaded(days, tmp_path, switch):
    """The state says which TAUdb and which window table (the source keys) it describes:
    pointed at another, the step loads every day there, though no input changed."""
    source, _ = days
    switch(source, tmp_path)
    again = _load_days(source)
    assert again["read_whole"].value == (
        "the window setting, the TAUdb or the window table's location changed")
    assert (again["days_read"].value, again["days_loaded"].value) == (5, 5)
    assert sorted(source.trials()) == [f"{SENSOR}/{day}" for day in DAYS]
    assert _load_days(source)["days_read"].value == 0


def _powerapi_run_before(step: str, source: Source, folder: Path, monkeypatch) -> None:
    """Each call of ``trial_days``' function ``step`` from now on first lands a second
    cgroup of day 12 and runs the PowerAPI run over it (the trials step and the PowerAPI
    step run beside each other: their pools differ)."""
    original = getattr(trial_days, step)

    def powerapi_run_then(*args, **kwargs):
        _day_entry(folder, "cgroup_b", "2021-01-12", target="cgb")
        assert source.tick_and_run().success
        return original(*args, **kwargs)

    monkeypatch.setattr(trial_days, step, powerapi_run_then)


def _landing_while_the_trials_read(source: Source, folder: Path, monkeypatch) -> str:
    """A new cgroup of day 12 landed and run; a trials run during which, after its state's
    snapshots and before its reads, a PowerAPI run stores a second cgroup of the day (the
    two steps run beside each other: their pools differ); that day's name."""
    day = f"{SENSOR}/2021-01-12"
    _day_entry(folder, "cgroup_a", "2021-01-12", target="cga")
    assert source.tick_and_run().success
    _powerapi_run_before(trial_days._read.__name__, source, folder, monkeypatch)
    assert list(_load_days(source)["rows_loaded"].value) == [day]
    monkeypatch.undo()
    return day


def test_what_a_powerapi_run_stores_while_the_trials_read_is_read_by_the_next_trials_run(
        days, monkeypatch):
    """The trials hold what their state's snapshots held (the day's 5 targets and the
    first cgroup), not the second cgroup stored after them; the next trials run reads it."""
    source, folder = days
    day = _landing_while_the_trials_read(source, folder, monkeypatch)
    assert source.trials()[day]["total_threads"] == 6
    again = _load_days(source)
    assert (again["days_read"].value, list(again["rows_loaded"].value)) == (1, [day])
    assert source.trials()[day]["total_threads"] == 7
    assert _load_days(source)["days_read"].value == 0


def test_a_whole_read_holds_its_snapshot_though_a_powerapi_run_stores_meanwhile(
        days, monkeypatch):
    """Without a state every day is read whole, from the snapshot the new state records: a
    cgroup of day 12 that a PowerAPI run stores after it (before the whole read's pieces
    are listed) is left to the next trials run, which reads that day alone."""
    source, folder = days
    day = f"{SENSOR}/2021-01-12"
    shutil.rmtree(source.tables.table_dir(trial_days.STATE_TABLE))
    _powerapi_run_before(trial_days._entries_pieces.__name__, source, folder, monkeypatch)
    whole = _load_days(source)
    monkeypatch.undo()
    assert (whole["read_whole"].value, whole["days_read"].value) == ("first run: no state", 5)
    assert source.trials()[day]["total_threads"] == 5
    again = _load_days(source)
    assert (again["days_read"].value, list(again["rows_loaded"].value)) == (1, [day])
    assert source.trials()[day]["total_threads"] == 6


def test_a_day_changed_while_the_trials_read_and_changed_back_keeps_the_trial_of_its_inputs(
        days, monkeypatch):
    """The second cgroup removed and the windows recomputed before the next trials run: the
    day is as the state's snapshot held it, so it is not read again, and its trial (read
    from that snapshot, not from the version the PowerAPI run committed meanwhile) is
    that of the inputs now."""
    source, folder = days
    day = _landing_while_the_trials_read(source, folder, monkeypatch)
    shutil.rmtree(folder / "cgroup_b")
    _recompute_windows(source)
    assert _load_days(source)["days_read"].value == 0
    assert source.trials()[day]["total_threads"] == 6


def test_a_run_stopped_before_its_state_has_its_days_read_again(days, monkeypatch):
    """A run stopped after its loads, before its state, then its input gone back to what the
    state consumed (the landed entry removed, the sensor recomputed): its day shows no
    change, but is read again (``pending``), and its trial is that of the inputs now."""
    source, folder = days
    day = f"{SENSOR}/2021-01-12"
    _day_entry(folder, "cgroup12", "2021-01-12", target="newcg")
    assert source.tick_and_run().success

    def stop(*_):
        raise dg.Failure("stopped", allow_retries=False)

    monkeypatch.setattr(trial_days.TrialDays, "commit", stop)
    with pytest.raises(dg.Failure, match="stopped"):
        _load_days(source)
    monkeypatch.undo()
    assert source.trials()[day]["total_threads"] == 6
    shutil.rmtree(folder / "cgroup12")
    _recompute_windows(source)
    again = _load_days(source)
    assert (again["days_read"].value, list(again["rows_loaded"].value)) == (1, [day])
    assert source.trials()[day]["total_threads"] == 5
    assert _load_days(source)["days_read"].value == 0


def test_the_trials_step_runs_in_a_pool_of_its_own_not_powerapis():
    """Never two ``powerapi_trials`` runs at once (the pool's limit is 1): two loads of a day
    from different inputs, the older trial written last, would leave a state that never
    reads the day again. Not in PowerAPI's pool, whose runs waited behind the trials'."""
    assert powerapi_trials.op.pool == TRIALS_POOL
    assert powerapi_pipeline.op.pool == tables_pool("powerapi")
