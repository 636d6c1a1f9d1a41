"""Benchmark (c): a backfill of N GPU repetitions through Dagster against the CLI (issue 11).

Generates (once, reused) N short repetitions (a multiple of 500, default
1,000) under ``benchmarks/.data/`` (experiments of 5 benchmarks x 10 settings
x 10 repetitions), times ``joulehouse energy gpu`` over them, then registers
their days as ``gpu_repetition_days`` partitions in a fresh DAGSTER_HOME (a temporary
folder under ``benchmarks/.data/`` holding ``deploy/dagster.yaml``: SQLite, or
with ``--storage postgres`` ``deploy/production/dagster.yaml`` on a throwaway
PostgreSQL server) and starts ``dagster dev`` on it, with
``DAGSTER_EVENT_BATCH_SIZE`` set (``--event-batch-size``). Then launches, as
the UI does, an asset backfill of every asset of ``gpu_energy_job`` over those days
(each read whole: a backfill names no repetition) through the webserver's GraphQL API
(``launchPartitionBackfill``),
waits for Dagster's daemon to finish it, and reports the runs it created, the
wall time against the CLI's and where each run's time went.

Run: ``.venv/bin/python benchmarks/backfill.py [--repetitions N] [--storage postgres]
[--timeout S]``.
"""

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import dagster as dg
import yaml
from dagster._core.execution.backfill import BulkActionStatus

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine import describe, load_average
from postgres_server import free_port, throwaway_postgres

from definitions import defs
from joulehouse.gpu.days import repetition_day_key
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import find_repetitions
from resources import DataRoot, GpuBenchmarkSource
from sensors.gpu_repetitions import JOB_NAME
from sensors.partition_runs import RANGE_END, RANGE_START
from tests.dagster import webserver

PROJECT = Path(__file__).resolve().parent.parent
DATA = PROJECT / "benchmarks" / ".data"
#: Repetitions per experiment: 5 benchmarks x 10 power limits x 10 repetitions.
PER_EXPERIMENT = 500
REPETITIONS = 10
SPEC = RepetitionSpec(duration_s=5.0, epochs=1)
MAX_RUNS = 10
PARTITIONS = "gpu_repetition_days"
ENERGY = dg.AssetKey("gpu_repetition_energy")
EVENTS = dg.DagsterEventType
STEP_END = {EVENTS.STEP_SUCCESS, EVENTS.STEP_FAILURE}
MILESTONES = {EVENTS.RUN_STARTING: "launched", EVENTS.RUN_START: "started",
              EVENTS.RUN_SUCCESS: "ended", EVENTS.RUN_FAILURE: "ended"}
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"


