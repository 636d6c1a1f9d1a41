"""Benchmark: the warehouse's writes and reads on a path against an S3-compatible object store.

A representative table set: the validated frames of R generated GPU repetitions (six
tables, one small partition each per repetition: many small objects, as the sensors'
runs write them), then one partitioned energy_facts table of F generated facts in two
partitions (few large objects, as the sources' tables and the accounting write them).
Each is written through ``joulehouse.warehouse.Warehouse`` and read back (partition by
partition for the frames, whole for the facts), first to a temporary folder, then to a
bucket of moto's S3-compatible server (``tests/object_store.py``) started on loopback
in the same run. What is read back is checked equal to what was written.

moto keeps the objects in a single-process Python server's memory: its figures are the
object store's protocol cost (a request per object, the upload's serialization in
memory) against a slow server, not a real S3 or MinIO service.

Run: ``.venv/bin/python benchmarks/warehouse_object_store.py [--repetitions R] [--facts F]``.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from machine import describe, load_average
from object_store import throwaway_object_store

from joulehouse.accounting import generator as facts_generator
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.store import load_repetition, save_repetition
from joulehouse.warehouse import Warehouse

FACTS_TABLE = "energy_facts"


def _repetitions(folder: Path, count: int) -> list[RepetitionRef]:
    runs = {"power-limit": {"bert": [f"{100 + 10 * i}W" for i in range(count)]}}
    write_data_root(folder / "lab", runs, repetitions=1,
                    base=RepetitionSpec(duration_s=60.0, epochs=3))
    return [RepetitionRef.from_key(folder / "lab", f"power-limit/bert/{100 + 10 * i}W/0")
            for i in range(count)]


def _timed(label: str, work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    print(f"  {label:<34} {seconds:8.2f} s")
    return seconds, result


def _run(tables: Warehouse, reps: list, facts: pd.DataFrame) -> dict[str, float]:
    keys = [f"lab/{rep.ref.key}" for rep in reps]
    figures = {}
    figures["frames write"], _ = _timed(
        f"write {len(reps)} repetitions' frames",
        lambda: [save_repetition(tables, key, rep) for key, rep in zip(keys, reps)])
    figures["frames read"], back = _timed(
        "read them back, one by one",
        lambda: [load_repetition(tables, key, rep.ref) for key, rep in zip(keys, reps)])
    for rep, stored in zip(reps, back):
        pd.testing.assert_frame_equal(stored.gpu_power, rep.gpu_power)
    halves = dict(tuple(facts.groupby("source")))
    figures["facts write"], _ = _timed(
        f"write {len(facts):,} facts (2 partitions)",
        lambda: [tables.write_partition(FACTS_TABLE, source, rows)
                 for source, rows in halves.items()])
    figures["facts read"], whole = _timed("read the facts table whole",
                                          lambda: tables.read_table(FACTS_TABLE))
    assert len(whole) == len(facts)
    assert np.isclose(whole["energy_j"].sum(), facts["energy_j"].sum(), rtol=1e-12)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=50)
    parser.add_argument("--facts", type=int, default=1_000_000)
    args = parser.parse_args()
    print(describe(pd, np, pa), f"load average before: {load_average()}", sep="\n")
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        reps = [read_repetition(ref) for ref in _repetitions(folder / "data", args.repetitions)]
        facts = facts_generator.facts(args.facts, "2022-01-01", "90D", seed=0)
        print("path (temporary folder):")
        local = _run(Warehouse(folder / "warehouse"), reps, facts)
        with throwaway_object_store() as server:
            print(f"object store (moto's server, {server.endpoint}):")
            remote = _run(Warehouse(f"s3://{server.new_bucket()}/warehouse", server.store),
                          reps, facts)
    print("object store / path:",
          ", ".join(f"{name} {remote[name] / local[name]:.1f}x" for name in local))
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
