"""Benchmark: which table layout holds a decade of entries (issue 28), on a path and on S3.

An *entry* is what one Dagster partition lands today: a GPU repetition, a GEOPM report,
a PowerAPI file. Two kinds of per-entry frame are measured:

- ``facts``: an entry's ``energy_facts`` rows (4 a GPU repetition: gpu by counter, power
  and samples, external), checked against ENERGY_FACTS_SCHEMA;
- ``frames``: a per-entry frame of ``FRAME_ROWS`` rows (a GPU power frame's columns).

Entries land ``--per-day`` a day (1,000: the issue's GEOPM rate) in key order, their key
``lab/power-limit/bert/<day>/<entry>``, their windows in that UTC day. Three layouts
hold the same rows, each built from ``--entries`` stored entries (not timed):

- ``files``: today's layout, one Parquet file per entry (``Warehouse.write_partition``);
- ``segments``: hand-compacted Parquet segments, one per UTC day (a ``Warehouse``
  partition per day, replaced atomically; an entry's day is read from its key), a
  segment rewritten whole when an entry of it changes;
- ``delta``: a table kept per entry (a Delta Lake table) through the shipped code,
  ``Warehouse.write_entries``/``remove_entries``/``read_table``: the history landed one
  write per day; landing, fixing and removing entries are overwrites by the predicate
  ``"source" = '...' AND "entity" IN (...)`` (figures before this change: the benchmark
  appended new entries and replaced by ``entity = '<key>'``).

Then, timed on each: landing 10 new entries (today's day), landing 100 more, replacing 1
old entry (a fix),
removing 1 old entry, reading the whole table into pandas, and two DuckDB queries as
``joulehouse sql`` runs them, without network extensions (``read_parquet`` over the files
on a path, a pyarrow dataset registered with DuckDB on S3; for Delta, over the files
its log lists): an aggregate over every row and one entry's rows. On S3 (moto's server,
as ``tests/object_store.py`` starts it) each step's requests are counted from the
server's log. After the steps every layout must hold the same rows. For Delta, the
compaction (``optimize.compact``) and the ``vacuum`` that removes what it replaced are
timed last.

``--part atomic`` shows what a failed write leaves: a write that raises half-way and a
writer killed (SIGKILL) half-way, on each layout, then the table read again.

Run: ``.venv/bin/python benchmarks/table_format.py --entries 1000 100000 --kind facts
--store path s3``. moto is a single-process Python server holding objects in memory:
its figures are the protocol's cost (requests, their count) on a slow server.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import deltalake
import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from machine import describe, load_average
from object_store import ObjectStoreServer, throwaway_object_store

from joulehouse import entry_table
from joulehouse.accounting.query import create_view
from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.warehouse import SUFFIX, Warehouse, partition_file_name

START = pd.Timestamp("2025-01-01", tz="UTC")
FRAME_ROWS = 300
NEW_ENTRIES = 10
#: Entries landed at once in a second landing step (a large sensor tick).
MANY_NEW_ENTRIES = 100
#: Every entry's scope (its source).
SCOPE = {"source": "gpu-benchmark"}
#: (component, method) of a GPU repetition's facts.
FACT_ROWS = [("gpu", "counter"), ("gpu", "power"), ("gpu", "samples"), ("external", "external")]
VALUE = {"facts": "energy_j", "frames": "power_w"}


# --- the entries ----------------------------------------------------------------------

def entity(index: int, per_day: int) -> str:
    """Entry ``index``'s key; its UTC day is part of it (see :func:`day_of`). The first
    day holds half a day's entries, so the newest stored day is still filling."""
    return f"lab/power-limit/bert/{(index + per_day // 2) // per_day:05d}/{index:08d}"


def day_of(key: str) -> str:
    """The day segment of entry ``key``."""
    return key.split("/")[3]