def tree(repetitions: int) -> Path:
    """The generated data root of ``repetitions`` (a multiple of 500) short repetitions,
    built once under ``benchmarks/.data/`` (``backfill/`` for 1,000, else
    ``backfill-<N>/``): experiments ``power-limit``, ``power-limit-2``, ... of 5
    benchmarks x 10 power limits x 10 repetitions each."""
    if repetitions % PER_EXPERIMENT:
        raise SystemExit(f"--repetitions: a multiple of {PER_EXPERIMENT}")
    root = DATA / ("backfill" if repetitions == 1000 else f"backfill-{repetitions}")
    marker = root / ".complete"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        experiments = ["power-limit", *(f"power-limit-{n}" for n in
                                        range(2, repetitions // PER_EXPERIMENT + 1))]
        runs = {experiment: {f"bench{b}": [f"{100 + 20 * s}W" for s in range(10)]
                             for b in range(5)} for experiment in experiments}
        write_data_root(root, runs, repetitions=REPETITIONS, base=SPEC)
        marker.touch()
    return root


def repetition_keys(root: Path) -> list[str]:
    """The keys (``<root name>/<experiment>/<benchmark>/<run>/<repetition>``) of the
    repetitions under ``root``."""
    data_root = DataRoot(path=str(root))
    source = GpuBenchmarkSource(data_roots=[data_root])
    return [source.partition_key(data_root, ref) for ref in find_repetitions(root)]


def days_of(keys: list[str], root: Path) -> dict[str, list[str]]:
    """The ``gpu_repetition_days`` partition of each of the repetitions ``keys`` under
    ``root`` (UTC timestamps): day -> its repetitions, in key order."""
    name = DataRoot(path=str(root)).key_prefix
    days: dict[str, list[str]] = {}
    for key in keys:
        path = root / key.split("/", 1)[1]
        days.setdefault(repetition_day_key(name, path, "UTC"), []).append(key)
    return days


def wait_until(what: str, ready, timeout_s: float, every_s: float = 2.0):
    """Calls ``ready()`` until it returns something truthy; raises after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if result := ready():
                return result
        except OSError:
            pass
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not done after {timeout_s:.0f} s")


def start_dagster(home: Path, port: int, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """``dagster dev`` in its own process group, with the variables ``env`` set (the
    source's data and the warehouse).

    Ignored signals stay ignored across exec (a shell without job control starts
    us with SIGINT ignored), handled ones go back to default: so handle both
    here, SIGTERM by exiting through the caller's clean-up.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    env = {**os.environ, "DAGSTER_HOME": str(home), **env}
    with log.open("w") as out:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
             "-h", "127.0.0.1", "-p", str(port)],
            cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL if it is still there after 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals."""
    total, end = 0.0, float("-inf")
    for start, stop_ in sorted(intervals):
        total += max(0.0, stop_ - max(start, end))
        end = max(end, stop_)
    return total


def step_seconds(instance: dg.DagsterInstance, run_id: str) -> float:
    """Seconds inside the run's steps (the union of their intervals)."""
    starts, intervals = {}, []
    for entry in instance.all_logs(run_id, of_type={EVENTS.STEP_START, *STEP_END}):
        if entry.dagster_event_type == EVENTS.STEP_START:
            starts[entry.step_key] = entry.timestamp
        else:
            intervals.append((starts[entry.step_key], entry.timestamp))
    return busy_seconds(intervals)


def run_report(instance: dg.DagsterInstance, record, submitted: float) -> tuple[str, float]:
    """One backfill run: what it did, its timeline from the backfill's submission, the time
    in its steps and the rest (its overhead: queue, process start, code loading, events)."""
    run = record.dagster_run
    times = {"created": record.create_timestamp.timestamp()}
    for entry in instance.all_logs(run.run_id, of_type=set(MILESTONES)):
        times[MILESTONES[entry.dagster_event_type]] = entry.timestamp
    steps = step_seconds(instance, run.run_id)
    overhead = times["ended"] - times["created"] - steps
    tags = run.tags
    span = (f"{tags[RANGE_START]} .. {tags[RANGE_END]}"
            if RANGE_START in tags else tags.get("dagster/partition", "-"))
    assets = ", ".join(sorted(key.to_user_string() for key in run.asset_selection or ()))
    timeline = ", ".join(f"{name} +{at - submitted:.1f} s" for name, at in times.items())
    return (f"  {run.status.value}: [{assets}] partitions {span}\n    {timeline}; "
            f"in steps {steps:.1f} s, the rest {overhead:.1f} s"), overhead


def load_summary(loads: list[str]) -> str:
    """The load average seen while a backfill ran (``loads``: ``/proc/loadavg`` readings)."""
    return (f"load average (1, 5, 15 min) during the backfill: first {loads[0]}, "
            f"highest 1-min {max(float(x.split()[0]) for x in loads):.2f}, last {loads[-1]}")


def launch_backfill(instance: dg.DagsterInstance, port: int, selection: list[dg.AssetKey],
                    keys: list[str], timeout_s: float, loads: list[str]
                    ) -> tuple[BulkActionStatus, float, list, float]:
    """Once the webserver on ``port`` has loaded the code, launch a backfill of
    ``selection`` over the partitions ``keys`` through GraphQL (as the UI does) and wait
    for it to end, appending the load average to ``loads`` as it goes. Returns its
    status, the seconds from submission to its end, its run records (oldest first) and
    the submission time (epoch s)."""
    wait_until("code location", lambda: any(
        entry["loadStatus"] == "LOADED"
        for entry in webserver.graphql(port, LOCATIONS)["workspaceOrError"]["locationEntries"]),
        timeout_s=300)
    started, submitted = time.perf_counter(), time.time()
    backfill_id = webserver.launch_backfill(port, {
        "assetSelection": [{"path": key.path} for key in selection], "partitionNames": keys})
    print(f"backfill {backfill_id}: {len(selection)} assets x {len(keys)} partitions, "
          f"submitted in {time.perf_counter() - started:.1f} s")

    def finished() -> BulkActionStatus | None:
        loads.append(load_average())
        status = instance.get_backfill(backfill_id).status
        return None if status in (BulkActionStatus.REQUESTED,
                                  BulkActionStatus.CANCELING) else status

    status = wait_until("backfill", finished, timeout_s=timeout_s, every_s=5)
    elapsed = time.perf_counter() - started
    records = sorted(instance.get_run_records(
        filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id})),
        key=lambda r: r.create_timestamp)
    return status, elapsed, records, submitted


def cli_seconds(*arguments: str) -> tuple[float, float]:
    """Wall and CPU time (s) of ``joulehouse <arguments>`` (``python -m joulehouse.cli`` in
    the project root, so a worktree's own code runs; process start and imports included)."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "joulehouse.cli", *arguments], check=True,
                   cwd=PROJECT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.perf_counter() - started,
            after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def storage_setting(home: Path, postgres_url: str | None, stock_storage: bool) -> dict:
    """The ``storage`` setting of an instance in ``home``: SQLite files there, or the
    PostgreSQL database at ``postgres_url``; deploy/'s batching storage
    (``resources/instance_storage.py``) or, with ``stock_storage``, Dagster's own."""
    if postgres_url is None:
        kind, cls, config = "sqlite", "BatchingSqliteStorage", {"base_dir": str(home)}
    else:
        kind, cls = "postgres", "BatchingPostgresStorage"
        config = {"postgres_url": postgres_url.replace("postgresql://",
                                                       "postgresql+psycopg2://")}
    if stock_storage:
        return {kind: config}
    return {"custom": {"module": "resources.instance_storage", "class": cls,
                       "config": config}}


def write_instance_yaml(source: Path, home: Path, stock_storage: bool) -> None:
    """Copy the instance file ``source`` into ``home``; with ``stock_storage``, its storage
    is Dagster's own (``sqlite`` / ``postgres``, same settings) instead of Joulehouse's
    batching storage (``resources/instance_storage.py``): the "before" of that storage."""
    config = yaml.safe_load(source.read_text())
    if stock_storage:
        custom = config["storage"]["custom"]
        kind = "sqlite" if custom["class"] == "BatchingSqliteStorage" else "postgres"
        config["storage"] = {kind: custom["config"]}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))


