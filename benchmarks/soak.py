"""The soak (issue 27): the production stack with every source landing at once, faults
injected, freshness measured, nothing lost.

Starts the stack exactly as the end-to-end test does (``tests/e2e/stack.py``: a throwaway
PostgreSQL, the code server, ``dagster-daemon``, ``dagster-webserver``,
``deploy/production/dagster.yaml``) over empty data folders, the warehouse in
``DIR/warehouse`` (or, with ``--object-store``, in a bucket of the throwaway S3-compatible
server, copied to ``DIR/warehouse`` at the end), and turns every sensor on (the automation
included) through GraphQL as the UI does. Then, for ``--minutes``, each source's lander
(``benchmarks/soak_landers.py``) writes at its rate in a thread of its own, a few entries
bad on purpose; a poller stamps when each entry reached ``energy_facts`` and the accounting
tables, a sampler records the processes and stores (``benchmarks/soak_record.py``), and
the faults asked for are injected at their second. After the landing stops it waits (at
most ``--drain-minutes``) until every good entry has reached the accounting, then checks and
writes into ``--out DIR``:

- ``landed.csv``: one row per landed entry (``source, entry, entity, expected, landed_at,
  in_facts_at, in_accounting_at``; for ``tau``, whose profile sets carry no energy,
  ``in_facts_at`` is when its TAUdb trial appeared);
- ``timeseries.csv``: CPU seconds and resident memory of the daemon, webserver, code
  server and run workers, the runs by status, the instance database's and warehouse's
  sizes, every ``--sample-s``; ``ticks.csv``: every sensor tick; ``runs.csv``: every run
  (job, status, created, started, ended);
- ``summary.json``: freshness p50/p95/p99 (landing -> facts, -> accounting) per source,
  exactly once, bad entries failed alone and shown failed through GraphQL, memory growth
  from a sixth of the run (minute 10 of an hour) to the end (medians of 30 s), ticks past their timeout,
  each fault's recovery, the issue's targets met or not;
- ``freshness.png``, ``memory.png``: freshness and resident memory over the run
  (``benchmarks/soak_plots.py``);
- ``warehouse/``: ``joulehouse sql --warehouse DIR/warehouse`` queries it; ``stack/logs/``.
- ``pg_statements.csv`` (with ``--pg-statements``): PostgreSQL's costliest statements of the
  run (``pg_stat_statements``), their totals in ``summary.json``'s ``pg_statements``.

Rates: ``--rates centre10x`` (the issue's: ClusterCockpit 3 jobs/s, GEOPM 0.5 reports/s,
a GPU repetition every 10 s, 4 PowerAPI streams of a report a second, a TAU profile set a
minute) or ``short`` (the CI test's: 0.2 jobs/s, a report every 30 s, a repetition and a
profile set every 60 s, 2 streams), each overridable.

A seeded history (``--seed-cc``, ``--seed-geopm``, ``--seed-gpu``: the issue's 100,000 jobs,
10,000 reports and 10,000 repetitions), spread over the ``--seed-days`` days before today
(``soak_landers.History``), is brought in once by the stack itself and kept
(``benchmarks/soak_history.py``), over as many runs as it takes: a run stops bringing it
in after ``--seed-minutes``, keeps its progress and exits (status 3), and the same
command continues it. Each run over a complete one restores it before its stack starts, checks
that all of it is there and that no sensor hands any of it out again, then lands on top
(``summary.json``'s ``history``: what was kept, by which commit, how long it took). Needs
root.

Faults (``--fault NAME@SECONDS``,
repeatable; seconds after the landing starts): ``daemon-kill`` (``kill -9`` of the daemon's
process group, started again ``--restart-after-s`` later as systemd's ``Restart=on-failure``
/ ``RestartSec=5`` of deploy/systemd does), ``worker-kill`` (``kill -9`` of a run worker
while it runs a step), ``postgres-stop`` (stopped for ``--outage-s``, then started),
``webserver-restart``, ``landing-unmounted`` (GEOPM's landing folder covered by an empty
file system for ``--outage-s``, as when a shared file system's mount drops on the
daemon's host, while the reports go on landing in the folder underneath) and
``warehouse-full`` (the warehouse, then on a file system of its own holding what it held
and ``--warehouse-mb`` more, filled to the last byte for ``--outage-s``, then the space
freed). Both mount file systems: they need root.

Run: ``.venv/bin/python benchmarks/soak.py --minutes 3 --out /tmp/soak`` (short), or
``--minutes 60 --rates centre10x --out DIR [--fault daemon-kill@900 ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import itertools
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests"))
sys.path.insert(0, str(PROJECT / "benchmarks"))

import pandas as pd
import psutil
import pyarrow.fs as pafs
import soak_history
import soak_plots
import soak_record as record
from machine import describe, load_average
from postgres_server import PostgresServer
from soak_landers import (
    AccountingLander,
    ClusterCockpitLander,
    GeopmLander,
    GpuLander,
    History,
    Landed,
    Lander,
    PowerapiLander,
    TauLander,
    utc_now,
)

from assets.follow_cadence import DEFAULT_EVERY_MIN, FOLLOWERS_EVERY_ENV
from tests.e2e import api
from tests.e2e.stack import DataFolders, Stack, running_stack, wait_for

#: Each preset's rates: per second for entries, seconds between flushes or sets.
RATES = {
    "centre10x": {"cc_per_s": 3.0, "geopm_per_s": 0.5, "gpu_every_s": 10.0,
                  "powerapi_streams": 4, "tau_every_s": 60.0},
    "short": {"cc_per_s": 0.2, "geopm_per_s": 1 / 30, "gpu_every_s": 60.0,
              "powerapi_streams": 2, "tau_every_s": 60.0},
}
#: The issue's targets (s) from landing to accounting_daily, and of memory growth (%).
P95_TARGET_S, P99_TARGET_S, RSS_GROWTH_TARGET_PCT = 120.0, 300.0, 10.0
#: The daemon's sensor evaluation timeout the deployment sets (deploy/systemd/joulehouse.env).
TICK_TIMEOUT_S = 180
LOAD_TIMEOUT_S = 600.0
#: A bound: how long ``worker-kill`` waits for a run worker in a step.
WORKER_WAIT_S = 300.0
#: How often a seeded history's progress is polled while it is brought in: each poll reads
#: ``energy_facts`` and the per-fact accounting whole (DuckDB), which at every 5 s took half
#: a CPU from the bring-in at 100,000 jobs.
HISTORY_POLL_S = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="landing time")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    parser.add_argument("--rates", choices=sorted(RATES), default=None,
                        help="preset (default: short under 10 minutes, else centre10x)")
    for name in RATES["short"]:
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=None)
    parser.add_argument("--powerapi-flush-s", type=float, default=10.0,
                        help="seconds between two appends of the PowerAPI streams")
    parser.add_argument("--accounting-every-s", type=float, default=600.0,
                        help="seconds between intensity and tariff updates")
    parser.add_argument("--bad-fraction", type=float, default=0.03)
    parser.add_argument("--quiet-s", type=int, default=10, help="JOULEHOUSE_QUIET_PERIOD_S")
    parser.add_argument("--interval-s", type=int, default=10,
                        help="JOULEHOUSE_SENSOR_INTERVAL_S")
    parser.add_argument("--grown-bytes", type=int, default=16384,
                        help="JOULEHOUSE_POWERAPI_GROWN_BYTES: a stream handed out per so "
                             "many bytes")
    parser.add_argument("--grown-wait-s", type=float, default=30.0,
                        help="JOULEHOUSE_POWERAPI_GROWN_WAIT_S: a stream handed out at the "
                             "latest so many seconds after a tick first saw it grown")
    parser.add_argument("--plot-every-s", type=float, default=600.0,
                        help="JOULEHOUSE_PLOT_EVERY_S: a plot drawn at most so often, as "
                             "every deployment here does")
    parser.add_argument("--ready-when-complete", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="JOULEHOUSE_CC_READY_WHEN_COMPLETE and "
                             "JOULEHOUSE_GPU_READY_WHEN_COMPLETE: a complete job or repetition "
                             "handed out at the next tick, quiet or not (the landers write as "
                             "cc-backend and joulehouse collect do)")
    parser.add_argument("--seed-cc", type=int, default=0,
                        help="ClusterCockpit jobs of the seeded history")
    parser.add_argument("--seed-geopm", type=int, default=0,
                        help="GEOPM reports of the seeded history")
    parser.add_argument("--seed-gpu", type=int, default=0,
                        help="GPU repetitions of the seeded history")
    parser.add_argument("--seed-days", type=int, default=365,
                        help="the days before today the seeded history spreads over")
    parser.add_argument("--seed-minutes", type=float, default=180.0,
                        help="how long a run brings the seeded history in before it keeps "
                             "its progress and stops (the same command continues it); over "
                             "a complete one, the longest wait for it to be accounted")
    parser.add_argument("--object-store", action="store_true",
                        help="the warehouse in the throwaway S3-compatible store")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME@SECONDS")
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--warehouse-mb", type=int, default=2048,
                        help="size of the warehouse's own file system (warehouse-full)")
    parser.add_argument("--restart-after-s", type=float, default=5.0)
    parser.add_argument("--drain-minutes", type=float, default=None,
                        help="longest wait for the landed entries after landing stops "
                             "(default: the landing time, at least 5)")
    parser.add_argument("--pg-statements", action="store_true",
                        help="PostgreSQL with pg_stat_statements: its costliest statements "
                             "in DIR/pg_statements.csv, their totals in summary.json")
    parser.add_argument("--poll-s", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    preset = RATES[args.rates or ("short" if args.minutes < 10 else "centre10x")]
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.drain_minutes is None:
        args.drain_minutes = max(5.0, args.minutes)
    for fault in args.fault:
        name, _, seconds = fault.partition("@")
        if name not in FAULTS or not seconds.replace(".", "", 1).isdigit():
            parser.error(f"--fault {fault!r}: NAME@SECONDS, NAME one of {sorted(FAULTS)}")
    if args.object_store and _faulted(args, "warehouse-full"):
        parser.error("--fault warehouse-full fills a file system: not with --object-store")
    if args.seed_cc or args.seed_geopm or args.seed_gpu:
        if args.object_store:
            parser.error("a seeded history keeps its warehouse on a file system image of "
                         "its own: not with --object-store")
        if os.geteuid() != 0:
            parser.error("a seeded history is kept on a loop-mounted image: run as root")
    return args


def _faulted(args: argparse.Namespace, name: str) -> bool:
    return any(fault.partition("@")[0] == name for fault in args.fault)


def stack_settings(args: argparse.Namespace) -> dict[str, str]:
    """The environment a centre would run with (deploy/systemd/joulehouse.env, and a longer
    gRPC timeout for launching runs) and the soak's quiet period, interval, PowerAPI
    hand-out size and wait, whether complete jobs and repetitions wait to be quiet, how
    often plots are drawn, and the trials' and derived tables' cadence."""
    ready = str(args.ready_when_complete).lower()
    return {"JOULEHOUSE_QUIET_PERIOD_S": str(args.quiet_s),
            "JOULEHOUSE_SENSOR_INTERVAL_S": str(args.interval_s),
            "JOULEHOUSE_POWERAPI_GROWN_BYTES": str(args.grown_bytes),
            "JOULEHOUSE_POWERAPI_GROWN_WAIT_S": f"{args.grown_wait_s:g}",
            "JOULEHOUSE_CC_READY_WHEN_COMPLETE": ready,
            "JOULEHOUSE_GPU_READY_WHEN_COMPLETE": ready,
            "JOULEHOUSE_PLOT_EVERY_S": f"{args.plot_every_s:g}",
            # the trials and derived tables every 5 minutes, as deployed (the end-to-end
            # stack sets 0: at every change)
            FOLLOWERS_EVERY_ENV: str(DEFAULT_EVERY_MIN),
            "DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS": str(TICK_TIMEOUT_S),
            "DAGSTER_SCHEDULE_GRPC_TIMEOUT_SECONDS": str(TICK_TIMEOUT_S),
            # a run's launch through the code server (60 s by default) timed out under load
            # in the first short runs: the run failed and was retried
            "DAGSTER_GRPC_TIMEOUT_SECONDS": str(TICK_TIMEOUT_S),
            "DAGSTER_EVENT_BATCH_SIZE": "1000",
            "MALLOC_ARENA_MAX": "2"}


def landers(args: argparse.Namespace, data: DataFolders,
            accounting: AccountingLander) -> list[Lander]:
    """Every source's lander at the run's rates (a rate of 0 leaves a source out);
    ``accounting``: the intensity and tariff lander, which landed its first files before
    the stack started (:func:`prepare`)."""
    bad = args.bad_fraction
    chosen = [
        ClusterCockpitLander(data.archive, args.cc_per_s, bad),
        GeopmLander(data.geopm, args.geopm_per_s, bad),
        GpuLander(data.gpu, 1 / args.gpu_every_s if args.gpu_every_s else 0, bad),
        PowerapiLander(data.powerapi, int(args.powerapi_streams), args.powerapi_flush_s, bad),
        TauLander(data.tau, 1 / args.tau_every_s if args.tau_every_s else 0, bad),
        accounting,
    ]
    return [lander for lander in chosen if lander.rate_per_s > 0
            and getattr(lander, "streams", 1) > 0]


@dataclass
class Landing:
    """The landers' threads: each lands its next entry when due, until ``stop_at``
    (monotonic), then closes its lander (``Lander.close``); the entries go to ``landed``;
    a lander's error ends the run."""

    landers: list[Lander]
    landed: list[Landed]
    stop_at: float
    errors: list[str]

    def run(self, lander: Lander) -> None:
        try:
            self.land(lander)
        finally:
            lander.close()

    def land(self, lander: Lander) -> None:
        started = time.monotonic()
        while True:
            due = started + lander.count / lander.rate_per_s
            if due >= self.stop_at:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                self.landed.extend(lander.land())
            except Exception as error:  # noqa: BLE001 - reported, and the run fails
                self.errors.append(f"{lander.source}: {error!r}")
                return

    @contextlib.contextmanager
    def running(self) -> Iterator[list[threading.Thread]]:
        """The landers' threads, started; on the way out, those still landing (the run cut
        short by an error) told to stop and waited for, each closing its lander."""
        threads = [threading.Thread(target=self.run, args=(lander,), daemon=True)
                   for lander in self.landers]
        for thread in threads:
            thread.start()
        try:
            yield threads
        finally:
            self.stop_at = 0.0
            for thread in threads:
                thread.join()


