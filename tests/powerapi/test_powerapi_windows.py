"""The window table kept per sensor (joulehouse/powerapi/windows.py) and its facts kept per
sensor: after a seeded random sequence of landings, fixes in place, re-landings (the same
reports under a second key: given twice, counted once) and removals, each refreshed with
only the partitions it touched, both equal a rebuild from scratch, row for row."""

import json
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse import entry_table
from joulehouse.facts_entries import TABLE as FACTS_TABLE
from joulehouse.facts_entries import Ownership, replace_owned
from joulehouse.powerapi.energy import (
    FACTS_SOURCE,
    MACHINE_TARGETS,
    energy_facts_rows,
    window_energy,
)
from joulehouse.powerapi.stream import ReportStore
from joulehouse.powerapi.windows import (
    FRAMES,
    SENSORS_TABLE,
    WINDOW_TABLE,
    combined,
    refresh,
    settle,
)
from joulehouse.warehouse import Warehouse

WINDOW = "10s"
SENSORS = ["s0", "s1", "s2"]
START = pd.Timestamp("2021-01-13 09:51:00", tz="UTC")
#: The sequence; what each changes (which file, sensor, time) is drawn at random.
ACTIONS = ["land", "land", "land", "again", "fix", "land", "remove", "fix", "again", "land"]
#: The step refreshed as a run without partitions: every sensor.
REBUILT = 7
ORDER = ["sensor", "component", "window_start", "method", "target"]
SENSOR_OWNS = Ownership(prefix=lambda sensor: f"{sensor}/",
                        owner_of=lambda entity: entity.split("/", 1)[0])


def write_reports(path: Path, sensor: str, first_s: int, rng: np.random.Generator) -> Path:
    """A JSON-lines file of power reports of ``sensor`` for ~25 s from ``first_s``: ticks of
    1 s, some 2 s and a gap, so that the sensor's median tick and its windows straddling
    files depend on its other files; targets rapl, two cgroups."""
    times, at = [], float(first_s)
    while at < first_s + 25:
        times.append(at)
        at += rng.choice([1.0, 1.0, 1.0, 2.0, 7.0])
    lines = [json.dumps({"timestamp": (START + pd.Timedelta(seconds=t)).isoformat(),
                         "sensor": sensor, "target": target,
                         "metadata": {"scope": "cpu", "socket": 0, "formula": "f", "ratio": 0.5},
                         "power": round(float(rng.uniform(1, 20)), 3)})
             for t in times for target in ("rapl", "web", "db")]
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest(store: ReportStore, key: str, path: Path) -> None:
    store.ingest(key, path, now=time.time() + 3600, quiet_s=0.0)


def rebuilt(store: ReportStore, registered: set[str]) -> pd.DataFrame:
    keys = [key for key in store.stored_keys() if key in registered]
    frames = {name: combined(name, [store.read(name, [key]) for key in keys])[0]
              for name in FRAMES}
    return window_energy(frames["rapl_energy"], frames["power_reports"], WINDOW, MACHINE_TARGETS)


def kept(tables: Warehouse, table: str, order: list[str]) -> pd.DataFrame:
    return tables.read_table(table).sort_values(order, ignore_index=True)


def run(tables: Warehouse, registered: set[str], touched: list[str] | None) -> None:
    """What the step does: the window rows, their facts, then the sensors table settled."""
    written = refresh(tables, registered, touched, WINDOW, MACHINE_TARGETS)
    facts = energy_facts_rows(written.rows, MACHINE_TARGETS)
    # a rebuild: every sensor's facts
    replace_owned(tables, FACTS_SOURCE, facts,
                  SENSORS if written.sensors is None else written.sensors, SENSOR_OWNS)
    settle(tables, written)


def assert_rebuilt(tables: Warehouse, store: ReportStore, registered: set[str]) -> None:
    """The window table and the facts equal a rebuild's, row for row."""
    whole = rebuilt(store, registered)
    pd.testing.assert_frame_equal(kept(tables, WINDOW_TABLE, ORDER), whole)
    expected = entry_table.to_microseconds(energy_facts_rows(whole, MACHINE_TARGETS))
    stored = kept(tables, FACTS_TABLE, ["entity", "component", "window_start", "method"])
    pd.testing.assert_frame_equal(stored, expected, check_dtype=False)


