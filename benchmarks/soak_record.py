"""What the soak records (``benchmarks/soak.py``): when each landed entry reached the
warehouse, the stack's processes and stores over time, the sensors' ticks, and the checks of
``summary.json``.

- :func:`poll`: one look (:class:`Looker`) at the warehouse through the project's DuckDB
  views (``joulehouse.accounting.query``), reading only the data files that are new since
  the previous look, and at TAUdb; stamps each entry's
  ``in_facts_at`` (its entity's rows in ``energy_facts``; a PowerAPI flush once its
  stream's facts reach the flush's last report; a TAU profile set: its trial in TAUdb, TAU
  having no energy) and ``in_accounting_at`` (its entity in both ``carbon_per_fact`` and
  ``cost_per_fact`` with carbon and a cost, not NaN: which the accounting step writes
  with ``accounting_daily``; an intensity
  or tariff file: listed by the ``carbon_intensity`` or ``tariffs`` table).
- :class:`Sampler`: every few seconds, CPU seconds and resident memory of the daemon, the
  webserver and the code server (each with its descendants but the run workers), and of
  the run workers (:func:`run_workers`, with the steps' worker processes); CPU seconds of
  PostgreSQL (its server and backends: :func:`_server_cpu_s`), of the harness itself (its
  own process and the GPU lander's collector process: ``soak_landers.collector_cpu_s``)
  and of the whole host (busy, all CPUs), so that what the harness takes from the machine
  it measures is known; the run queue
  (runs by status, of those created since the sampling started), the instance database's
  size and the warehouse's.
- :func:`ticks`: every sensor tick from the instance database (start, duration, status).
- the summary's parts: :func:`freshness` (percentiles), :func:`exactly_once`,
  :func:`bad_entries` (failed alone and shown failed through GraphQL),
  :func:`memory_growth`, :func:`tick_figures` (ticks past their timeout), :func:`recovery`.
"""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

import numpy as np
import pandas as pd
import psutil
import psycopg2
import pyarrow.fs as pafs
from postgres_server import PostgresServer
from soak_landers import STREAM_POWER_W, STREAM_RAPL_J, Landed, collector_cpu_s, utc_now

from joulehouse.accounting.query import connect, connect_files
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.geopm.days import start_day
from joulehouse.geopm.layout import identify_report
from joulehouse.gpu.days import repetition_day_key
from joulehouse.landing import read_landed_item
from joulehouse.landing_days import item_day_key
from joulehouse.powerapi.days import start_day as powerapi_start_day
from joulehouse.powerapi.landing import report_entry_files
from joulehouse.taudb.days import profile_set_start_day
from joulehouse.taudb.landing import profile_set_files
from tests.dagster.webserver import statuses
from tests.e2e.stack import Stack

COLUMNS = ["source", "entry", "entity", "expected", "landed_at", "in_facts_at",
           "in_accounting_at"]
#: Sources whose entries become energy facts (and so accounting rows).
FACT_SOURCES = ("clustercockpit", "geopm", "gpu-benchmark", "powerapi")
#: The processes sampled, by the stack's names.
SERVICES = ("daemon", "webserver", "code-server")
GRPC_SERVER = "api grpc"
RUN_WORKER = "multiprocessing.spawn"
#: Each source's asset whose failed partitions the UI shows for a bad entry.
FAILED_ASSET = {"clustercockpit": "cc_block_tables", "geopm": "geopm_validated_frames",
                "gpu-benchmark": "gpu_validated_frames",
                "powerapi": "powerapi_validated_frames", "tau": "tau_profile_trials"}
#: The PowerAPI streams' mean power (W) by the stream's kind: JSON lines even, CSV odd.
STREAM_W = (STREAM_POWER_W, STREAM_RAPL_J)
#: Relative tolerance of an energy against its truth.
ENERGY_RTOL = 1e-6


def _iso(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat()


def write_landed(path: Path, landed: list[Landed]) -> None:
    """``landed.csv``: one row per landed entry (UTC ISO times, empty if never)."""
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS)
        for row in landed:
            writer.writerow([row.source, row.entry, row.entity, row.expected,
                             _iso(row.landed_at), _iso(row.in_facts_at),
                             _iso(row.in_accounting_at)])


@dataclass
class Seen:
    """What the looks at the stores found (:class:`Looker`)."""

    facts: dict[str, pd.Timestamp]  # entity -> reach (max window_end)
    accounted: dict[str, pd.Timestamp]  # the same, in carbon_per_fact and cost_per_fact
    trials: set[str]
    files: set[str]  # the intensity and tariff files the accounting tables list


