"""TAUdb load benchmarks on a throwaway PostgreSQL 15 server (tests/postgres_server.py).

0. Reading alone: the WRF set as text profiles and as ``wrf-callpath.ppk``
   (best of --repeat), no database.
1. The 16-rank WRF callpath set (peer-data ``tau2_wrf16_callpath_text_exported``),
   read and loaded into an empty schema; target <= 1 s (TAU's Java loader: 6.8 s
   on the machine of the issue).
2. A synthetic trial of one million timer values, loaded; then a bare COPY of
   the very timer_value rows the loader wrote (same binary payload in the
   loader's 1 MiB chunks, into the same table emptied by TRUNCATE as the
   loader found it, same index and foreign keys, same session settings,
   rolled back); target: the load at no less than half the speed of the bare
   COPY. Also against a second reference: a bare COPY of every row the load
   wrote, all thirteen tables (the trial's timer_call_data with its three
   indexes among them), so the ratio shows the loader's own overhead.

Both run twice: as the superuser ``postgres`` (the loader skips the per-row
foreign-key checks, see ``TaudbDatabase.skip_reference_checks``; the bare
COPY gets the same setting) and as an ordinary role owning its schema (every
check runs, for the load and for the bare COPY).

``--part delete`` instead: replacing one trial (``load_trial`` of a stored
source key: delete its rows, then load it) with 10 and with 1,000 (``--stored``)
small synthetic trials stored, in two schemas of the same server, one with
Joulehouse's delete indexes (``schema.INDEXES`` but the lookup index) and one
without them (dropped as soon as the schema is made; this process made sure of
its indexes then, so loading does not add them again), vacuumed and analysed
once stored. Per replace: wall seconds, the CPU seconds of this process and of
its PostgreSQL backend (``/proc``; a machine shared with other work slows the
wall clock, not these) and the rows read by sequential scans (from
``pg_stat_user_tables``); and the bulk load of the stored trials (wall, backend
CPU), which pays for writing the indexes. As superuser: the deletes run before
the loader skips the foreign-key checks, so they check them.

Run: ``.venv/bin/python benchmarks/taudb_load.py [--repeat N] [--part delete]``.
Prints the figures and the machine; record them in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg2
from sqlalchemy.engine import make_url

from joulehouse.taudb.connect import COPY_CHUNK, TaudbDatabase
from joulehouse.taudb.loader import COLUMNS, load_prepared, load_trial, prepare_trial
from joulehouse.taudb.model import DATA_SOURCE_OTHER, THREAD_COLUMNS, TrialData
from joulehouse.taudb.read import read_trial_source
from joulehouse.taudb.schema import INDEXES, LOOKUP_INDEX, ensure_schema

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from machine import cpu_seconds, describe, load_average
from postgres_server import PG_BIN, throwaway_postgres

PROFILES = ROOT.parent / "shared" / "peer-data" / "tau" / "profiles"
WRF = PROFILES / "tau2_wrf16_callpath_text_exported"
WRF_PPK = PROFILES / "tau2_ppk_examples" / "wrf-callpath.ppk"
TAU_JAVA_SECONDS = 6.8
#: The synthetic trial's (threads, timers, metrics) per part: one million timer values to
#: load; small trials, many stored, to replace.
SHAPES = {"load": (64, 3907, 4), "delete": (2, 100, 2)}
#: Trials stored per bulk load of ``--part delete`` (one transaction each).
STORE_BATCH = 100


def synthetic_trial(threads: int, timers: int, metrics: int) -> TrialData:
    """A flat trial with every timer on every thread: threads * timers * metrics values."""
    rng = np.random.default_rng(42)
    ranks = pd.DataFrame({"node_rank": np.arange(threads), "context_rank": 0, "thread_rank": 0})
    names = np.array([f"timer_{i:06d}() [{{src.c}} {{{i},1}}-{{{i + 9},1}}]"
                      for i in range(timers)], dtype=object)
    entries = ranks.loc[ranks.index.repeat(timers)].reset_index(drop=True)
    entries["name"] = np.tile(names, threads)
    entries["group_names"] = "TAU_USER"
    entries["calls"] = rng.integers(1, 1000, len(entries)).astype(float)
    entries["subroutines"] = rng.integers(0, 10, len(entries)).astype(float)
    metric_names = ["TIME"] + [f"PAPI_{i}" for i in range(1, metrics)]
    values = entries.loc[entries.index.repeat(metrics), THREAD_COLUMNS + ["name"]]
    values = values.reset_index(drop=True)
    values["metric"] = np.tile(metric_names, len(entries))
    values["exclusive"] = rng.random(len(values)) * 1e6
    values["inclusive"] = values["exclusive"] * (1 + rng.random(len(values)))
    return TrialData(
        name="synthetic", data_source=DATA_SOURCE_OTHER, metrics=metric_names, threads=ranks,
        timers=entries, timer_values=values,
        counters=pd.DataFrame(columns=THREAD_COLUMNS + ["name", "sample_count", "maximum",
                                                        "minimum", "mean", "sum_squares"]),
        metadata=pd.DataFrame({**{c: ranks[c] for c in THREAD_COLUMNS}, "name": "pid",
                               "value": ranks["node_rank"].astype(str)}),
        source_key="synthetic", fingerprint="0")


def _user(url: str) -> str:
    return make_url(url).username


def bench_read(repeat: int) -> None:
    """Print the best seconds to read the WRF set, as text profiles and as a .ppk."""
    for label, path in (("text", WRF), (".ppk", WRF_PPK)):
        seconds = []
        for _ in range(repeat):
            start = time.perf_counter()
            read_trial_source(path)
            seconds.append(time.perf_counter() - start)
        print(f"WRF 16 ranks, read only ({label}): best {min(seconds):.3f} s, "
              f"median {statistics.median(seconds):.3f} s over {repeat} runs")


def bench_wrf(url: str, repeat: int) -> list[float]:
    """Seconds to read the WRF set and load it into a fresh schema, per run."""
    seconds = []
    for run in range(repeat):
        with TaudbDatabase(url, f"wrf_{_user(url)}_{run}") as db:
            ensure_schema(db)  # an existing database, as in use
            start = time.perf_counter()
            load_trial(db, read_trial_source(WRF))
            seconds.append(time.perf_counter() - start)
    return seconds


def bare_copy_of_every_table(db: TaudbDatabase) -> float:
    """Seconds to COPY back every row of the schema's one trial into its emptied tables.

    The rows are read out first (binary COPY, in the loader's table order,
    which respects the foreign keys), the tables emptied together, the rows
    copied back in the loader's chunks and the transaction rolled back.
    """
    cursor = db.connection.cursor()
    payloads = {}
    for table, columns in COLUMNS.items():
        payloads[table] = io.BytesIO()
        cursor.copy_expert(f"COPY (SELECT {', '.join(columns)} FROM {table}) TO STDOUT "
                           "WITH (FORMAT binary)", payloads[table])
        payloads[table].seek(0)
    db.connection.commit()
    db.skip_reference_checks(cursor)  # the loader's session setting, if any
    cursor.execute(f"TRUNCATE {', '.join(COLUMNS)} CASCADE")  # + the empty analysis_settings
    start = time.perf_counter()
    for table, columns in COLUMNS.items():
        cursor.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH "
                           "(FORMAT binary)", payloads[table], size=COPY_CHUNK)
    seconds = time.perf_counter() - start
    db.connection.rollback()
    return seconds


def bench_million(url: str, repeat: int, threads: int, timers: int,
                  metrics: int) -> list[tuple[float, float, float, int]]:
    """Per run: (load seconds, bare COPY seconds of the timer_value rows, bare COPY seconds
    of every row, timer_value rows) of the synthetic trial."""
    trial = synthetic_trial(threads, timers, metrics)
    results = []
    for run in range(repeat):
        with TaudbDatabase(url, f"million_{_user(url)}_{run}") as db:
            ensure_schema(db)
            start = time.perf_counter()
            trial_id = load_trial(db, trial)
            load = time.perf_counter() - start
            columns = ("timer_call_data, metric, inclusive_value, exclusive_value, "
                       "inclusive_percent, exclusive_percent")
            payload = io.BytesIO()
            cursor = db.connection.cursor()
            cursor.copy_expert(
                f"COPY (SELECT {columns} FROM timer_value v JOIN timer_call_data d "
                "ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
                f"WHERE h.trial = {trial_id}) TO STDOUT WITH (FORMAT binary)", payload)
            rows = cursor.rowcount
            db.connection.commit()
            payload.seek(0)
            db.skip_reference_checks(cursor)  # the loader's session setting, if any
            cursor.execute("TRUNCATE timer_value")  # empty, as the load found it
            start = time.perf_counter()
            cursor.copy_expert(f"COPY timer_value ({columns}) FROM STDIN WITH (FORMAT binary)",
                               payload, size=COPY_CHUNK)
            bare = time.perf_counter() - start
            db.connection.rollback()
            results.append((load, bare, bare_copy_of_every_table(db), rows))
    return results


def _rows_scanned(db: TaudbDatabase) -> int:
    """Rows read by sequential scans of ``db``'s schema's tables so far, this session's
    statistics flushed first (PostgreSQL 15)."""
    db.query("SELECT pg_stat_force_next_flush()")  # flushed once this transaction ends
    return int(db.query("SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables "
                        "WHERE schemaname = ?", (db.schema,))[0][0])


@dataclasses.dataclass
class Replace:
    """One replace: wall seconds, CPU seconds of this process and of its PostgreSQL
    backend (a machine shared with other work slows the wall clock, not these), and rows
    read by sequential scans."""

    wall: float
    client_cpu: float
    server_cpu: float
    scanned: int


def bench_delete(url: str, stored: int, repeat: int, indexed: bool,
                 trial: TrialData) -> tuple[float, float, list[Replace]]:
    """(wall and PostgreSQL CPU seconds to store ``stored`` copies of ``trial``, each its
    own source key, in a new schema; one :class:`Replace` per run of replacing one of
    them), with or without Joulehouse's delete indexes."""
    with TaudbDatabase(url, f"delete_{stored}_{'with' if indexed else 'without'}") as db:
        ensure_schema(db)
        if not indexed:
            with db.transaction() as cursor:
                for name in INDEXES.keys() - {LOOKUP_INDEX}:
                    cursor.execute(f"DROP INDEX {name}")
        backend = db.query("SELECT pg_backend_pid()")[0][0]
        start, server = time.perf_counter(), cpu_seconds(backend)
        for first in range(0, stored, STORE_BATCH):
            load_prepared(db, [prepare_trial(dataclasses.replace(trial, source_key=f"s{i}"))
                               for i in range(first, min(first + STORE_BATCH, stored))])
        store, store_cpu = time.perf_counter() - start, cpu_seconds(backend) - server
        db.connection.autocommit = True  # VACUUM runs outside a transaction
        db.connection.cursor().execute("VACUUM ANALYZE")  # no autovacuum left to run
        db.connection.autocommit = False
        again = dataclasses.replace(trial, source_key=f"s{stored // 2}")
        runs = []
        for _ in range(repeat):
            scanned, server = _rows_scanned(db), cpu_seconds(backend)
            start, client = time.perf_counter(), time.process_time()
            load_trial(db, again)
            wall, client = time.perf_counter() - start, time.process_time() - client
            server = cpu_seconds(backend) - server
            runs.append(Replace(wall, client, server, _rows_scanned(db) - scanned))
        return store, store_cpu, runs