def test_a_random_sequence_of_changes_keeps_windows_and_facts_equal_to_a_rebuild(tmp_path):
    rng, pick = np.random.default_rng(3), random.Random(3)
    tables = Warehouse(tmp_path / "warehouse")
    store, landing = ReportStore(tables), tmp_path / "landing"
    landing.mkdir()
    registered: set[str] = set()
    files: dict[str, Path] = {}
    for step, action in enumerate(ACTIONS):
        touched = []
        if action == "land":  # a new file of a sensor, overlapping its other files' windows
            key = f"landing/r{step}.jsonl"
            files[key] = write_reports(landing / f"r{step}.jsonl", pick.choice(SENSORS),
                                       pick.randrange(0, 60, 5), rng)
        elif action == "fix":  # a file rewritten in place: read whole again
            key = pick.choice(sorted(registered))
            write_reports(files[key], pick.choice(SENSORS), pick.randrange(0, 60, 5), rng)
        elif action == "again":  # the same reports landed a second time, under a new key
            key = f"landing/again{step}.jsonl"
            files[key] = landing / f"again{step}.jsonl"
            files[key].write_bytes(files[pick.choice(sorted(registered))].read_bytes())
        else:  # deleted from Dagster
            key = pick.choice(sorted(registered))
            registered.discard(key)
        if action != "remove":
            ingest(store, key, files[key])
            registered.add(key)
        touched.append(key)
        run(tables, registered, None if step == REBUILT else touched)
        assert_rebuilt(tables, store, registered)
        held = kept(tables, SENSORS_TABLE, ["partition", "sensor"])
        assert set(held["partition"]) <= registered


def test_a_refresh_reads_only_the_partitions_holding_the_touched_sensors(tmp_path):
    rng = np.random.default_rng(0)
    tables = Warehouse(tmp_path / "warehouse")
    store, landing = ReportStore(tables), tmp_path / "landing"
    landing.mkdir()
    keys = []
    for index, sensor in enumerate(["s0", "s0", "s1", "s1", "s2"]):
        key = f"landing/{sensor}-{index}.jsonl"
        ingest(store, key, write_reports(landing / f"{index}.jsonl", sensor, 10 * index, rng))
        keys.append(key)
    assert refresh(tables, set(keys), None, WINDOW, MACHINE_TARGETS).partitions == 5
    new = "landing/s1-new.jsonl"
    ingest(store, new, write_reports(landing / "new.jsonl", "s1", 40, rng))
    written = refresh(tables, {*keys, new}, [new], WINDOW, MACHINE_TARGETS)
    assert written.sensors == ["s1"] and written.partitions == 3  # s1's two and the new one
    assert set(written.rows["sensor"]) == {"s1"}
    version = entry_table._open(tables, WINDOW_TABLE).version()
    again = refresh(tables, {*keys, new}, [new], WINDOW, MACHINE_TARGETS)
    assert entry_table._open(tables, WINDOW_TABLE).version() == version + 1  # one commit
    pd.testing.assert_frame_equal(again.rows, written.rows)
    pd.testing.assert_frame_equal(kept(tables, WINDOW_TABLE, ORDER), rebuilt(store, {*keys, new}))


def test_both_tables_are_compacted_through_entry_sync(tmp_path, monkeypatch):
    from joulehouse import entry_sync

    due: list[str] = []
    monkeypatch.setattr(entry_sync, "compact_if_due",
                        lambda warehouse, table, above=None: due.append(table))
    tables = Warehouse(tmp_path / "warehouse")
    key = "landing/r.jsonl"
    ingest(ReportStore(tables), key,
           write_reports(tmp_path / "r.jsonl", "s0", 0, np.random.default_rng(0)))
    refresh(tables, {key}, [key], WINDOW, MACHINE_TARGETS)
    assert set(due) == {WINDOW_TABLE, SENSORS_TABLE}


@pytest.mark.parametrize("stop", [2, 3])
def test_a_stop_between_commits_leaves_no_holder_of_a_sensor_unfound(tmp_path, monkeypatch, stop):
    """P, which held s1, is fixed to hold s2, which Q holds; the run over P stops before its
    ``stop``-th commit to the window or sensors table. A later run over Q reads P for s2,
    and a retry over P recomputes what P held before and after: both equal a rebuild."""
    rng = np.random.default_rng(5)
    tables = Warehouse(tmp_path / "warehouse")
    store = ReportStore(tables)
    paths = {key: tmp_path / f"{key}.jsonl" for key in ("p", "q")}
    for key, sensor in (("p", "s1"), ("q", "s2")):
        ingest(store, key, write_reports(paths[key], sensor, 0, rng))
        run(tables, {"p", "q"}, [key])
    ingest(store, "p", write_reports(paths["p"], "s2", 12, rng))
    commits = []
    replace_keys = entry_table.replace_keys

    def stopping(*args, **kwargs):
        commits.append(args[1])
        if len(commits) == stop:
            raise KeyboardInterrupt("stopped")
        return replace_keys(*args, **kwargs)

    monkeypatch.setattr(entry_table, "replace_keys", stopping)
    with pytest.raises(KeyboardInterrupt):
        run(tables, {"p", "q"}, ["p"])
    monkeypatch.setattr(entry_table, "replace_keys", replace_keys)
    ingest(store, "q", write_reports(paths["q"], "s2", 30, rng))
    run(tables, {"p", "q"}, ["q"])
    windows, whole = kept(tables, WINDOW_TABLE, ORDER), rebuilt(store, {"p", "q"})
    pd.testing.assert_frame_equal(windows[windows["sensor"] == "s2"].reset_index(drop=True),
                                  whole[whole["sensor"] == "s2"].reset_index(drop=True))
    run(tables, {"p", "q"}, ["p"])
    assert_rebuilt(tables, store, {"p", "q"})
    assert kept(tables, SENSORS_TABLE, ["partition"]).values.tolist() == [["p", "s2"],
                                                                          ["q", "s2"]]


