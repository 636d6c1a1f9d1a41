"""How a soak's poll stamps its landed entries (``benchmarks/soak_record.stamp``), from a look
made here: an entry is seen once its entity is stored, a PowerAPI flush once its entity's
facts reach the flush's last report, intensity and tariff files once a table lists them;
what a look finds in a warehouse, reading only the files new since the previous look
(``soak_record.Looker``)."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pandas as pd
import psutil
import pytest
from soak_landers import Landed
from soak_record import LOOKED_AT, CpuSeen, Looker, Seen, cpu_seconds, poll, run_workers, stamp

from joulehouse.accounting import query
from joulehouse.warehouse import Warehouse

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)


def _landed(source: str, entity: str, reaches: datetime | None = None, entry: str = ""
            ) -> Landed:
    return Landed(source, entry or f"/landing/{entity}", entity, "ok", T0, reaches=reaches)


def test_an_entry_is_stamped_where_its_entity_is_stored_and_reaches_its_last_report():
    rows = [_landed("clustercockpit", "soak/1/100"),  # in both
            _landed("geopm", "g/a.report/h"),  # in the facts only
            _landed("gpu-benchmark", "lab/soak/bench/r1/0"),  # in neither
            _landed("powerapi", "pa/s1", reaches=T0 + timedelta(seconds=20)),  # not reached
            _landed("powerapi", "pa/s2", reaches=T0 + timedelta(seconds=20)),  # reached
            # TAU profile sets are looked up by entry among TAUdb's trials, the grid's
            # files by name among those the accounting's tables list
            _landed("tau", "", entry="/landing/tau/set1"),
            _landed("intensity", "", entry="/landing/intensity/2026-11-30.csv")]
    facts = {"soak/1/100": T0, "g/a.report/h": T0, "pa/s1": T0 + timedelta(seconds=10),
             "pa/s2": T0 + timedelta(seconds=20)}
    accounted = {"soak/1/100": T0, "pa/s2": T0 + timedelta(seconds=30)}
    stamp(rows, Seen(facts, accounted, {"/landing/tau/set1"}, {"2026-11-30.csv"}), NOW)

    assert [(row.in_facts_at, row.in_accounting_at) for row in rows] == [
        (NOW, NOW), (NOW, None), (None, None), (None, None), (NOW, NOW), (NOW, None),
        (None, NOW)]


def test_a_stamp_already_made_is_kept():
    row = _landed("clustercockpit", "soak/1/100")
    earlier = NOW - timedelta(minutes=1)
    row.in_facts_at = earlier
    stamp([row], Seen({"soak/1/100": T0}, {"soak/1/100": T0}, set(), set()), NOW)
    assert (row.in_facts_at, row.in_accounting_at) == (earlier, NOW)


def test_a_group_keeps_the_cpu_of_its_processes_that_ended_and_counts_a_new_one_from_zero():
    """A service's tree loses a child, or the service is killed and started again: its sum
    never falls, and the new process adds its own CPU."""
    seen = CpuSeen()
    first, child, again = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
                           for _ in range(3))
    try:
        one, two, three = (psutil.Process(p.pid) for p in (first, child, again))
        assert seen.add("daemon", {one: 5.0, two: 2.0}) == 7.0
        child.kill()
        child.wait()
        # the child gone: its 2 s kept; a new look at a process is the same process
        assert seen.add("daemon", {psutil.Process(first.pid): 6.0}) == 8.0
        assert seen.add("daemon", {one: None, three: 0.5}) == 8.5  # killed, a new one
        assert seen.add("postgres", {one: 1.0}) == 1.0  # groups apart
    finally:
        for process in (first, child, again):
            if process.poll() is None:
                process.kill()
                process.wait()


#: A stand-in for the code server's gRPC server: a live run worker, one that ended and is
#: not waited for (a zombie, its command line empty), and a child that is no run worker.
FAKE_GRPC_SERVER = """
import subprocess, sys, time
worker = [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))"]
live = subprocess.Popen([*worker, "60", "multiprocessing.spawn"])
ended = subprocess.Popen([*worker, "0", "multiprocessing.spawn"])
tracker = subprocess.Popen([*worker, "60"])
print(live.pid, ended.pid, tracker.pid, flush=True)
time.sleep(60)
"""


def test_a_run_worker_that_ended_and_is_not_waited_for_is_still_a_run_worker():
    """A zombie child of the gRPC server is a run worker: its CPU is a run's, not the code
    server's (it reads no command line)."""
    server = subprocess.Popen([sys.executable, "-c", FAKE_GRPC_SERVER, "api", "grpc"],
                              stdout=subprocess.PIPE, text=True)
    try:
        live, ended, tracker = map(int, server.stdout.readline().split())
        deadline = time.monotonic() + 30
        while psutil.Process(ended).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the ended child never became a zombie"
            time.sleep(0.05)
        stack = SimpleNamespace(processes={"code-server": server})
        assert sorted(p.pid for p in run_workers(stack)) == sorted([live, ended])
        assert tracker not in {p.pid for p in run_workers(stack)}
    finally:
        for child in psutil.Process(server.pid).children():
            child.kill()
        server.kill()
        server.wait()