def _pandas(connection, sql: str) -> pd.DataFrame:
    """``sql``'s result through Arrow, as ``joulehouse sql`` gives it: timestamps stay
    tz-aware UTC (DuckDB's own ``.df()`` gives them naive)."""
    return connection.sql(sql).to_arrow_table().to_pandas()


#: The tables a look reads: their folders are listed, not the whole warehouse (which
#: holds every entry's validated frames: a listing that grows with what is stored, every
#: poll, on the machine being measured).
LOOKED_AT = ("energy_facts", "carbon_per_fact", "cost_per_fact", "carbon_intensity",
             "tariffs")
#: Each looked-at table's query over its new files (the view of the table's name).
NEW_ROWS = {
    "energy_facts": "SELECT entity, max(window_end) AS reach FROM energy_facts GROUP BY entity",
    "carbon_per_fact": "SELECT entity, max(window_end) AS reach FROM carbon_per_fact "
                       "WHERE co2_g IS NOT NULL GROUP BY entity",
    "cost_per_fact": "SELECT DISTINCT entity FROM cost_per_fact WHERE cost IS NOT NULL",
    "carbon_intensity": "SELECT DISTINCT file FROM carbon_intensity",
    "tariffs": "SELECT DISTINCT file FROM tariffs",
}


def _file_key(info: pafs.FileInfo) -> tuple:
    """A data file as a look tells files apart: its path, size and modification time (a
    Delta data file is written once, under a name of its own; a plain table's file may
    be replaced under its name, and is then read again)."""
    return info.path, info.size, info.mtime


def _latest(reach_of: dict[str, pd.Timestamp], rows: pd.DataFrame) -> set[str]:
    """Each entity's reach in ``rows`` (entity, reach) kept in ``reach_of`` where it is
    later than the one there (or the first); the entities whose reach changed."""
    changed = set()
    for entity, reach in zip(rows["entity"], rows["reach"], strict=True):
        known = reach_of.get(entity)
        if known is None or reach > known:
            reach_of[entity] = reach
            changed.add(entity)
    return changed


@dataclass
class Looker:
    """The soak's looks at the warehouse's fact and accounting tables (and at TAUdb's
    trials), each reading only the data files that no earlier look read.

    A look lists each table of :data:`LOOKED_AT` (its current version's files, a Delta
    table's from its log, a plain table's from its folder, as ``connect`` lists them;
    none: not stored yet) and reads those it did not list at the previous look
    (:func:`_file_key`) with the query of :data:`NEW_ROWS`, through the warehouse's own
    file system (``connect_files``: on a path or an object store). What it found is
    added to :attr:`seen`: an entity's reach (UTC) is the latest ``window_end`` over every
    file read so far, the sets are unions. That is the whole read's answer as long as
    rows are only ever rewritten into new files (a compaction, an entry replaced), which
    is how the tables are written: a file no longer listed had its rows moved into one
    that is, or removed; a removed entity stays found, which is what the soak asks (when
    an entry was first seen there). An error (a store down, a file vacuumed between the
    listing and the read) leaves the tables not read yet to the next look.
    """

    #: What the looks found; :meth:`look` returns it, updated in place by the next look.
    seen: Seen = field(default_factory=lambda: Seen({}, {}, set(), set()))
    #: Per table, the files (:func:`_file_key`) it listed at its last read.
    listed: dict[str, set[tuple]] = field(default_factory=dict)
    #: Entities with carbon (their reach) and with a cost, in the accounting tables.
    carbon: dict[str, pd.Timestamp] = field(default_factory=dict)
    costed: set[str] = field(default_factory=set)

    def look(self, stack: Stack) -> Seen:
        """:attr:`seen` once the tables' new files are read (TAUdb's trials: :func:`poll`)."""
        warehouse = stack.tables
        files = {table: warehouse.files(table) for table in LOOKED_AT}
        new = {table: [info for info in listed
                       if _file_key(info) not in self.listed.get(table, set())]
               for table, listed in files.items()}
        with connect_files(warehouse, {t: infos for t, infos in new.items() if infos}
                           ) as connection:
            for table, infos in new.items():
                if infos:
                    self._add(table, _pandas(connection, NEW_ROWS[table]))
                self.listed[table] = {_file_key(info) for info in files[table]}
        return self.seen

    def _add(self, table: str, rows: pd.DataFrame) -> None:
        """``table``'s new ``rows`` (of its :data:`NEW_ROWS` query) added to what was found."""
        if table == "energy_facts":
            _latest(self.seen.facts, rows)
        elif table == "carbon_per_fact":
            self._account(_latest(self.carbon, rows))
        elif table == "cost_per_fact":
            costed = set(rows["entity"]) - self.costed
            self.costed |= costed
            self._account(costed)
        else:
            self.seen.files |= set(rows["file"])

    def _account(self, entities: set[str]) -> None:
        """``entities`` (their carbon or cost new) in ``seen.accounted`` with their carbon's
        reach where they have both."""
        self.seen.accounted.update({entity: self.carbon[entity] for entity in entities
                                    if entity in self.carbon and entity in self.costed})