def test_a_rebuild_with_every_partition_deleted_empties_both_tables_and_the_facts(tmp_path):
    tables = Warehouse(tmp_path / "warehouse")
    store = ReportStore(tables)
    ingest(store, "p", write_reports(tmp_path / "p.jsonl", "s0", 0, np.random.default_rng(0)))
    run(tables, {"p"}, ["p"])
    assert len(tables.read_table(WINDOW_TABLE)) and len(tables.read_table(FACTS_TABLE))
    run(tables, set(), None)  # p deleted from Dagster: its frames stay stored
    assert_rebuilt(tables, store, set())
    assert tables.read_table(WINDOW_TABLE).empty and tables.read_table(SENSORS_TABLE).empty


def test_a_sensor_held_alone_takes_its_rows_from_its_entrys_current_own_energy(
        tmp_path, monkeypatch):
    """In the first run over the entries, s0 and s2, each held by one entry whose own energy
    (``report_energy``) was computed from its current pieces, are taken from it; s1 (two
    holders) is computed; once s0's entry is read again and its energy not, s0 is computed
    again; a run without partitions (the reference, and the repair) computes every sensor:
    always a rebuild's rows."""
    from joulehouse.powerapi import report_energy, windows

    computed: list[set[str]] = []
    compute = windows.window_energy

    def spy(rapl, power, *args):
        computed.append({str(s) for frame in (rapl, power) if frame is not None
                         for s in frame["sensor"]})
        return compute(rapl, power, *args)

    monkeypatch.setattr(windows, "window_energy", spy)
    rng = np.random.default_rng(1)
    tables = Warehouse(tmp_path / "warehouse")
    store = ReportStore(tables)
    files = {f"landing/{name}.jsonl": (tmp_path / f"{name}.jsonl", sensor, first_s)
             for name, sensor, first_s in [("a", "s0", 0), ("b", "s1", 0), ("c", "s1", 20),
                                           ("d", "s2", 10)]}
    for key, (path, sensor, first_s) in files.items():
        ingest(store, key, write_reports(path, sensor, first_s, rng))
        frames = [combined(name, [store.read(name, [key])])[0] for name in FRAMES]
        report_energy.store(tables, key, store.progress(key), *frames, WINDOW, MACHINE_TARGETS)
    run(tables, set(files), sorted(files))
    assert computed == [{"s1"}]
    assert_rebuilt(tables, store, set(files))
    ingest(store, "landing/a.jsonl", write_reports(tmp_path / "a.jsonl", "s0", 30, rng))
    computed.clear()
    run(tables, set(files), ["landing/a.jsonl"])
    assert computed == [{"s0"}]
    assert_rebuilt(tables, store, set(files))
    computed.clear()
    run(tables, set(files), None)
    assert computed == [{"s0", "s1", "s2"}]
    assert_rebuilt(tables, store, set(files))


def test_an_entrys_energy_inputs_name_each_files_read_and_the_codes_version(monkeypatch):
    """Two progresses of one generation and as many pieces, but a file read to another
    byte (a progress cleared by hand restarts at generation 0), name other inputs; so do
    another window, other targets and another ``ENERGY_VERSION``."""
    from joulehouse.powerapi import report_energy
    from joulehouse.powerapi.stream import FileRead, Progress

    def progress(read_to_byte: int) -> Progress:
        return Progress(0, 1, {"a.jsonl": FileRead(read_to_byte, "digest", True, 0)})

    named = report_energy.inputs(progress(100), WINDOW, MACHINE_TARGETS)
    assert named == report_energy.inputs(progress(100), WINDOW, MACHINE_TARGETS)
    assert named != report_energy.inputs(progress(200), WINDOW, MACHINE_TARGETS)
    assert named != report_energy.inputs(progress(100), "2s", MACHINE_TARGETS)
    assert named != report_energy.inputs(progress(100), WINDOW, ())
    monkeypatch.setattr(report_energy, "ENERGY_VERSION", report_energy.ENERGY_VERSION + 1)
    assert named != report_energy.inputs(progress(100), WINDOW, MACHINE_TARGETS)
