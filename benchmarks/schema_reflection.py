"""What Dagster's schema checks cost the production instance storage, with and without the
kept True answers of ``resources/instance_storage.py`` (``_KeptTrue``).

Against a throwaway PostgreSQL server (``tests/postgres_server.py``), through deploy/'s
``BatchingPostgresStorage``, N times each part:

- ``sensor``: a sensor tick's instigator state read and its cursor written (the schedule
  storage: ``get_instigator_state``, ``update_instigator_state``);
- ``events``: an asset materialization stored and the asset's record read (the event log:
  ``store_event``, ``get_asset_records``, which asks whether the status cache's column is
  there; dagster-postgres's ``store_event`` itself asks nothing);
- ``runs``: a run added and started (the run storage: ``add_run``, ``handle_run_event``).

For each: the statements sent (all, and SQLAlchemy's reflection ones: PostgreSQL's
catalog), this process's CPU seconds, PostgreSQL's CPU seconds (the postmaster's own, its
ended backends' and its live processes', from /proc), and the wall time. ``asked`` is the
storage with every check asked each time (Dagster's behaviour), ``kept`` this project's.
Each storage is made on a new database of the same server, the parts run in turn, modes
alternated over ``--rounds``.

Run: ``nice -n 19 .venv/bin/python benchmarks/schema_reflection.py [--n 200] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine import cpu_seconds, describe, load_average, parent_pid
from postgres_server import missing_requirement, postgres_server

from resources import instance_storage
from resources.instance_storage import BatchingPostgresStorage
from tests.dagster.test_instance_storage import materialized, sensor_state

REFLECTION = re.compile(r"pg_catalog\.", re.IGNORECASE)
ASSET = dg.AssetKey("gpu_validated_frames")


def sensor(storage, n: int) -> None:
    schedules = storage.schedule_storage
    state = schedules.add_instigator_state(sensor_state("start"))
    for i in range(n):
        schedules.get_instigator_state(state.instigator_origin_id, state.selector_id)
        schedules.update_instigator_state(sensor_state(str(i)))


def events(storage, n: int) -> None:
    for i in range(n):
        storage.event_log_storage.store_event(
            materialized(ASSET, f"lab/power-limit/bert/150W/{i % 50}", "1"))
        storage.event_log_storage.get_asset_records([ASSET])


def runs(storage, n: int) -> None:
    for _ in range(n):
        run = storage.run_storage.add_run(dg.DagsterRun(job_name="gpu_energy_job",
                                                        run_id=str(uuid.uuid4())))
        storage.run_storage.handle_run_event(run.run_id, dg.DagsterEvent(
            dg.DagsterEventType.RUN_START.value, "gpu_energy_job"))


PARTS = {"sensor": sensor, "events": events, "runs": runs}


def server_cpu(postmaster: int) -> float:
    """PostgreSQL's CPU seconds so far: the postmaster's, its reaped children's (every
    backend of a NullPool connection, once closed) and its live children's."""
    seconds = cpu_seconds(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent_pid(int(entry.name)) == postmaster:
                    seconds += cpu_seconds(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile: counted in the postmaster's children
    return seconds


def measure(server, mode: str, part: str, n: int, round_: int) -> dict:
    url = server.create_database(f"reflect_{mode}_{part}_{round_}").replace(
        "postgresql://", "postgresql+psycopg2://")
    storage = BatchingPostgresStorage(url)
    statements = []

    def count(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        cpu, server_before, wall = time.process_time(), server_cpu(postmaster), time.perf_counter()
        PARTS[part](storage, n)
        wall = time.perf_counter() - wall
        server_after = server_cpu(postmaster)
        cpu = time.process_time() - cpu
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
        for part_storage in (storage.run_storage, storage.event_log_storage,
                             storage.schedule_storage):
            part_storage.dispose()
    return {"mode": mode, "part": part, "n": n, "statements": len(statements),
            "reflection": sum(1 for s in statements if REFLECTION.search(s)),
            "client_cpu_s": cpu, "server_cpu_s": server_after - server_before, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    args = parser.parse_args()
    if reason := missing_requirement():
        sys.exit(reason)
    print(describe(dg, sa, extra=f"load {load_average()}"))
    asked_each_time = lambda self, key, ask, *a: ask(*a)
    kept = instance_storage._KeptTrue._kept_true
    print("| part | storage | N | statements | reflection | client CPU s | PostgreSQL CPU s "
          "| wall s |\n|---|---|---:|---:|---:|---:|---:|---:|")
    with postgres_server() as server:
        # one storage made and dropped first: the process's first-time costs left out
        measure(server, "warm", "events", 1, 0)
        for round_ in range(args.rounds):
            for part in args.parts:
                modes = ("asked", "kept") if round_ % 2 == 0 else ("kept", "asked")
                for mode in modes:
                    instance_storage._KeptTrue._kept_true = (
                        kept if mode == "kept" else asked_each_time)
                    try:
                        r = measure(server, mode, part, args.n, round_)
                    finally:
                        instance_storage._KeptTrue._kept_true = kept
                    print(f"| {r['part']} | {r['mode']} | {r['n']} | {r['statements']} "
                          f"| {r['reflection']} | {r['client_cpu_s']:.2f} "
                          f"| {r['server_cpu_s']:.2f} | {r['wall_s']:.1f} |", flush=True)
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