def _reached(reach_of: dict[str, pd.Timestamp], row: Landed) -> bool:
    """Whether ``row``'s entity is in ``reach_of``, reaching its ``reaches`` if it has one.
    A look up, not a scan: every poll (every 5 s) looks up every entry not yet seen, the
    bad ones for ever, and a scan of the stored entities per entry (5 ms at 130,000) took
    seconds of CPU per poll from the machine being measured."""
    reach = reach_of.get(row.entity)
    if reach is None:
        return False
    return row.reaches is None or reach >= row.reaches


def stamp(landed: list[Landed], seen: Seen, now: datetime) -> None:
    """Stamp ``now`` on each entry newly seen in facts (or TAUdb) and in accounting."""
    for row in landed:
        if row.in_facts_at is None:
            if row.source == "tau":
                if row.entry in seen.trials:
                    row.in_facts_at = now
            elif row.entity and _reached(seen.facts, row):
                row.in_facts_at = now
        if row.in_accounting_at is None:
            if row.source in ("intensity", "tariffs"):
                if Path(row.entry).name in seen.files:  # the tables name files by base name
                    row.in_accounting_at = now
            elif row.entity and _reached(seen.accounted, row):
                row.in_accounting_at = now


def poll(stack: Stack, landed: list[Landed], looker: Looker) -> None:
    """One look at the warehouse, stamped, then at TAUdb's trials (PostgreSQL), stamped: a
    database down holds back TAU's stamps alone (errors of a store that is down are the
    caller's to count)."""
    seen = looker.look(stack)
    stamp(list(landed), seen, utc_now())
    seen.trials = set(stack.trial_keys())
    stamp(list(landed), seen, utc_now())


#: Sources with no energy of their own: an update's ``in_accounting_at`` says when the
#: ``carbon_intensity`` or ``tariffs`` table (read by the sensor
#: ``intensity_and_tariff_landing`` when a file lands) listed it; the drain does not wait
#: for it.
READ_ON_SCHEDULE = ("intensity", "tariffs")


def settled(landed: list[Landed]) -> bool:
    """Whether every good entry that should reach accounting (or TAUdb) has, but those of
    READ_ON_SCHEDULE."""
    return all((row.in_facts_at if row.source == "tau" else row.in_accounting_at)
               is not None for row in landed
               if row.expected == "ok" and row.source not in READ_ON_SCHEDULE)


#: Seconds between two measures of the warehouse's size (a recursive listing of it).
SIZE_EVERY_S = 60.0


@dataclass
class CpuSeen:
    """Cumulative CPU seconds per group of processes, whatever ends or restarts: each
    process (pid and start time) keeps the CPU it was last seen with, so one that ended
    since (a backend, a killed service) still counts, and one started again counts from
    its start. What a process used after its last sample is not seen."""

    seen: dict[str, dict[psutil.Process, float]] = field(default_factory=dict)

    def add(self, group: str, cpu: dict[psutil.Process, float | None]) -> float:
        """The group's sum once ``cpu`` (its processes now, with their CPU seconds, None for
        one gone meanwhile) is recorded."""
        last = self.seen.setdefault(group, {})
        for process, seconds in cpu.items():
            if seconds is not None:  # psutil tells processes apart by pid and start time
                last[process] = seconds
        return round(sum(last.values()), 2)