def entries(kind: str, first: int, count: int, per_day: int, scale: float = 1.0) -> pd.DataFrame:
    """Rows of entries ``first`` .. ``first + count - 1``, in key order; ``scale``
    multiplies the values (a fix)."""
    index = np.arange(first, first + count)
    keys = np.array([entity(i, per_day) for i in index], dtype=object)
    # in whole microseconds, as the sources' clocks give them (Delta Lake keeps no more)
    start = START + pd.to_timedelta((index + per_day // 2) * (86_400.0 / per_day),
                                    unit="s").round("us")
    if kind == "facts":
        n = len(FACT_ROWS)
        duration = 30.0 + (index % 50)
        power = 150.0 + (index % 97)
        frame = pd.DataFrame({
            "source": SCOPE["source"],
            "entity": np.repeat(keys, n),
            "component": np.tile([c for c, _ in FACT_ROWS], count),
            "window_start": np.repeat(start, n),
            "window_end": np.repeat(start + pd.to_timedelta(duration, unit="s"), n),
            "duration_s": np.repeat(duration, n),
            "energy_j": np.repeat(power * duration, n) * np.tile([1.0, 0.99, 1.01, 1.3], count)
            * scale,
            "method": np.tile([m for _, m in FACT_ROWS], count),
        }, columns=ENERGY_FACTS_COLUMNS)
        return ENERGY_FACTS_SCHEMA.validate(frame)
    step = pd.to_timedelta(np.tile(np.arange(FRAME_ROWS) * 100_000, count), unit="us")
    phase = np.tile(np.sin(np.arange(FRAME_ROWS) / 7.0), count)
    return pd.DataFrame({
        "source": SCOPE["source"],
        "entity": np.repeat(keys, FRAME_ROWS),
        "time": np.repeat(start, FRAME_ROWS) + step,
        "power_w": (200.0 + 50.0 * phase) * scale,
        "total_energy_j": np.repeat(index * 1e4, FRAME_ROWS) + np.tile(np.arange(FRAME_ROWS)
                                                                        * 20.0, count),
        "util_gpu_pct": 90.0 + 5.0 * phase,
        "clock_sm_mhz": 1410.0,
        "temperature_c": 60.0 + phase,
    })


# --- the layouts ----------------------------------------------------------------------

class Files:
    """Today's layout: one Parquet file per entry, replaced atomically."""

    name = "files"

    def __init__(self, warehouse: Warehouse, table: str) -> None:
        self.warehouse, self.table = warehouse, table

    def bulk(self, frame: pd.DataFrame) -> None:
        """One file per entry; on a path written in place without fsync (setup only)."""
        if not self.warehouse.is_local:
            return self.land(frame)
        folder = Path(self.warehouse.table_path(self.table))
        folder.mkdir(parents=True, exist_ok=True)
        for key, rows in frame.groupby("entity", sort=False):
            pq.write_table(pa.Table.from_pandas(rows, preserve_index=False),
                           folder / partition_file_name(key))
        return None

    def land(self, frame: pd.DataFrame) -> None:
        for key, rows in frame.groupby("entity", sort=False):
            self.warehouse.write_partition(self.table, key, rows)

    def replace(self, key: str, rows: pd.DataFrame) -> None:
        self.warehouse.write_partition(self.table, key, rows)

    def remove(self, key: str) -> None:
        self.warehouse.remove_partition(self.table, key)

    def files(self) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self.warehouse.table_path(self.table), allow_not_found=True)
        return sorted((i for i in self.warehouse.filesystem.get_file_info(selector)
                       if i.type == pafs.FileType.File and i.path.endswith(SUFFIX)
                       and not i.base_name.startswith((".", "_"))), key=lambda i: i.path)

    def read(self) -> pd.DataFrame:
        return self.warehouse.read_table(self.table)

    def objects(self) -> int:
        return len(self.files())