def test_cpu_seconds_are_each_counters_growth_over_the_sampling_and_its_share():
    rows = [  # the daemon down at t=10 (an empty sample)
        {"t_s": 0.0, "daemon_cpu_s": 5.0, "webserver_cpu_s": 1.0, "code-server_cpu_s": 2.0,
         "postgres_cpu_s": 3.0, "harness_cpu_s": 4.0, "host_busy_cpu_s": 100.0},
        {"t_s": 5.0, "daemon_cpu_s": 7.0, "webserver_cpu_s": 1.5, "code-server_cpu_s": 2.0,
         "postgres_cpu_s": 4.0, "harness_cpu_s": 5.0, "host_busy_cpu_s": 109.0},
        {"t_s": 10.0, "daemon_cpu_s": None, "webserver_cpu_s": 2.0, "code-server_cpu_s": 3.0,
         "postgres_cpu_s": 5.0, "harness_cpu_s": 6.0, "host_busy_cpu_s": 118.0},
        {"t_s": 15.0, "daemon_cpu_s": 8.0, "webserver_cpu_s": 2.0, "code-server_cpu_s": 3.0,
         "postgres_cpu_s": 6.0, "harness_cpu_s": 6.5, "host_busy_cpu_s": 120.0},
    ]
    cpu = cpu_seconds(rows)
    assert cpu["window_s"] == 15.0 and cpu["host_busy_s"] == 20.0
    assert cpu["seconds"] == {"daemon": 3.0, "webserver": 1.0, "code-server": 1.0,
                              "postgres": 3.0, "harness": 2.5, "rest": 9.5}
    assert cpu["share_of_busy"]["harness"] == 0.125 and cpu["share_of_busy"]["rest"] == 0.475


def _write(tables: Warehouse, table: str, entities: dict[str, int], **columns) -> None:
    """Entries of the source ``soak`` into ``table`` (kept per entry: a Delta table) as the
    platform writes them: one row per entity of ``entities`` (name -> its window's end,
    minutes after T0) with ``columns`` (column -> a value per entity, in order)."""
    rows = pd.DataFrame({"source": "soak", "entity": list(entities),
                         "window_end": [_at(minutes) for minutes in entities.values()],
                         **columns})
    tables.write_entries(table, rows, {"source": "soak"})


def _files(tables: Warehouse, table: str, names: list[str]) -> None:
    """An intensity or tariff table that lists the files ``names`` (one file, replaced)."""
    tables.write_table(table, pd.DataFrame({"file": names}))


def _at(minutes: int) -> pd.Timestamp:
    return pd.Timestamp(T0) + pd.Timedelta(minutes=minutes)