@contextmanager
def instance_config(storage: str, home: Path, stock_storage: bool = False
                    ) -> Iterator[dict[str, str]]:
    """Write ``home/dagster.yaml`` for ``storage`` (``deploy/dagster.yaml``: SQLite;
    ``deploy/production/dagster.yaml`` on a throwaway PostgreSQL server; see
    :func:`write_instance_yaml` for ``stock_storage``) and yield the environment the
    instance needs."""
    if storage == "sqlite":
        write_instance_yaml(PROJECT / "deploy" / "dagster.yaml", home, stock_storage)
        yield {}
        return
    write_instance_yaml(PROJECT / "deploy" / "production" / "dagster.yaml", home,
                        stock_storage)
    with throwaway_postgres("backfill") as url:
        parts = urlparse(url)
        yield {"DAGSTER_PG_HOST": parts.hostname, "DAGSTER_PG_PORT": str(parts.port),
               "DAGSTER_PG_DB": parts.path[1:], "DAGSTER_PG_USER": parts.username,
               "DAGSTER_PG_PASSWORD": ""}


@dataclass
class Backfill:
    """A finished backfill: the instance it ran on (still open), its status, the seconds
    from submission to its end, its run records (oldest first), the submission time
    (epoch s) and the load averages seen while it ran."""

    instance: dg.DagsterInstance
    status: BulkActionStatus
    elapsed_s: float
    records: list
    submitted: float
    loads: list[str]

    def other_runs(self) -> int:
        """Runs on the instance that the backfill did not create (automation, sensors)."""
        return self.instance.get_runs_count() - len(self.records)