@dataclass
class Sampler:
    """Samples the processes and stores every ``every_s`` (the warehouse's size at most once
    every SIZE_EVERY_S) in a thread (see the module);
    ``rows`` are ``timeseries.csv``'s."""

    stack: Stack
    every_s: float
    started: float = field(default_factory=time.monotonic)
    rows: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _size_due: float = 0.0
    _size_mb: float | None = None
    #: The runs before the sampling started (a kept history's): not counted.
    _runs_before: int = 0
    _cpu: CpuSeen = field(default_factory=CpuSeen)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        [(self._runs_before,)] = self.stack.sql("SELECT coalesce(max(id), 0) FROM runs")
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.rows.append(self.sample())
            except Exception as error:  # noqa: BLE001 - a store down in a fault: counted
                self.errors.append(f"{time.monotonic() - self.started:.0f} s: {error!r}")

    def sample(self) -> dict:
        row: dict = {"t_s": round(time.monotonic() - self.started, 1)}
        roots = run_workers(self.stack)
        workers = [tree for root in roots for tree in _tree(root)]
        worker_pids = {p.pid for p in workers}
        for name in SERVICES:
            try:  # a service killed by a fault: its columns stay empty, the row is kept
                service = psutil.Process(self.stack.processes[name].pid)
            except psutil.NoSuchProcess:
                continue
            tree = [p for p in _tree(service) if p.pid not in worker_pids]
            rss = _usage(tree)[0]
            if rss:  # gone between the two looks: empty, as above
                row[f"{name}_rss_mb"] = rss
                row[f"{name}_cpu_s"] = self._cpu.add(name, {p: _cpu_s(p) for p in tree})
        row["run_workers"] = len(roots)
        row["run_workers_rss_mb"], row["run_workers_cpu_s"] = _usage(workers)
        postmaster = _postmaster(self.stack)
        if postmaster is not None:  # stopped by a fault: the sum so far kept
            row["postgres_cpu_s"] = self._cpu.add("postgres", {postmaster: _server_cpu_s(
                postmaster)})
        row["harness_cpu_s"] = round(_cpu_s(psutil.Process()) + collector_cpu_s(), 2)
        host = psutil.cpu_times()
        row["host_busy_cpu_s"] = round(host.user + host.nice + host.system + host.irq
                                       + host.softirq, 2)
        queue = dict(self.stack.sql("SELECT status, count(*) FROM runs WHERE id > "
                                    f"{self._runs_before} GROUP BY status"))
        for status in ("QUEUED", "STARTING", "STARTED", "SUCCESS", "FAILURE", "CANCELED"):
            row[f"runs_{status.lower()}"] = queue.get(status, 0)
        [(size,)] = self.stack.sql(f"SELECT pg_database_size('{self.stack.dagster_db}')")
        row["instance_db_mb"] = round(size / 2**20, 1)
        if time.monotonic() >= self._size_due:  # a listing of everything: once a minute
            self._size_mb = round(_warehouse_bytes(self.stack) / 2**20, 1)
            self._size_due = time.monotonic() + SIZE_EVERY_S
        row["warehouse_mb"] = self._size_mb
        return row

    def write(self, path: Path) -> None:
        pd.DataFrame(self.rows).to_csv(path, index=False)


def _tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its descendants (none if it is gone)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _cpu_s(process: psutil.Process) -> float | None:
    """Its CPU seconds, user + system (None once it is gone)."""
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def _server_cpu_s(postmaster: psutil.Process) -> float | None:
    """PostgreSQL's CPU seconds: the server's own, its ended backends' (which it waited
    for: a connection's backend that ends between two samples is seen only there) and its
    live ones'."""
    try:
        times = postmaster.cpu_times()
        live = [_cpu_s(child) for child in postmaster.children()]
    except psutil.Error:
        return None
    return (times.user + times.system + times.children_user + times.children_system
            + sum(seconds for seconds in live if seconds is not None))


def _postmaster(stack: Stack) -> psutil.Process | None:
    """The stack's PostgreSQL server, whose children are its connections' backends; None
    while it is stopped."""
    try:
        return psutil.Process(int((stack.postgres.datadir / "postmaster.pid").read_text()
                                  .split()[0]))
    except (OSError, IndexError, ValueError, psutil.Error):
        return None


def cmdline(process: psutil.Process) -> str:
    """Its command line, or "" once it is gone."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def run_workers(stack: Stack) -> list[psutil.Process]:
    """The run workers: the processes the code server's gRPC server (``dagster api grpc``)
    starts per run (DefaultRunLauncher: ``multiprocessing`` spawned children), which run the
    steps themselves (``definitions.RUN_EXECUTOR``), ended ones not yet waited for included;
    the steps' worker processes are their descendants."""
    servers = [p for p in _tree(psutil.Process(stack.processes["code-server"].pid))
               if GRPC_SERVER in cmdline(p)]
    return [child for server in servers for child in server.children()
            if RUN_WORKER in cmdline(child) or _ended(child)]