def _run_worker(stack: Stack) -> psutil.Process | None:
    """A run worker in the middle of a step's per-partition work: with a child other than
    Dagster's orphan watcher (the step's worker processes; the step itself runs in the run
    worker, ``definitions.RUN_EXECUTOR``), if any."""
    for worker in record.run_workers(stack):
        try:
            steps = [c for c in worker.children() if "watch_orphans" not in record.cmdline(c)]
        except psutil.NoSuchProcess:
            continue
        if steps:
            return worker
    return None


@dataclass
class Target:
    """What a fault acts on: the stack, the run's settings, the landers, the output folder,
    the warehouse's folder (none in the object store)."""

    stack: Stack
    args: argparse.Namespace
    landers: list[Lander]
    out: Path
    warehouse: Path | None


def kill_daemon(on: Target, fault: dict) -> None:
    on.stack.kill("daemon")
    time.sleep(on.args.restart_after_s)
    on.stack.restart("daemon")


def kill_worker(on: Target, fault: dict) -> None:
    worker = wait_for("a run worker in a step", lambda: _run_worker(on.stack), WORKER_WAIT_S)
    fault["at"] = utc_now()
    fault["pid"] = worker.pid
    os.kill(worker.pid, signal.SIGKILL)


def stop_postgres(on: Target, fault: dict) -> None:
    on.stack.postgres.stop("fast")
    time.sleep(on.args.outage_s)
    on.stack.postgres.start()