class Segments(Files):
    """Hand-compacted segments: one Parquet file per UTC day, rewritten whole (atomically)
    when an entry of it lands, changes or goes."""

    name = "segments"

    def bulk(self, frame: pd.DataFrame) -> None:
        for day, rows in frame.groupby(frame["entity"].map(day_of), sort=False):
            self.warehouse.write_partition(self.table, day, rows)

    def land(self, frame: pd.DataFrame) -> None:
        for day, rows in frame.groupby(frame["entity"].map(day_of), sort=False):
            stored = self._stored(day)
            kept = stored[~stored["entity"].isin(rows["entity"])]
            self.warehouse.write_partition(
                self.table, day, pd.concat([kept, rows], ignore_index=True) if len(kept) else rows)

    def replace(self, key: str, rows: pd.DataFrame) -> None:
        self.land(rows)

    def remove(self, key: str) -> None:
        stored = self._stored(day_of(key))
        self.warehouse.write_partition(self.table, day_of(key),
                                       stored[stored["entity"] != key])

    def _stored(self, day: str) -> pd.DataFrame:
        if not self.warehouse.has_partition(self.table, day):
            return pd.DataFrame({"entity": pd.Series([], dtype=object)})
        return self.warehouse.read_partitions(self.table, [day])


class Delta:
    """A table kept per entry (a Delta Lake table) through the shipped code:
    ``Warehouse.write_entries`` (an overwrite by the predicate ``<scope> AND entity IN
    (...)``, landings included), ``remove_entries``, ``read_table``, ``entry_table.files``
    and ``entry_table.compact``, each write one commit. ``open`` and ``options`` serve the
    failed-write and racing parts, which drive deltalake directly."""

    name = "delta"

    def __init__(self, warehouse: Warehouse, table: str, options: dict[str, str]) -> None:
        self.warehouse, self.table, self.options = warehouse, table, options
        self.uri = (warehouse.table_path(table) if warehouse.is_local
                    else f"{warehouse.url}/{table}")

    def open(self) -> deltalake.DeltaTable:
        return deltalake.DeltaTable(self.uri, storage_options=self.options)

    def bulk(self, frame: pd.DataFrame) -> None:
        for _, rows in frame.groupby(frame["entity"].map(day_of), sort=False):
            self.land(rows)

    def land(self, frame: pd.DataFrame) -> None:
        self.warehouse.write_entries(self.table, frame, SCOPE)

    def replace(self, key: str, rows: pd.DataFrame) -> None:
        self.warehouse.write_entries(self.table, rows, SCOPE)

    def remove(self, key: str) -> None:
        self.warehouse.remove_entries(self.table, SCOPE, [key])

    def files(self) -> list[pafs.FileInfo]:
        """The data files the current version holds (its log's add actions), with sizes."""
        return entry_table.files(self.warehouse, self.table)

    def dataset(self) -> ds.Dataset:
        """The current version's files as a pyarrow dataset, in the table's schema (files
        deltalake rewrote through DataFusion store their strings as ``string_view``)."""
        parquet, filesystem = ds.ParquetFileFormat(), self.warehouse.filesystem
        fragments = [parquet.make_fragment(f.path, filesystem, file_size=f.size)
                     for f in self.files()]
        schema = pa.schema(self.open().schema().to_arrow())
        return ds.FileSystemDataset(fragments, schema, parquet, filesystem)

    def read(self) -> pd.DataFrame:
        return self.warehouse.read_table(self.table)

    def objects(self) -> int:
        """Every object under the table: data files (current or not) and the log."""
        selector = pafs.FileSelector(self.warehouse.table_path(self.table), recursive=True)
        return sum(i.type == pafs.FileType.File
                   for i in self.warehouse.filesystem.get_file_info(selector))

    def compact(self) -> dict[str, int]:
        return entry_table.compact(self.warehouse, self.table)


def _arrow(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False)


def delta_options(server: ObjectStoreServer | None, commit: str) -> dict[str, str]:
    """deltalake's storage options for moto: its endpoint and credentials, and how commits
    are made safe (``commit``: "conditional" = conditional PUT, If-None-Match, set as
    ``ObjectStore.delta_options`` sets it; "unsafe" = ``AWS_S3_ALLOW_UNSAFE_RENAME``, a
    single writer only)."""
    if server is None:
        return {}
    options = server.store.delta_options()
    if commit == "unsafe":
        del options["AWS_CONDITIONAL_PUT"]
        options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


# --- measuring ------------------------------------------------------------------------

