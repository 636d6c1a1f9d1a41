"""The whole production stack, started from nothing: for the end-to-end test and the soak
(``benchmarks/soak.py``), one implementation.

A throwaway PostgreSQL server (``tests/postgres_server.py``) holds two databases:
Dagster's storage (``dagster``: runs, event log, schedules and sensors) and TAUdb
(``taudb``); the warehouse is a bucket of a throwaway S3-compatible object store
(moto's server, ``tests/object_store.py``), reached by every run worker. Three Dagster
processes run beside it, each in a process group of its own
and each stopped by its id on the way out, however the test ends
(``tests/dagster/webserver.started``):

- ``dagster code-server start`` serving ``definitions.py`` over gRPC on loopback (the
  run workers are its children, so they are in its group);
- ``dagster-daemon run`` (sensors, automation, the run queue, backfills, run retries);
- ``dagster-webserver`` (the UI and its GraphQL API),

the latter two reading the production workspace (``deploy/production/workspace.yaml``:
the code server's host and port from the environment), and all three the production
``dagster.yaml`` copied unchanged into a fresh DAGSTER_HOME. The example data of every
source is copied into fresh data roots and landing folders; the resources read them,
the warehouse's URL, endpoint and credentials and the TAUdb URL from the environment, as in
production.

What differs between the two users is a parameter of :func:`running_stack`: the data folders
(the examples copied, or empty ones a harness lands into), the warehouse (the object store,
or a path kept after the stack stops) and the environment's settings (quiet period, sensor
interval ...). A process may be stopped and started again while the stack runs
(:meth:`Stack.restart`, as systemd's ``Restart=always`` would after a crash).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psycopg2
from object_store import ObjectStoreServer, throwaway_object_store
from postgres_server import PostgresServer, postgres_server

from definitions import (
    EXAMPLE_CC_ARCHIVE,
    EXAMPLE_GEOPM_REPORTS,
    EXAMPLE_GPU_DATA,
    EXAMPLE_POWERAPI,
    EXAMPLE_TAU_PROFILES,
)
from joulehouse import warehouse
from joulehouse.taudb.loader import SOURCE_KEY
from tests.dagster.webserver import (
    HOST,
    PROJECT,
    free_port,
    graphql,
    group_alive,
    kill_group,
    started,
    wait_for_code_server,
    wait_until_serving,
)

BIN = Path(sys.executable).parent
#: The production instance and workspace, used as they are.
PRODUCTION = PROJECT / "deploy" / "production"
LOCATION = "joulehouse"
REPOSITORY = "__repository__"
#: The sources' quiet period and the landing sensors' interval: short, so ticks come fast.
#: Not shorter: an idle tick costs about 0.1 CPU-s (the daemon's and the code server's
#: halves), and the sensors tick idle while the runs they asked for go one at a time: at
#: 2 s, the five landing sensors burnt 0.24 CPU-s per second of the stack's life.
QUIET_S = 1
SENSOR_INTERVAL_S = 5
#: Bounds, not timings (the machine may be shared): loading the code, waiting for runs.
CODE_SERVER_TIMEOUT_S = 180.0
POLL_S = 1.0
#: A bound: how long the killed processes of a group may take to be gone.
STOP_TIMEOUT_S = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class DataFolders:
    """The folders the resources read: one GPU data root ``lab``, one landing folder or
    archive per other source, and (when given) the intensity and tariff landing folders
    (else the bundled examples are read)."""

    gpu: Path
    tau: Path
    geopm: Path
    powerapi: Path
    archive: Path
    intensity: Path | None = None
    tariffs: Path | None = None

    @classmethod
    def under(cls, base: Path) -> DataFolders:
        """The folders' places under ``base`` (nothing created)."""
        return cls(gpu=base / "lab", tau=base / "tau", geopm=base / "geopm",
                   powerapi=base / "powerapi", archive=base / "archive")

    @classmethod
    def copied(cls, base: Path) -> DataFolders:
        """Fresh copies of the examples under ``base``."""
        folders = cls.under(base)
        for example, folder in ((EXAMPLE_GPU_DATA, folders.gpu),
                                (EXAMPLE_TAU_PROFILES, folders.tau),
                                (EXAMPLE_GEOPM_REPORTS, folders.geopm),
                                (EXAMPLE_POWERAPI, folders.powerapi),
                                (EXAMPLE_CC_ARCHIVE, folders.archive)):
            shutil.copytree(example, folder)
        return folders

    @classmethod
    def empty(cls, base: Path) -> DataFolders:
        """Empty folders under ``base``, intensity and tariffs included (a harness lands
        into them)."""
        folders = cls(**{**vars(cls.under(base)), "intensity": base / "intensity",
                         "tariffs": base / "tariffs"})
        for folder in vars(folders).values():
            folder.mkdir(parents=True)
        return folders


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float,
             on_timeout: Callable[[], str] = lambda: "") -> T:
    """``probe()`` once it returns something truthy, polled every ``POLL_S``; fails naming
    ``what`` (and ``on_timeout()``: what was seen) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}"
                                 f"\n{on_timeout()}")
        time.sleep(POLL_S)


@dataclass
class Stack:
    """The running stack: the PostgreSQL server and its two databases, the data folders,
    the warehouse (its URL and the core's view of it), the webserver's port, the processes
    and their logs."""

    postgres: PostgresServer
    dagster_db: str
    taudb_url: str
    data: DataFolders
    warehouse_url: str
    tables: warehouse.Warehouse
    home: Path
    env: dict[str, str]
    logs: Path
    port: int = 0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    #: Each process's command line, and what keeps it stopped on the way out.
    commands: dict[str, list[str]] = field(default_factory=dict)
    exits: ExitStack = field(default_factory=ExitStack)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        return graphql(self.port, query, variables)

    def sql(self, query: str, database: str | None = None) -> list[tuple]:
        """The rows of ``query`` on the Dagster database (or ``database``)."""
        connection = psycopg2.connect(self.postgres.url(database or self.dagster_db))
        try:
            with connection.cursor() as cursor:
                cursor.execute(query)
                return cursor.fetchall()
        finally:
            connection.close()

    def trial_keys(self) -> list[str]:
        """The source key of every TAUdb trial, sorted (one per trial; none before TAU's
        tables exist)."""
        if not self.sql("SELECT 1 FROM information_schema.tables WHERE table_name = "
                        "'primary_metadata'", "taudb"):
            return []
        return [key for (key,) in self.sql(
            f"SELECT value FROM primary_metadata WHERE name = '{SOURCE_KEY}' ORDER BY value",
            "taudb")]

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        """Start the process ``name`` (its output appended to ``logs/<name>.log``)."""
        self.commands[name] = command
        self.processes[name] = self.exits.enter_context(
            started(command, self.env, self.logs / f"{name}.log", append=True))
        return self.processes[name]

    def kill(self, name: str) -> None:
        """``kill -9`` of the process ``name`` and of its process group (its children,
        as a unit manager stopping a crashed service would); waits until it is gone."""
        kill_group(self.processes[name])
        _wait_gone(name, self.processes[name])

    def restart(self, name: str) -> subprocess.Popen:
        """The process ``name`` started again with its command (after :meth:`kill`, or it
        ended); the webserver waited for until it serves."""
        process = self.start(name, self.commands[name])
        if name == "webserver":
            wait_until_serving(process, self.port, self.logs / "webserver.log")
        return process

    def log_tail(self, name: str, lines: int = 60) -> str:
        text = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
        return f"--- {name}.log (last {lines} lines) ---\n" + "\n".join(text[-lines:])


def _env(home: Path, postgres: PostgresServer, dagster_db: str, taudb_url: str,
         data: DataFolders, store: ObjectStoreServer | None, warehouse_url: str
         ) -> dict[str, str]:
    """The environment of every Dagster process: the instance's PostgreSQL credentials,
    and every resource's folders and URLs (and the object store's credentials) as
    production sets them."""
    accounting = {variable: str(folder) for variable, folder in (
        ("JOULEHOUSE_INTENSITY_LANDING", data.intensity),
        ("JOULEHOUSE_TARIFF_LANDING", data.tariffs)) if folder is not None}
    return {**(store.environment if store else {}), **accounting,
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(postgres.port),
        "DAGSTER_PG_DB": dagster_db, "DAGSTER_PG_USER": "postgres",
        "DAGSTER_PG_PASSWORD": "trust-auth-needs-none",
        "JOULEHOUSE_GPU_DATA_ROOTS": str(data.gpu),
        "JOULEHOUSE_TAU_LANDING": str(data.tau),
        "JOULEHOUSE_GEOPM_LANDING": str(data.geopm),
        "JOULEHOUSE_POWERAPI_LANDING": str(data.powerapi),
        "JOULEHOUSE_CC_ARCHIVE": str(data.archive),
        "JOULEHOUSE_WAREHOUSE": warehouse_url,
        "JOULEHOUSE_TAUDB_URL": taudb_url,
        "JOULEHOUSE_QUIET_PERIOD_S": str(QUIET_S),
        "JOULEHOUSE_FULL_RESCAN_S": "none",
        "JOULEHOUSE_SENSOR_INTERVAL_S": str(SENSOR_INTERVAL_S),
        # plots drawn at most every 10 minutes, as every deployment sets (deploy/README.md):
        # each asset's first materialization draws its plot; the UI test opens
        # gpu_benchmark_energy's latest, so it needs that asset materialized once before it
        # (a second within 600 s would carry no plot: a plot of the run's own rows); drawing
        # at every run imported matplotlib and drew PNGs in most run workers
        "JOULEHOUSE_PLOT_EVERY_S": "600",
        # the PowerAPI trials and derived tables at every change, not every 5 minutes
        # (assets/follow_cadence.py): the tests wait for the trials
        "JOULEHOUSE_FOLLOWERS_EVERY_MIN": "0",
        # each module compiled once and its bytecode kept, as in an installed venv (pip
        # compiles at install): with a PYTHONDONTWRITEBYTECODE from the caller's shell and
        # a venv uv installed (none compiled), every run worker compiled Dagster, pandas
        # and the project from source at its start, 6.0 s of CPU against 2.6 s
        # (benchmarks/README.md, the soak)
        "PYTHONDONTWRITEBYTECODE": "",
    }


@contextmanager
def running_stack(base: Path, prepare: Callable[[DataFolders], None] = lambda _: None, *,
                  folders: Callable[[Path], DataFolders] = DataFolders.copied,
                  warehouse_path: Path | None = None,
                  settings: Mapping[str, str] = {},
                  restore: Callable[[PostgresServer], None] = lambda _: None
                  ) -> Iterator[Stack]:
    """The stack over the data folders ``folders(base / "data")`` (default: fresh copies of
    the examples; ``prepare`` may change them before anything starts), its warehouse a
    bucket of a throwaway object store, or ``warehouse_path`` (kept on the way out), the
    environment's defaults overridden by ``settings``; ``restore`` may fill the new, empty
    databases ``dagster`` and ``taudb`` before any process starts; every process and the
    server stopped on the way out."""
    data = folders(base / "data")
    prepare(data)
    home, logs = base / "dagster_home", base / "logs"
    home.mkdir(parents=True)
    logs.mkdir(parents=True)
    shutil.copy(PRODUCTION / "dagster.yaml", home / "dagster.yaml")
    with postgres_server() as postgres, ExitStack() as servers:
        store = None if warehouse_path else servers.enter_context(throwaway_object_store())
        dagster_db, taudb = "dagster", "taudb"
        postgres.create_database(dagster_db)
        taudb_url = postgres.create_database(taudb)
        restore(postgres)
        warehouse_url = (str(warehouse_path) if store is None
                         else f"s3://{store.new_bucket()}/warehouse")
        env = {**_env(home, postgres, dagster_db, taudb_url, data, store, warehouse_url),
               **settings}
        the_stack = Stack(postgres, dagster_db, taudb_url, data, warehouse_url,
                          warehouse.Warehouse(warehouse_url, store.store if store else None),
                          home, env, logs)
        with the_stack.exits:
            grpc_port = free_port()
            code_server = the_stack.start("code-server", [
                str(BIN / "dagster"), "code-server", "start", "-h", HOST, "-p",
                str(grpc_port), "-m", "definitions", "--location-name", LOCATION])
            wait_for_code_server(code_server, grpc_port, logs / "code-server.log",
                                 CODE_SERVER_TIMEOUT_S)
            env |= {"JOULEHOUSE_CODE_SERVER_HOST": HOST,
                    "JOULEHOUSE_CODE_SERVER_PORT": str(grpc_port)}
            workspace = PRODUCTION / "workspace.yaml"
            the_stack.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w",
                                       str(workspace)])
            the_stack.port = free_port()
            the_stack.start("webserver", [str(BIN / "dagster-webserver"), "-w",
                                          str(workspace), "-h", HOST, "-p",
                                          str(the_stack.port)])
            wait_until_serving(the_stack.processes["webserver"], the_stack.port,
                               logs / "webserver.log")
            yield the_stack
    for name, process in the_stack.processes.items():
        _wait_gone(name, process)


def _wait_gone(name: str, process: subprocess.Popen) -> None:
    """Wait until the process group of ``name`` is gone (at most STOP_TIMEOUT_S)."""
    wait_for(f"{name}'s process group {process.pid} to be gone",
             lambda: not group_alive(process.pid), STOP_TIMEOUT_S)