@contextmanager
def backfilled(storage: str, home: Path, partitions: str, keys: list[str],
               selection: list[dg.AssetKey], env: dict[str, str], timeout_s: float,
               stock_storage: bool = False) -> Iterator[Backfill]:
    """On a fresh instance in ``home`` (``instance_config(storage, home, stock_storage)``), register
    ``keys`` as dynamic partitions of ``partitions``, start ``dagster dev`` with the
    variables ``env`` and launch the backfill of ``selection`` over ``keys`` as the UI
    does; yield it once ended, ``dagster dev`` stopped, the instance still open (and its
    PostgreSQL server up). ``dagster dev``'s log tail goes to stderr on any error."""
    port, log = free_port(), home / "dagster-dev.log"
    process, loads = None, []
    try:
        with instance_config(storage, home, stock_storage) as environment:
            os.environ.update({"DAGSTER_HOME": str(home), **environment})
            with dg.DagsterInstance.get() as instance:
                instance.add_dynamic_partitions(partitions, keys)
                process = start_dagster(home, port, log, env)
                status, elapsed, records, submitted = launch_backfill(
                    instance, port, selection, keys, timeout_s, loads)
                stop(process)
                process = None
                yield Backfill(instance, status, elapsed, records, submitted, loads)
    except BaseException:
        if log.exists():
            print(log.read_text()[-4000:], file=sys.stderr)
        raise
    finally:
        if process is not None:
            stop(process)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=1000,
                        help="repetitions in the tree and the backfill (default 1000)")
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite",
                        help="the instance's storage (default sqlite)")
    parser.add_argument("--event-batch-size", type=int, default=1000,
                        help="DAGSTER_EVENT_BATCH_SIZE of the webserver, daemon and runs "
                        "(default 1000; 0: off)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds to wait for the backfill (default 3600)")
    parser.add_argument("--stock-storage", action="store_true",
                        help="Dagster's own sqlite/postgres storage instead of deploy/'s "
                        "batching storage (resources/instance_storage.py)")
    args = parser.parse_args(argv)
    root = tree(args.repetitions)
    repetitions = repetition_keys(root)
    keys = sorted(days_of(repetitions, root))
    selection = sorted(defs.resolve_job_def(JOB_NAME).asset_layer.selected_asset_keys)
    home = Path(tempfile.mkdtemp(prefix="backfill-home-", dir=DATA))
    cli, _ = cli_seconds("energy", "gpu", str(root), "--format", "parquet",
                      "--out", str(home / "cli-energy.parquet"), "--quiet")
    print(f"joulehouse energy gpu over {len(repetitions)} repetitions: {cli:.1f} s")
    with backfilled(args.storage, home, PARTITIONS, keys, selection, {
            "JOULEHOUSE_GPU_DATA_ROOTS": str(root),
            "JOULEHOUSE_WAREHOUSE": str(home / "warehouse"),
            "DAGSTER_EVENT_BATCH_SIZE": str(args.event_batch_size)}, args.timeout,
            args.stock_storage) as done:
        status, elapsed, records = done.status, done.elapsed_s, done.records
        materialized = done.instance.get_materialized_partitions(ENERGY)
        kind = "Dagster's own storage" if args.stock_storage else "batching storage"
        print(f"{args.storage} ({kind}): status {status.value}: {len(records)} run(s) (limit "
              f"{MAX_RUNS}) in {elapsed:.1f} s from submission to completion: "
              f"{elapsed / cli:.1f} x the CLI's {cli:.1f} s; {done.other_runs()} other run(s)")
        overheads = []
        for record in records:
            report, overhead = run_report(done.instance, record, done.submitted)
            overheads.append(overhead)
            print(report)
        print(f"overhead per run (created to ended, minus time in steps): "
              f"{sum(overheads) / len(overheads):.1f} s on average; the backfill "
              f"daemon evaluates every 30 s")
        print(f"gpu_repetition_energy materialized for {len(materialized)} of "
              f"{len(keys)} day(s) ({len(repetitions)} repetitions)")
    print(load_summary(done.loads))
    print(f"machine: {describe(dg)}")
    if (status != BulkActionStatus.COMPLETED_SUCCESS or len(records) > MAX_RUNS
            or set(keys) - materialized):
        raise SystemExit(f"backfill benchmark failed; instance kept in {home}")
    shutil.rmtree(home, ignore_errors=True)  # a run the automation started may still write


if __name__ == "__main__":
    main()