def report_delete(url: str, args: argparse.Namespace) -> None:
    trial = synthetic_trial(args.threads, args.timers, args.metrics)
    rows = (args.threads + 7) * args.timers * args.metrics
    print(f"[delete] each trial: {args.threads} threads x {args.timers} timers x "
          f"{args.metrics} metrics ({rows} timer_value rows with the derived threads)")
    for stored in args.stored:
        for indexed in (False, True):
            store, store_cpu, runs = bench_delete(url, stored, args.repeat, indexed, trial)
            median = {field: statistics.median(getattr(r, field) for r in runs)
                      for field in ("wall", "client_cpu", "server_cpu", "scanned")}
            walls = ", ".join(f"{r.wall:.3f}" for r in runs)
            print(f"[delete] {stored} trials stored, {'with' if indexed else 'without'} "
                  f"the delete indexes, replace one trial (medians): PostgreSQL CPU "
                  f"{median['server_cpu']:.2f} s, client CPU {median['client_cpu']:.2f} s, "
                  f"rows read by sequential scans {median['scanned']:,.0f}, wall "
                  f"{median['wall']:.3f} s (runs {walls}); storing them took {store:.1f} s, "
                  f"PostgreSQL CPU {store_cpu:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    for name in ("threads", "timers", "metrics"):
        parser.add_argument(f"--{name}", type=int, help="the synthetic trial's; default by part")
    parser.add_argument("--part", choices=["load", "delete"], default="load")
    parser.add_argument("--stored", type=int, nargs="+", default=[10, 1000],
                        help="--part delete: trials stored before replacing one")
    args = parser.parse_args()
    for name, default in zip(("threads", "timers", "metrics"), SHAPES[args.part]):
        if getattr(args, name) is None:
            setattr(args, name, default)
    server = subprocess.run([str(PG_BIN / "postgres"), "--version"], check=True,
                            capture_output=True, text=True).stdout.strip()
    print(describe(pd, np, psycopg2, extra=server))
    print(f"load average at start: {load_average()}")
    if args.part == "delete":
        with throwaway_postgres("bench") as url:
            report_delete(url, args)
        print(f"load average at end: {load_average()}")
        return
    bench_read(args.repeat)
    with throwaway_postgres("bench") as url:
        with psycopg2.connect(url) as admin, admin.cursor() as cursor:
            cursor.execute("CREATE ROLE loader LOGIN; GRANT CREATE ON DATABASE bench TO loader")
        for role, role_url in [("superuser", url), ("ordinary role", url.replace(
                "postgres@", "loader@"))]:
            report(role, role_url, args)
    print(f"load average at end: {load_average()}")


def report(role: str, url: str, args: argparse.Namespace) -> None:
    wrf = bench_wrf(url, args.repeat)
    best = min(wrf)
    print(f"[{role}] WRF 16 ranks, read + load: median {statistics.median(wrf):.3f} s, best "
          f"{best:.3f} s over {len(wrf)} runs; TAU's Java loader {TAU_JAVA_SECONDS} s -> "
          f"{TAU_JAVA_SECONDS / statistics.median(wrf):.1f}x faster (median)")
    million = bench_million(url, args.repeat, args.threads, args.timers, args.metrics)
    for load, bare, every, rows in million:
        print(f"  run: load {load:.3f} s, bare COPY {bare:.3f} s ({rows} timer_value rows), "
              f"bare COPY of every table {every:.3f} s")
    load, bare, every = (statistics.median(m[i] for m in million) for i in range(3))
    rows = million[0][3]
    print(f"[{role}] synthetic trial, {args.threads * args.timers * args.metrics} timer values "
          f"({args.threads} threads x {args.timers} timers x {args.metrics} metrics; {rows} "
          f"timer_value rows with the derived threads): load {load:.3f} s = "
          f"{rows / load:,.0f} rows/s; bare COPY {bare:.3f} s = {rows / bare:,.0f} rows/s; "
          f"load speed / COPY speed = {bare / load:.2f} (median); against a bare COPY of "
          f"every table ({every:.3f} s): {every / load:.2f}")


if __name__ == "__main__":
    main()