def _ended(process: psutil.Process) -> bool:
    """A zombie: a run worker that ended and that the gRPC server has not waited for yet
    (its command line reads empty, its CPU is still there). Counted as one: else its whole
    CPU went to the code server's group, and kept there (seen after PostgreSQL's restart,
    when the server waits for its workers late: benchmarks/README.md)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _usage(processes: list[psutil.Process]) -> tuple[float, float]:
    """Resident memory (MiB) and CPU seconds (user + system) of ``processes`` together."""
    rss = cpu = 0.0
    for process in processes:
        try:
            rss += process.memory_info().rss
        except psutil.Error:
            continue
        cpu += _cpu_s(process) or 0.0
    return round(rss / 2**20, 1), round(cpu, 2)


def warehouse_root(tables) -> str:
    """The warehouse's root in its filesystem (a path, or ``bucket/prefix``)."""
    return tables.url if tables.is_local else urlsplit(tables.url)._replace(scheme="").geturl()[2:]


def _warehouse_bytes(stack: Stack) -> int:
    tables = stack.tables
    selector = pafs.FileSelector(warehouse_root(tables), recursive=True, allow_not_found=True)
    return sum(info.size or 0 for info in tables.filesystem.get_file_info(selector))


def runs(stack: Stack) -> pd.DataFrame:
    """Every run of the instance: id, job, status, and when it was created, launched (the
    queue's dequeue: its first ``PIPELINE_STARTING`` event), started and ended (UTC; empty
    where it did not)."""
    rows = stack.sql(
        "SELECT r.run_id, r.pipeline_name, r.status, r.create_timestamp AT TIME ZONE "
        "current_setting('TimeZone'), l.launched, r.start_time, r.end_time FROM runs r "
        "LEFT JOIN (SELECT run_id, min(timestamp) AS launched FROM event_logs WHERE "
        "dagster_event_type = 'PIPELINE_STARTING' GROUP BY run_id) l USING (run_id) "
        "ORDER BY r.id")
    return pd.DataFrame([{"run_id": run_id, "job": job, "status": status,
                          "created": created.astimezone(UTC),
                          "launched": None if launched is None else launched.replace(tzinfo=UTC),
                          "started": _from_epoch(start), "ended": _from_epoch(end)}
                         for run_id, job, status, created, launched, start, end in rows],
                        columns=["run_id", "job", "status", "created", "launched", "started",
                                 "ended"])