def restart_webserver(on: Target, fault: dict) -> None:
    on.stack.kill("webserver")
    on.stack.restart("webserver")


def unmount_landing(on: Target, fault: dict) -> None:
    """GEOPM's landing folder covered by an empty tmpfs (the stack sees an empty mount
    point) for ``--outage-s``; its lander writes into the folder underneath meanwhile, by
    a view of it bound before the cover (as the cluster's nodes go on writing)."""
    lander = next(lander for lander in on.landers if lander.source == "geopm")
    folder = lander.folder
    underneath = on.out / "geopm-underneath" / folder.name
    underneath.mkdir(parents=True, exist_ok=True)
    soak_history.run_command("mount", "--bind", str(folder), str(underneath))
    lander.writes_to = underneath
    soak_history.run_command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder))
    fault["folder"] = str(folder)
    try:
        time.sleep(on.args.outage_s)
    finally:
        try:
            soak_history.unmount(folder)
        finally:
            lander.writes_to = folder
            soak_history.unmount(underneath)


#: The file that fills the warehouse's file system (hidden: no table).
FILLER = ".soak-filler"


def fill_warehouse(on: Target, fault: dict) -> None:
    """The warehouse's file system filled to the last byte for ``--outage-s``, then freed."""
    filler = on.warehouse / FILLER
    chunk = b"\0" * 2**20
    try:
        with filler.open("wb", buffering=0) as file:  # unbuffered: the error is the write's
            try:
                while file.write(chunk):
                    pass
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
        fault["filled_bytes"] = filler.stat().st_size
        time.sleep(on.args.outage_s)
    finally:
        filler.unlink(missing_ok=True)