def test_a_look_reads_only_the_files_new_since_the_last_and_finds_what_a_whole_read_does(
        empty_warehouse, monkeypatch):
    """The second look reads the data files listed now and not at the first (an entity
    re-landed later, one given its carbon, one new; the tariffs stored only now; the
    intensity table's one file replaced), not those listed at both, and finds the latest
    window end per entity, the entities with carbon and a cost, and the files, as a read
    of every file does."""
    tables = empty_warehouse
    read: list[tuple[str, set[str]]] = []
    create_view = query.create_view

    def spied(connection, warehouse, name, files, dataset_name):
        read.append((name.strip('"'), {info.path for info in files}))
        create_view(connection, warehouse, name, files, dataset_name)

    monkeypatch.setattr(query, "create_view", spied)
    stack = SimpleNamespace(tables=tables)
    looker = Looker()
    for entity, minutes, co2_g in (("a", 1, 1.0), ("b", 2, None), ("d", 4, 4.0)):  # a file each
        _write(tables, "energy_facts", {entity: minutes})
        _write(tables, "carbon_per_fact", {entity: minutes}, co2_g=[co2_g])
    _write(tables, "cost_per_fact", {"a": 1, "b": 2}, cost=[0.1, 0.2])
    _files(tables, "carbon_intensity", ["DE-1.csv"])
    first = looker.look(stack)
    assert (first.facts, first.accounted, first.files) == (
        {"a": _at(1), "b": _at(2), "d": _at(4)}, {"a": _at(1)}, {"DE-1.csv"})
    listed = {table: {info.path for info in tables.files(table)} for table in LOOKED_AT}
    assert dict(read) == {table: paths for table, paths in listed.items() if paths}

    read.clear()
    _write(tables, "energy_facts", {"a": 5, "c": 3})  # a re-landed, later; c new
    _write(tables, "carbon_per_fact", {"b": 2, "c": 3}, co2_g=[3.0, None])
    _write(tables, "cost_per_fact", {"c": 3, "d": 4}, cost=[0.3, 0.4])  # d's carbon before
    _files(tables, "carbon_intensity", ["DE-1.csv", "DE-2.csv"])
    _files(tables, "tariffs", ["site-1.csv"])
    second = looker.look(stack)
    now = {table: {info.path for info in tables.files(table)} for table in LOOKED_AT}
    new = {table: now[table] - listed[table] for table in ("energy_facts",
                                                            "carbon_per_fact",
                                                            "cost_per_fact")}
    assert all(new.values()) and all(now[table] - new[table] for table in new)
    new |= {"carbon_intensity": now["carbon_intensity"], "tariffs": now["tariffs"]}
    assert dict(read) == new  # the files listed at the first look not read again

    whole = _whole_read(tables)
    assert second.facts == whole.facts == {"a": _at(5), "b": _at(2), "c": _at(3),
                                           "d": _at(4)}
    assert second.accounted == whole.accounted == {"a": _at(1), "b": _at(2), "d": _at(4)}
    assert second.files == whole.files == {"DE-1.csv", "DE-2.csv", "site-1.csv"}


def _whole_read(tables: Warehouse) -> Seen:
    """What a read of every file of the tables finds."""
    with query.connect(tables, LOOKED_AT) as connection:
        def frame(sql: str) -> pd.DataFrame:
            return connection.sql(sql).to_arrow_table().to_pandas()

        facts = frame("SELECT entity, max(window_end) AS reach FROM energy_facts "
                      "GROUP BY entity")
        accounted = frame("SELECT entity, max(window_end) AS reach FROM carbon_per_fact "
                          "WHERE co2_g IS NOT NULL AND entity IN (SELECT entity FROM "
                          "cost_per_fact WHERE cost IS NOT NULL) GROUP BY entity")
        files = frame("SELECT file FROM carbon_intensity UNION SELECT file FROM tariffs")
    return Seen(dict(zip(facts["entity"], facts["reach"], strict=True)),
                dict(zip(accounted["entity"], accounted["reach"], strict=True)), set(),
                set(files["file"]))


def test_a_database_down_holds_back_taus_stamps_alone(empty_warehouse):
    """The warehouse's entries are stamped before TAUdb's trials are listed: PostgreSQL
    stopped (the listing raises, for the caller to count) does not hold them back."""
    _write(empty_warehouse, "energy_facts", {"a": 1})

    def database_down() -> list[str]:
        raise ConnectionError("PostgreSQL stopped")

    landed = [Landed("geopm", "/landing/geopm/a", "a", "ok", T0),
              Landed("tau", "/landing/tau/set1", "", "ok", T0)]
    stack = SimpleNamespace(tables=empty_warehouse, trial_keys=database_down)
    with pytest.raises(ConnectionError):
        poll(stack, landed, Looker())
    assert landed[0].in_facts_at is not None and landed[1].in_facts_at is None