def _from_epoch(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def ticks(stack: Stack) -> pd.DataFrame:
    """Every sensor tick stored: sensor, start (UTC), duration (s), status, error."""
    rows = []
    for (body,) in stack.sql("SELECT tick_body FROM job_ticks"):
        tick = json.loads(body)
        end = tick.get("end_timestamp")
        rows.append({"sensor": tick.get("instigator_name") or tick.get("job_name"),
                     "start": datetime.fromtimestamp(tick["timestamp"], UTC),
                     "duration_s": None if end is None else end - tick["timestamp"],
                     "status": _enum(tick["status"]),
                     "error": (tick.get("error") or {}).get("message", "")})
    return pd.DataFrame(rows, columns=["sensor", "start", "duration_s", "status", "error"])


def _enum(value) -> str:
    """A serialized enum's member name (``{"__enum__": "TickStatus.SKIPPED"}`` -> SKIPPED)."""
    return (value.get("__enum__", "") if isinstance(value, dict) else str(value)).split(".")[-1]


def tick_figures(frame: pd.DataFrame, interval_s: float, timeout_s: float) -> dict:
    """Per sensor: ticks, duration p50/max (s), lag (s: the gap between ticks beyond the
    interval, p50/max), and ticks past ``timeout_s`` (or failed on a deadline)."""
    figures = {}
    for sensor, rows in frame.sort_values("start").groupby("sensor"):
        gaps = rows["start"].diff().dt.total_seconds().dropna() - interval_s
        durations = rows["duration_s"].dropna()
        late = (durations > timeout_s).sum() + rows["error"].str.contains(
            "DEADLINE_EXCEEDED|timed out", case=False).sum()
        figures[sensor] = {
            "ticks": len(rows), "duration_p50_s": _round(durations.median()),
            "duration_max_s": _round(durations.max()),
            "lag_p50_s": _round(gaps.clip(lower=0).median()),
            "lag_max_s": _round(gaps.clip(lower=0).max()),
            "failed": int((rows["status"] == "FAILURE").sum()), "past_timeout": int(late)}
    return figures


def run_figures(frame: pd.DataFrame) -> dict:
    """Per job (``runs`` rows): runs, and the time from a run's request to its start (the
    queue, the launch, the run worker's start: ``start_wait``), from its launch to its start
    (the run worker's start alone, what run monitoring's ``start_timeout_seconds`` bounds:
    ``launch_to_start``) and from its start to its end (``in_run``), p50/p95/p99/max (s), of
    the runs that started (ended)."""
    figures = {}
    for job, rows in frame.groupby("job"):
        started = rows.dropna(subset=["started"])
        launched = started.dropna(subset=["launched"])
        ended = started.dropna(subset=["ended"])
        figures[job] = {
            "runs": len(rows),
            "start_wait": percentiles(
                (started["started"] - started["created"]).dt.total_seconds().tolist()),
            "launch_to_start": percentiles(
                (launched["started"] - launched["launched"]).dt.total_seconds().tolist()),
            "in_run": percentiles(
                (ended["ended"] - ended["started"]).dt.total_seconds().tolist())}
    return figures


def _round(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else round(float(value), 2)


def percentiles(delays: list[float]) -> dict:
    """p50/p95/p99/max (s) of ``delays``, and how many."""
    if not delays:
        return {"n": 0}
    values = np.array(delays)
    return {"n": len(values), **{f"p{q}_s": round(float(np.percentile(values, q)), 1)
                                 for q in (50, 95, 99)}, "max_s": round(float(values.max()), 1)}


def freshness(landed: list[Landed]) -> dict:
    """Landing -> facts and landing -> accounting, per source and over the fact sources;
    ``never``: good entries not seen there by the end."""
    figures = {}
    for source in sorted({row.source for row in landed}):
        good = [row for row in landed if row.source == source and row.expected == "ok"]
        figures[source] = {
            "to_facts": percentiles([(r.in_facts_at - r.landed_at).total_seconds()
                                     for r in good if r.in_facts_at]),
            "to_accounting": percentiles([(r.in_accounting_at - r.landed_at).total_seconds()
                                          for r in good if r.in_accounting_at]),
            "never_in_facts": sum(r.in_facts_at is None for r in good if r.entity
                                  or source == "tau"),
            "never_in_accounting": sum(r.in_accounting_at is None for r in good
                                       if source != "tau")}
    facts = [r for r in landed if r.source in FACT_SOURCES and r.expected == "ok"]
    figures["all_fact_sources"] = {
        "to_facts": percentiles([(r.in_facts_at - r.landed_at).total_seconds()
                                 for r in facts if r.in_facts_at]),
        "to_accounting": percentiles([(r.in_accounting_at - r.landed_at).total_seconds()
                                      for r in facts if r.in_accounting_at])}
    return figures


def exactly_once(stack: Stack, landed: list[Landed]) -> dict:
    """Every good entry's energy in ``energy_facts`` exactly once: its entity's rows have
    no two of one (component, method, window); a ClusterCockpit job's integrated energy
    is its exact energy; a PowerAPI stream's energy over its facts' time is its constant
    power (a report counted twice would raise it)."""
    with connect(stack.tables, ["energy_facts"]) as connection:
        facts = _pandas(connection, "SELECT * FROM energy_facts")
    keys = ["entity", "component", "method", "window_start", "window_end"]
    duplicated = facts[facts.duplicated(keys, keep=False)]
    by_entity = facts.groupby("entity")
    problems = []
    good = [r for r in landed if r.expected == "ok" and r.source in FACT_SOURCES]
    for row in good:
        if row.in_facts_at is None:
            continue  # counted as never in facts
        rows = by_entity.get_group(row.entity) if row.entity in by_entity.groups else None
        if rows is None:
            problems.append(f"{row.entry}: seen in facts, now gone")
        elif row.source == "clustercockpit":
            power = rows[rows["method"] == "power"]
            if len(power) != 1 or not math.isclose(power["energy_j"].iloc[0], row.truth_j,
                                                   rel_tol=ENERGY_RTOL):
                problems.append(f"{row.entry}: power rows {power['energy_j'].tolist()} != "
                                f"[{row.truth_j}]")
    for stream, rows in facts[facts["source"] == "powerapi"].groupby("entity"):
        if not stream.startswith("soak") or stream.startswith("soakbad"):
            continue
        expected = STREAM_W[int(stream[4:].split("/")[0]) % 2]
        for method, part in rows.groupby("method"):
            mean = part["energy_j"].sum() / part["duration_s"].sum()
            if not math.isclose(mean, expected, rel_tol=1e-3):
                problems.append(f"powerapi {stream} {method}: {mean:.4f} W != {expected} W")
    return {"good_entries": len(good), "duplicated_fact_rows": len(duplicated),
            "problems": problems[:50], "problem_count": len(problems),
            "ok": not problems and duplicated.empty}


def bad_partition(row: Landed) -> str:
    """The partition key a bad entry fails (as the UI names it); a GPU repetition's is its
    data root's day, a GEOPM report's, a TAU profile set's and a PowerAPI entry's its landing
    day, read from the entry as its sensor reads it (the soak's GEOPM and PowerAPI sources
    keep the default timezone, UTC, and no epoch zone; a bad set, cut before its
    Starting Timestamp: the UTC day its profile was cut)."""
    path = Path(row.entry)
    key = f"{path.parent.name}/{path.name}"
    if row.source == "clustercockpit":  # the job-id block of its folder
        return JobRef.from_path(path.parents[3], path).block
    if row.source == "gpu-benchmark":  # its data root's day (the soak's root: zone UTC)
        return repetition_day_key(row.entity.split("/", 1)[0], path, "UTC")
    if row.source in ("geopm", "tau", "powerapi"):
        identify, start = {"geopm": (identify_report, start_day("UTC")),
                           "tau": (profile_set_files, profile_set_start_day),
                           "powerapi": (report_entry_files, powerapi_start_day("UTC", None)),
                           }[row.source]
        item = read_landed_item(path, key, identify)
        return key if item is None else item_day_key(item, start)  # None: gone, or not one
    return key


def bad_entries(stack: Stack, landed: list[Landed]) -> dict:
    """Every bad entry failed alone: none of its energy in the facts, its partition failed
    as GraphQL shows it (the UI's partition statuses)."""
    bad = [r for r in landed if r.expected == "bad"]
    with connect(stack.tables, ["energy_facts"]) as connection:
        entities = set(_pandas(connection, "SELECT DISTINCT entity FROM energy_facts")["entity"])
    failed = {}
    for source, asset in FAILED_ASSET.items():
        if any(r.source == source for r in bad):
            shown = statuses(stack.port, asset)["assetPartitionStatuses"]
            failed[source] = set(shown["failedPartitions"])
    problems = []
    for row in bad:
        if row.entity and row.entity in entities:
            problems.append(f"{row.entry}: its energy is in energy_facts")
        partition = bad_partition(row)
        if partition not in failed.get(row.source, set()):
            problems.append(f"{row.entry}: partition {partition} not shown failed")
    return {"bad_entries": len(bad), "problems": problems, "ok": not problems}


#: The samples a memory figure is the median of (s): a sensor tick lifts the code server's
#: resident memory by up to 200 MiB for a few seconds, which one sample may catch.
GROWTH_WINDOW_S = 30.0


def memory_growth(rows: list[dict], minutes: float) -> dict:
    """Resident memory of each service at a sixth of the run (minute 10 of an hour) and at
    the end, each the median of the samples of :data:`GROWTH_WINDOW_S` from there (to the
    end), and the growth in percent."""
    if not rows:
        return {}
    frame = pd.DataFrame(rows)
    mark, end = 60 * minutes / 6, float(frame["t_s"].iloc[-1])
    early = frame[(frame["t_s"] >= mark) & (frame["t_s"] < mark + GROWTH_WINDOW_S)]
    late = frame[frame["t_s"] > end - GROWTH_WINDOW_S]
    growth = {"from_s": float(early["t_s"].iloc[0]) if len(early) else None,
              "to_s": end, "window_s": GROWTH_WINDOW_S}
    for name in SERVICES:
        column = f"{name}_rss_mb"
        if len(early) and column in frame:
            before = float(pd.to_numeric(early[column]).median())
            after = float(pd.to_numeric(late[column]).median())
            growth[name] = {"rss_mb_from": before, "rss_mb_to": after,
                            "growth_pct": round(100 * (after - before) / before, 1)
                            if before else None}
    return growth


#: The cumulative CPU columns of timeseries.csv that :func:`cpu_seconds` adds up.
CPU_PARTS = (*SERVICES, "postgres", "harness")


def _cumulated(values: pd.Series) -> float:
    """What a cumulative counter (:class:`CpuSeen`'s sums, which never fall) added over
    ``values`` (samples in order; empty ones, a service down, dropped)."""
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.iloc[-1] - values.iloc[0]) if len(values) else 0.0


def cpu_seconds(rows: list[dict]) -> dict:
    """The CPU seconds of each service, PostgreSQL and the harness over the sampling, the
    host's busy seconds (all CPUs), and each one's share of those; the rest (the run
    workers, which the samples see only while they live, and anything else on the host) is
    the host's busy time less the parts."""
    frame = pd.DataFrame(rows)
    if "host_busy_cpu_s" not in frame or len(frame) < 2:
        return {}
    host = _cumulated(frame["host_busy_cpu_s"])
    parts = {name: round(_cumulated(frame[f"{name}_cpu_s"]), 1) for name in CPU_PARTS
             if f"{name}_cpu_s" in frame}
    parts["rest"] = round(host - sum(parts.values()), 1)
    return {"window_s": float(frame["t_s"].iloc[-1] - frame["t_s"].iloc[0]),
            "host_busy_s": round(host, 1), "seconds": parts,
            "share_of_busy": {name: round(value / host, 3) if host else None
                              for name, value in parts.items()}}


def recovery(faults: list[dict], landed: list[Landed]) -> list[dict]:
    """Each fault's recovery: when every good entry landed before it was in facts again and
    the first one landed after it had reached the facts; seconds from the fault, or None."""
    good = [r for r in landed if r.expected == "ok" and r.source in FACT_SOURCES]
    out = []
    for fault in faults:
        at, ended = fault["at"], fault.get("ended") or fault["at"]
        before = [r.in_facts_at for r in good if r.landed_at < at]
        after = sorted(r.in_facts_at for r in good if r.landed_at >= ended and r.in_facts_at)
        recovered = None
        if after and all(before):
            recovered = max([*before, after[0]]) if before else after[0]
        out.append({**{k: _iso(v) if isinstance(v, datetime) else v
                       for k, v in fault.items()},
                    "recovery_s": None if recovered is None
                    else round((recovered - at).total_seconds(), 1)})
    return out


def history_counts(stack: Stack) -> dict[str, dict[str, int]]:
    """Per fact source, the entities in ``energy_facts`` and those of them accounted (in
    ``carbon_per_fact`` and ``cost_per_fact`` with carbon and a cost): before the landing
    starts, a seeded history's progress."""
    with connect(stack.tables, LOOKED_AT) as connection:
        facts = _pandas(connection, "SELECT source, count(DISTINCT entity) AS n "
                                    "FROM energy_facts GROUP BY source")
        accounted = _pandas(connection, """
            SELECT source, count(*) AS n FROM
              (SELECT DISTINCT source, entity FROM carbon_per_fact WHERE co2_g IS NOT NULL)
              JOIN (SELECT DISTINCT source, entity FROM cost_per_fact WHERE cost IS NOT NULL)
              USING (source, entity)
            GROUP BY source""")
    done = dict(zip(accounted["source"], accounted["n"], strict=True))
    return {source: {"in_facts": int(n), "accounted": int(done.get(source, 0))}
            for source, n in zip(facts["source"], facts["n"], strict=True)}


#: The statements ``--pg-statements`` keeps in ``pg_statements.csv``, the costliest first.
STATEMENTS_KEPT = 60


def with_statements(restore: Callable[[PostgresServer], None]
                    ) -> Callable[[PostgresServer], None]:
    """``restore``, then PostgreSQL restarted with ``pg_stat_statements`` loaded (every
    client statement of every database counted), before the stack starts."""
    def restore_and_count(postgres: PostgresServer) -> None:
        restore(postgres)
        connection = psycopg2.connect(postgres.url("postgres"))
        connection.autocommit = True
        try:  # ALTER SYSTEM refuses a transaction: psycopg2's `with connection` opens one
            with connection.cursor() as cursor:
                cursor.execute("ALTER SYSTEM SET shared_preload_libraries = "
                               "'pg_stat_statements'")
        finally:
            connection.close()
        postgres.stop("fast")
        postgres.start()
        connection = psycopg2.connect(postgres.url("postgres"))
        connection.autocommit = True
        try:  # its view, in the postgres database, counts every database's statements
            with connection.cursor() as cursor:
                cursor.execute("CREATE EXTENSION pg_stat_statements")
        finally:
            connection.close()
    return restore_and_count


def statements(stack: Stack, path: Path) -> dict:
    """PostgreSQL's statements since the stack started: the :data:`STATEMENTS_KEPT`
    costliest written to ``path`` (calls, total execution ms, rows, the normalised text),
    and the totals over all of them (calls, execution seconds)."""
    rows = stack.sql("SELECT calls, total_exec_time, rows, regexp_replace(query, '\\s+', ' ', "
                     "'g') FROM pg_stat_statements ORDER BY total_exec_time DESC",
                     database="postgres")
    pd.DataFrame(rows[:STATEMENTS_KEPT], columns=["calls", "exec_ms", "rows", "query"]).round(
        {"exec_ms": 1}).to_csv(path, index=False)
    return {"statements": len(rows), "calls": int(sum(row[0] for row in rows)),
            "exec_s": round(sum(row[1] for row in rows) / 1e3, 1)}