def allocated_mb(folder: Path) -> int:
    """What copies of the files under ``folder`` take, in MiB (rounded up): per file its
    allocated blocks, or its size in 4 KiB pages where more (a copy fills a sparse file's
    holes)."""
    allocated = 0
    for root, _, names in os.walk(folder):
        for name in names:
            info = os.lstat(Path(root) / name)
            allocated += max(info.st_blocks * 512, -(-info.st_size // 4096) * 4096)
    return -(-allocated // 2**20)


#: The stack's resident memory the warehouse's tmpfs must leave free (MiB): the daemon,
#: the webserver, the code server and up to 8 run workers took at most 3.0 GiB in the
#: 10-minute soaks at centre10x (timeseries.csv, 2026-11-30), PostgreSQL's cache aside.
STACK_RESERVE_MB = 4096


@contextlib.contextmanager
def warehouse_file_system(args: argparse.Namespace, warehouse: Path | None,
                          out: Path) -> Iterator[dict]:
    """For ``warehouse-full``: ``warehouse`` on a tmpfs of its own during the run, holding
    what it held (a kept history's tables, copied in through a descriptor of the folder
    the tmpfs covers: a mount moved into place would be refused under a shared mount) and
    ``--warehouse-mb`` more; its files copied to a plain ``out/warehouse`` at the end.
    Yields the tmpfs's size (MiB) and the copy's time (s), {} without the fault. Refused
    before mounting if the tmpfs and the stack started after it (``STACK_RESERVE_MB``)
    would not fit in the memory available: a tmpfs filled past it would push the stack
    into swap or the OOM killer, not fill a disk."""
    if not _faulted(args, "warehouse-full"):
        yield {}
        return
    kept = out / ".warehouse-kept"
    if kept.exists():
        raise RuntimeError(f"{kept} is left from an earlier run: delete it")
    warehouse.mkdir(parents=True, exist_ok=True)
    size_mb = allocated_mb(warehouse) + args.warehouse_mb
    available_mb = psutil.virtual_memory().available // 2**20
    if size_mb + STACK_RESERVE_MB > available_mb:
        raise RuntimeError(
            f"the warehouse's tmpfs would take {size_mb} MiB (what {warehouse} holds and "
            f"--warehouse-mb {args.warehouse_mb}), and the stack {STACK_RESERVE_MB} MiB: "
            f"more than the {available_mb} MiB of memory available: lower --warehouse-mb "
            "or free memory")
    began = time.monotonic()
    covered = os.open(warehouse, os.O_RDONLY | os.O_DIRECTORY)
    try:
        soak_history.run_command("mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                                 str(warehouse))
        try:
            shutil.copytree(f"/proc/self/fd/{covered}", warehouse, symlinks=True,
                            dirs_exist_ok=True)
        except BaseException:
            soak_history.unmount(warehouse)
            raise
    finally:
        os.close(covered)
    try:
        yield {"tmpfs_mb": size_mb, "copy_in_s": round(time.monotonic() - began, 1)}
    finally:
        try:
            shutil.copytree(warehouse, kept, ignore=shutil.ignore_patterns(FILLER))
        finally:
            soak_history.unmount(warehouse)
        if warehouse == out / "warehouse":
            warehouse.rmdir()
        kept.rename(out / "warehouse")


FAULTS: dict[str, Callable[[Target, dict], None]] = {
    "daemon-kill": kill_daemon, "worker-kill": kill_worker,
    "postgres-stop": stop_postgres, "webserver-restart": restart_webserver,
    "landing-unmounted": unmount_landing, "warehouse-full": fill_warehouse}


def inject(on: Target, name: str, faults: list[dict], errors: list[str]) -> None:
    """Inject the fault ``name`` now; its record (``at``, ``ended``) joins ``faults``."""
    fault = {"name": name, "at": utc_now()}
    faults.append(fault)
    try:
        FAULTS[name](on, fault)
    except Exception as error:  # noqa: BLE001 - reported, and the run fails
        errors.append(f"fault {name}: {error!r}")
    fault["ended"] = utc_now()


def schedule_faults(on: Target, faults: list[dict], errors: list[str]
                    ) -> list[threading.Timer]:
    timers = []
    for spec in on.args.fault:
        name, _, seconds = spec.partition("@")
        timer = threading.Timer(float(seconds), inject, (on, name, faults, errors))
        timer.daemon = True
        timer.start()
        timers.append(timer)
    return timers


def start_sensors(stack: Stack) -> list[str]:
    """Every sensor of the code location turned on, as the UI's toggles do."""
    sensors = wait_for("the code location to load", lambda: api.sensors_loaded(stack.port),
                       LOAD_TIMEOUT_S, lambda: stack.log_tail("code-server"))
    for sensor in sensors:
        api.start_sensor(stack.port, sensor)
    return sensors


def polled(stack: Stack, landed: list[Landed], looker: record.Looker,
           errors: list[str]) -> None:
    """One poll; a store down (a fault) is counted, not fatal."""
    try:
        record.poll(stack, landed, looker)
    except Exception as error:  # noqa: BLE001 - PostgreSQL down, a file being replaced
        errors.append(f"{utc_now().isoformat()}: {error!r}")


def history(args: argparse.Namespace) -> History:
    return History(args.seed_cc, args.seed_geopm, args.seed_gpu, args.seed_days)


@dataclass(frozen=True)
class Place:
    """Where a run's stack keeps its data: fresh empty folders and ``out/warehouse`` (or the
    object store), or a kept history mounted (``soak_history``: its folders, warehouse and
    databases, and where its intensity and tariff files end)."""

    folders: Callable[[Path], DataFolders]
    warehouse: Path | None
    restore: Callable[[PostgresServer], None] = lambda _: None
    covers_from: pd.Timestamp | None = None
    history: dict = field(default_factory=dict)


def prepare(data: DataFolders, landed: list[Landed], place: Place, every_s: float,
            tag: str = "soak") -> AccountingLander:
    """Before the stack starts: the first intensity and tariff files, from
    ``place.covers_from`` (their entries go to ``landed``): the site's zone must have
    intensity data when the definitions load, which refuse it otherwise
    (docs/configuration.md). Returns the intensity and tariff lander, to go on landing."""
    accounting = AccountingLander(data.intensity, data.tariffs, 1 / every_s,
                                  place.covers_from, tag)
    landed.extend(accounting.land())
    return accounting


def bring_in(args: argparse.Namespace, into: Path, out: Path, progress: dict | None) -> dict:
    """The stack over a history (``soak_history.make``): just written, with intensity and
    tariffs from the day before its first; or partly brought in (``progress``), its
    databases restored from ``into`` and intensity and tariffs from where its files end
    (none if they reach tomorrow). Every sensor on until all of it is accounted or
    ``--seed-minutes`` have passed, then :func:`soak_history.quiesce` and its databases
    dumped into ``into``. Returns what the history's record keeps of it (``complete``)."""
    seeded = history(args)
    first = pd.Timestamp.now(tz="UTC").normalize() - pd.Timedelta(days=seeded.days + 1)
    covers_from = soak_history.covers_to(progress) if progress else first
    place = Place(lambda _: soak_history.folders(), soak_history.warehouse(),
                  soak_history.restorer(into) if progress else lambda _: None, covers_from)
    runs = len(progress["runs"]) if progress else 0
    stack_folder = next(out / f"history-stack-{n}" for n in itertools.count(runs + 1)
                        if not (out / f"history-stack-{n}").exists())
    accounting: list[AccountingLander] = []
    with running_stack(stack_folder,
                       lambda data: accounting.append(prepare(
                           data, [], place, args.accounting_every_s,
                           f"history{runs + 1}" if runs else "history")),
                       folders=place.folders, warehouse_path=place.warehouse,
                       settings=stack_settings(args), restore=place.restore) as stack:
        sensors = start_sensors(stack)
        brought_in = wait_for_history(stack, args, HISTORY_POLL_S)
        soak_history.quiesce(
            stack, lambda on: api.stop_sensors(on.port, sensors, LOAD_TIMEOUT_S))
        soak_history.dump(stack, into)
    return {"brought_in": brought_in, "complete": brought_in["complete"],
            "covers_to": str(max(covers_from, accounting[0].tomorrow))}


#: The jobs the sources' landing sensors ask for.
SOURCE_JOBS = ("cc_job", "geopm_job", "gpu_energy_job", "powerapi_job", "tau_profiles_job")


def nothing_handed_out_again(stack: Stack, sensors: list[str], kept: dict,
                             since: datetime) -> None:
    """Once every one of ``sensors`` has ended two ticks since ``since`` over a restored
    history, before anything lands: no source's run asked for (the sensors' cursors found
    every entry handed out). Raises naming the history's commit otherwise (its runs would be
    measured as the landing's), or when the ticks do not end in three tick timeouts."""

    def ticked_twice() -> bool:
        ticks = record.ticks(stack)
        ended = ticks[(ticks["start"] >= since) & ticks["duration_s"].notna()]
        return all((ended["sensor"] == sensor).sum() >= 2 for sensor in sensors)

    wait_for("two ticks of every sensor over the restored history", ticked_twice,
             3 * TICK_TIMEOUT_S)
    runs = record.runs(stack)
    again = runs[(runs["created"] >= since) & runs["job"].isin(SOURCE_JOBS)]
    if not again.empty:
        raise RuntimeError(
            f"the kept history {kept['kept']} (brought in by commit(s) "
            f"{sorted({run['commit'] for run in kept['runs']})}) was "
            f"handed out again: {len(again)} run(s) of {sorted(set(again['job']))} before "
            "anything landed; delete it to make it anew with this code")


def wait_for_history(stack: Stack, args: argparse.Namespace, poll_s: float) -> dict:
    """Once the sensors are on, until every entry of the seeded history is in
    ``energy_facts`` and accounted with carbon and a cost (``complete``), or
    ``--seed-minutes`` have passed (not), polled every ``poll_s``: how long that took
    (``settle_s``, from the sensors turned on) and what was seen."""
    expected = history(args).expected()
    if not expected:
        return {"complete": True}
    begin, seen = time.monotonic(), {}
    while True:
        with contextlib.suppress(Exception):  # a table not yet written
            seen = record.history_counts(stack)
        complete = all(seen.get(source, {}).get("accounted", 0) >= count
                       for source, count in expected.items())
        if complete or time.monotonic() - begin > 60 * args.seed_minutes:
            return {"complete": complete, "expected": expected, "seen": seen,
                    "settle_s": round(time.monotonic() - begin, 1)}
        time.sleep(poll_s)


def run(args: argparse.Namespace) -> dict:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    seeded = history(args)
    if not seeded.expected():
        return soak(args, out, Place(DataFolders.empty,
                                     None if args.object_store else out / "warehouse"))
    folder = soak_history.make(seeded, lambda into, progress: bring_in(args, into, out,
                                                                          progress))
    with soak_history.copy_mounted(folder, out, not _faulted(args, "warehouse-full")
                                   ) as kept:
        return soak(args, out, Place(lambda _: soak_history.folders(),
                                     soak_history.warehouse(), soak_history.restorer(folder),
                                     soak_history.covers_to(kept),
                                     {**kept, "kept": str(folder)}))


def soak(args: argparse.Namespace, out: Path, place: Place) -> dict:
    """The run: the stack started on ``place``, the landing, the drain, the checks."""
    landed: list[Landed] = []
    faults: list[dict] = []
    errors: list[str] = []
    poll_errors: list[str] = []
    looker = record.Looker()  # what the polls found, kept from one to the next
    load_before = load_average()
    started, started_at = time.monotonic(), utc_now()
    accounting: list[AccountingLander] = []
    with warehouse_file_system(args, place.warehouse, out) as warehouse_fs, running_stack(
            out / "stack",
            lambda data: accounting.append(prepare(data, landed, place,
                                                   args.accounting_every_s)),
            folders=place.folders, warehouse_path=place.warehouse,
            settings=stack_settings(args),
            restore=(record.with_statements(place.restore) if args.pg_statements
                     else place.restore)) as stack:
        stack_up_s = time.monotonic() - started - warehouse_fs.get("copy_in_s", 0.0)
        sensors = start_sensors(stack)
        seeded = wait_for_history(stack, args, args.poll_s)
        if not seeded["complete"]:  # the landing would measure the history
            raise RuntimeError(f"the kept history was not all accounted in "
                               f"{args.seed_minutes:g} minutes: {seeded}")
        if place.history:
            nothing_handed_out_again(stack, sensors, place.history, started_at)
        with record.Sampler(stack, args.sample_s) as sampler:
            begin = time.monotonic()
            landing = Landing(landers(args, stack.data, *accounting), landed,
                              begin + 60 * args.minutes, errors)
            with landing.running() as threads:
                timers = schedule_faults(
                    Target(stack, args, landing.landers, out, place.warehouse), faults, errors)
                while any(thread.is_alive() for thread in threads):
                    polled(stack, landed, looker, poll_errors)
                    time.sleep(args.poll_s)
            landing_s = time.monotonic() - begin
            for timer in timers:
                timer.join()
            drain_end = time.monotonic() + 60 * args.drain_minutes
            while not record.settled(landed) and time.monotonic() < drain_end:
                time.sleep(args.poll_s)
                polled(stack, landed, looker, poll_errors)
            drained_s = time.monotonic() - begin - landing_s
            polled(stack, landed, looker, poll_errors)
        summary = {
            "started": started_at.isoformat(),
            "machine": describe(extra=f"load average before: {load_before}; after: "
                                      f"{load_average()}"),
            "settings": {k: (str(v) if isinstance(v, Path) else v)
                         for k, v in vars(args).items()},
            "stack_environment": stack_settings(args), "sensors": sensors,
            "history": {**place.history, "at_start": seeded} if place.history else {},
            "warehouse_file_system": warehouse_fs,
            "stack_up_s": round(stack_up_s, 1), "landing_s": round(landing_s, 1),
            "drain_s": round(drained_s, 1), "settled": record.settled(landed),
            "landed": {f"{s}/{e}": sum(r.source == s and r.expected == e for r in landed)
                       for s, e in sorted({(r.source, r.expected) for r in landed})},
            "freshness": record.freshness(landed),
            "exactly_once": record.exactly_once(stack, landed),
            "bad_entries": record.bad_entries(stack, landed),
            "memory_growth": record.memory_growth(sampler.rows, args.minutes),
            "cpu": record.cpu_seconds(sampler.rows),
            "faults": record.recovery(faults, landed),
            "errors": errors, "poll_errors": len(poll_errors),
            "poll_errors_first": poll_errors[:5], "sampler_errors": len(sampler.errors),
            "sampler_errors_first": sampler.errors[:5],
        }
        tick_rows = record.ticks(stack)  # this run's: not a kept history's
        tick_rows = tick_rows[tick_rows["start"] >= started_at]
        tick_rows.to_csv(out / "ticks.csv", index=False)
        runs = record.runs(stack)
        runs = runs[runs["created"] >= started_at]  # this run's: not a kept history's
        runs.to_csv(out / "runs.csv", index=False)
        summary["runs"] = record.run_figures(runs)
        summary["ticks"] = record.tick_figures(tick_rows, args.interval_s, TICK_TIMEOUT_S)
        summary["ticks_past_timeout"] = sum(t["past_timeout"] for t in
                                            summary["ticks"].values())
        if args.pg_statements:
            summary["pg_statements"] = record.statements(stack, out / "pg_statements.csv")
        if args.object_store:
            tables = stack.tables
            pafs.copy_files(record.warehouse_root(tables), str(out / "warehouse"),
                            source_filesystem=tables.filesystem,
                            destination_filesystem=pafs.LocalFileSystem())
    summary["sensor_wait"] = sensor_wait(summary, args)
    summary["targets"] = targets(summary)
    record.write_landed(out / "landed.csv", landed)
    sampler.write(out / "timeseries.csv")
    try:
        soak_plots.write(out)
    except Exception as error:  # noqa: BLE001 - the run's figures stand without its plots
        summary["plot_error"] = repr(error)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def sensor_wait(summary: dict, args: argparse.Namespace) -> dict:
    """Per source landed, the sensors' expected wait (s) against its median delay landing
    -> facts: half an interval for the tick, after what the entry waits for. GEOPM reports
    and TAU sets wait for ``quiet_s``, as ClusterCockpit jobs and GPU repetitions do without
    ``--ready-when-complete``; a PowerAPI stream for ``grown_wait_s`` after a tick first saw
    it grown (an append landing later in that wait waits less). Expected, not bounds: the
    cap, and a sensor's own run in flight, hold an entry back longer."""
    tick = args.interval_s / 2
    quiet = args.quiet_s + tick
    complete = tick if args.ready_when_complete else quiet
    expected = {"clustercockpit": complete, "gpu-benchmark": complete, "geopm": quiet,
                "tau": quiet, "powerapi": args.grown_wait_s + tick}
    sources = {}
    for source, wait in expected.items():
        if source not in summary["freshness"]:
            continue
        median = summary["freshness"][source]["to_facts"].get("p50_s")
        sources[source] = {"expected_wait_s": wait, "median_to_facts_s": median,
                           "share_of_median_to_facts":
                               round(wait / median, 3) if median else None}
    return {"quiet_s": args.quiet_s, "interval_s": args.interval_s,
            "grown_wait_s": args.grown_wait_s, "ready_when_complete": args.ready_when_complete,
            "sources": sources}


def targets(summary: dict) -> dict:
    """The issue's targets, met or not (None: not measured in this run)."""
    accounting = summary["freshness"]["all_fact_sources"]["to_accounting"]
    growth = [v["growth_pct"] for k, v in summary["memory_growth"].items()
              if isinstance(v, dict) and v.get("growth_pct") is not None]
    return {
        "accounting_p95_le_120_s": accounting["p95_s"] <= P95_TARGET_S
        if accounting["n"] else None,
        "accounting_p99_le_300_s": accounting["p99_s"] <= P99_TARGET_S
        if accounting["n"] else None,
        "exactly_once": summary["exactly_once"]["ok"],
        "bad_failed_alone": summary["bad_entries"]["ok"],
        "rss_growth_le_10_pct": all(g <= RSS_GROWTH_TARGET_PCT for g in growth)
        if growth else None,
        "no_tick_past_timeout": summary["ticks_past_timeout"] == 0,
        "every_good_entry_accounted": summary["settled"],
    }


#: The exit status of a run that kept a seeded history's progress without completing it.
INCOMPLETE_HISTORY = 3


def main(argv: list[str] | None = None) -> int:
    # stopped by SIGTERM (a test's timeout), the stack's processes, servers and mounts are
    # stopped on the way out as on any error
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    args = parse_args(argv)
    try:
        summary = run(args)
    except soak_history.HistoryIncomplete as stopped:
        print(stopped, file=sys.stderr)
        return INCOMPLETE_HISTORY
    print(json.dumps({k: summary[k] for k in ("landed", "freshness", "targets", "faults",
                                              "errors")}, indent=2, default=str))
    return 0 if not summary["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