class Requests:
    """Counts the object store's requests by method, from moto's log (None: a path)."""

    def __init__(self, log: Path | None) -> None:
        self.log, self.offset = log, 0

    def take(self) -> Counter:
        """The requests since the last call."""
        if self.log is None:
            return Counter()
        with open(self.log, "rb") as log:
            log.seek(self.offset)
            text = log.read()
            self.offset = log.tell()
        text = re.sub(rb"\x1b\[[0-9;]*m", b"", text)  # werkzeug colours the lines
        return Counter(line.split(b'"', 2)[1].split(b" ", 1)[0].decode()
                       for line in text.splitlines() if line.count(b'"') >= 2
                       and b"HTTP/1" in line)


def _requests(counts: Counter) -> str:
    if not counts:
        return ""
    return f"{sum(counts.values()):,} ({' '.join(f'{m} {n:,}' for m, n in sorted(counts.items()))})"


def steps(layout, kind: str, stored: int, per_day: int) -> list[tuple[str, Callable]]:
    """The timed steps, each (label, work); work returns a figure to check or None."""
    fixed, removed = entity(stored // 2, per_day), entity(stored // 3, per_day)
    value = VALUE[kind]
    new = entries(kind, stored, NEW_ENTRIES, per_day)
    many = entries(kind, stored + NEW_ENTRIES, MANY_NEW_ENTRIES, per_day)
    fix = entries(kind, stored // 2, 1, per_day, scale=1.01)

    def query(sql: str):
        connection = duckdb.connect(":memory:")
        if isinstance(layout, Delta) and not layout.warehouse.is_local:
            connection.register("t", layout.dataset())
        else:
            create_view(connection, layout.warehouse, "t", layout.files(), "t_dataset")
        return connection.sql(sql).fetchall()

    return [
        (f"land {NEW_ENTRIES} new entries", lambda: layout.land(new)),
        (f"land {MANY_NEW_ENTRIES} new entries", lambda: layout.land(many)),
        ("replace 1 entry (a fix)", lambda: layout.replace(fixed, fix)),
        ("remove 1 entry", lambda: layout.remove(removed)),
        ("read the whole table (pandas)", lambda: len(layout.read())),
        ("DuckDB: sum over every row",
         lambda: query(f"SELECT count(*), round(sum({value}), 3) FROM t")[0]),
        ("DuckDB: one entry's rows",
         lambda: len(query(f"SELECT * FROM t WHERE entity = '{fixed}'"))),
    ]


def measure(layouts: list, kind: str, stored: int, per_day: int, requests: Requests) -> None:
    history = entries(kind, 0, stored, per_day)
    print(f"\n{kind}, {stored:,} entries stored ({len(history):,} rows):")
    for layout in layouts:
        requests.take()
        start = time.perf_counter()
        layout.bulk(history)
        print(f"  {layout.name}: built in {time.perf_counter() - start:.1f} s "
              f"(not a step), {layout.objects():,} objects")
    del history
    results: dict[str, list] = {}
    for layout in layouts:
        print(f"  -- {layout.name}")
        for label, work in steps(layout, kind, stored, per_day):
            requests.take()
            wall, cpu = time.perf_counter(), time.process_time()
            result = work()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            counts = requests.take()
            print(f"    {label:<32} {wall:8.3f} s wall {cpu:7.3f} s cpu  {_requests(counts)}")
            results.setdefault(label, []).append(result)
        print(f"    files read by a query: {len(layout.files()):,}; objects: {layout.objects():,}")
    for label, values in results.items():
        assert all(v == values[0] for v in values), f"{label}: the layouts differ: {values}"
    order = ["entity", *(["time"] if kind == "frames" else ["component", "method"])]
    frames = [_ns(layout.read()).sort_values(order).reset_index(drop=True)
              for layout in layouts]
    for layout, frame in zip(layouts[1:], frames[1:]):
        pd.testing.assert_frame_equal(frame, frames[0], check_dtype=False,
                                      obj=f"{layout.name} against {layouts[0].name}")
    print(f"  every layout holds the same {len(frames[0]):,} rows")
    for layout in layouts:
        if isinstance(layout, Delta):
            requests.take()
            start = time.perf_counter()
            figures = layout.compact()
            print(f"  delta: entry_table.compact {time.perf_counter() - start:.2f} s "
                  f"{_requests(requests.take())} {figures}; then {len(layout.files()):,} "
                  f"files, {layout.objects():,} objects")


def _ns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its timestamps in ns (Delta Lake stores microseconds)."""
    for name in frame.columns:
        if isinstance(frame[name].dtype, pd.DatetimeTZDtype):
            frame[name] = frame[name].dt.as_unit("ns")
    return frame


def _layouts(warehouse: Warehouse, prefix: str, options: dict[str, str]) -> list:
    return [Files(warehouse, f"{prefix}/files"), Segments(warehouse, f"{prefix}/segments"),
            Delta(warehouse, f"{prefix}/delta", options)]


# --- a failed write -------------------------------------------------------------------

WRITER = """
import os, signal, sys
sys.path[:0] = {paths!r}
from table_format import Delta, Files, Segments, write_failing
from joulehouse.warehouse import ObjectStore, Warehouse
warehouse = Warehouse({url!r}, ObjectStore(**{store!r}) if {store!r} else None)
kinds = {{"files": Files, "segments": Segments}}
layout = (kinds[{name!r}](warehouse, {table!r}) if {name!r} in kinds
          else Delta(warehouse, {table!r}, {options!r}))
write_failing(layout, lambda: os.kill(os.getpid(), signal.SIGKILL))
"""
FAILING_ENTRIES = 2_000


class Halfway(RuntimeError):
    """Raised by a write half-way through."""


def halfway() -> None:
    raise Halfway("the write fails half-way")


def write_failing(layout, fail: Callable[[], None]) -> None:
    """Land ``FAILING_ENTRIES`` entries with new values (the stored ones among them),
    calling ``fail`` (it raises, or kills the process) half-way through the write: for
    Delta after half the stream's batches, data files of 1 MiB flushed as they fill; for
    the Parquet layouts with half the first file's rows written to its sink."""
    frame = entries("frames", 0, FAILING_ENTRIES, 1000, scale=2.0)
    if isinstance(layout, Delta):
        table = _arrow(frame)

        def stream() -> Iterator[pa.RecordBatch]:
            for number, batch in enumerate(table.to_batches(max_chunksize=len(table) // 4)):
                if number == 2:
                    fail()
                yield batch
        deltalake.write_deltalake(
            layout.uri, pa.RecordBatchReader.from_batches(table.schema, stream()),
            mode="append", target_file_size=1 << 20, storage_options=layout.options)
        return

    def half(table: pa.Table, sink, **_) -> None:  # stands for pq.write_table
        writer = pq.ParquetWriter(sink, table.schema)
        try:
            writer.write_table(table.slice(0, len(table) // 2))
            fail()
        finally:
            writer.close()
    with mock.patch("joulehouse.warehouse.pq.write_table", half):
        layout.land(frame)


def racing_commits(warehouse: Warehouse, options: dict[str, str]) -> None:
    """Two table handles loaded at version 0 commit an append each: the second must
    commit version 2, not overwrite version 1 (no append lost). deltalake refreshes a
    handle before it commits, so this shows no conflicting put of one version: it does
    not tell which commit mechanism would guard a true race."""
    layout = Delta(warehouse, "racing", options)
    layout.land(entries("facts", 0, 1, 1000))
    first, second = layout.open(), layout.open()  # both at version 0
    for number, writer in enumerate((first, second), start=1):
        deltalake.write_deltalake(writer, _arrow(entries("facts", number, 1, 1000)),
                                  mode="append")
    table = layout.open()
    print(f"  two writers from version 0: now version {table.version()}, "
          f"{len(layout.read())} rows (4 an entry; 12: no append lost)")


def failed_writes(warehouse: Warehouse, store: dict, options: dict[str, str]) -> None:
    """Each layout holds 2 entries; a write that raises half-way, then a writer killed
    (SIGKILL) half-way; after each, what a reader sees and what is left on the store."""
    for layout in _layouts(warehouse, "atomic", options):
        layout.bulk(entries("frames", 0, 2, 1000))
        before = layout.read()
        print(f"  -- {layout.name}: {len(before)} rows, {layout.objects()} objects")
        try:
            write_failing(layout, halfway)
        except Exception as error:  # noqa: BLE001 - any failure; we look at what is left
            print(f"    raised half-way: {type(error).__name__}: {str(error)[:80]}")
        _check_unchanged(layout, before)
        code = WRITER.format(paths=[str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")],
                             url=warehouse.url, store=store, name=layout.name,
                             table=layout.table, options=options)
        writer = subprocess.run([sys.executable, "-c", code], check=False)
        print(f"    writer killed itself half-way (exit {writer.returncode})")
        _check_unchanged(layout, before)
        if isinstance(layout, Delta):
            removed = layout.open().vacuum(retention_hours=0, enforce_retention_duration=False,
                                           dry_run=False, full=True)
            print(f"    vacuum(full=True) removed {len(removed)} unreferenced files")
            _check_unchanged(layout, before)


def _check_unchanged(layout, before: pd.DataFrame) -> None:
    after = layout.read()
    pd.testing.assert_frame_equal(after, before)
    base = layout.warehouse.table_path(layout.table)
    selector = pafs.FileSelector(base, recursive=True)
    left = [i.path.removeprefix(base + "/") for i in
            layout.warehouse.filesystem.get_file_info(selector) if i.type == pafs.FileType.File]
    listed = {f.path.removeprefix(base + "/") for f in layout.files()}
    extra = [p for p in left if p not in listed and not p.startswith("_delta_log/")]
    print(f"    a reader sees the {len(after)} rows of before; objects left beside the table's: "
          f"{extra or 'none'}")


# --- main -----------------------------------------------------------------------------

@contextmanager
def stores(names: list[str], log: Path, commit: str
           ) -> Iterator[Iterator[tuple[str, Warehouse, dict, Requests, dict]]]:
    """(label, warehouse, ObjectStore keywords, request counter, delta options) of each."""
    with tempfile.TemporaryDirectory() as folder:
        def each():
            if "path" in names:
                yield "path", Warehouse(Path(folder) / "warehouse"), {}, Requests(None), {}
            if "s3" in names:
                with throwaway_object_store(str(log)) as server:
                    bucket = server.new_bucket()
                    store = {**dataclasses.asdict(server.store), "region": "us-east-1"}
                    warehouse = Warehouse(f"s3://{bucket}/warehouse", server.store)
                    # moto on a loaded machine may take longer than pyarrow's 3 s
                    warehouse.filesystem = pafs.S3FileSystem(
                        **{k: v for k, v in store.items() if k != "endpoint"},
                        endpoint_override=server.endpoint, allow_delayed_open=True,
                        request_timeout=120, connect_timeout=30)
                    yield (f"S3 (moto, {server.endpoint})", warehouse, store, Requests(log),
                           delta_options(server, commit))
        yield each()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[1000])
    parser.add_argument("--kind", choices=sorted(VALUE), default="facts")
    parser.add_argument("--store", choices=["path", "s3"], nargs="+", default=["path", "s3"])
    parser.add_argument("--per-day", type=int, default=1000)
    parser.add_argument("--layouts", nargs="+", default=["files", "segments", "delta"])
    parser.add_argument("--part", choices=["steps", "atomic"], default="steps")
    parser.add_argument("--commit", choices=["conditional", "unsafe"], default="conditional",
                        help="Delta's commit on S3 (see delta_options)")
    args = parser.parse_args()
    print(describe(pd, np, pa, duckdb, deltalake), f"load average before: {load_average()}",
          sep="\n")
    with tempfile.TemporaryDirectory() as logs, stores(args.store, Path(logs) / "moto.log",
                                                       args.commit) as each:
        for label, warehouse, store, requests, options in each:
            print(f"\n=== {label}")
            if args.part == "atomic":
                racing_commits(warehouse, options)
                failed_writes(warehouse, store, options)
                continue
            for stored in args.entries:
                layouts = [layout for layout in _layouts(warehouse, f"{args.kind}-{stored}",
                                                         options)
                           if layout.name in args.layouts]
                measure(layouts, args.kind, stored, args.per_day, requests)
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
