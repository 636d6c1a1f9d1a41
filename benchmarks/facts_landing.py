"""Benchmark: landing 10 entries into energy_facts over 1,000 and 100,000 stored ones, before
and after issue 28's per-entry table, in the same run (on a path).

An entry is a GPU repetition: its per-repetition energy partition (here its 4
``energy_facts`` rows stand in for it, ``table_format.entries``: a real partition has
more columns, so the *before* figures are a lower bound) and its 4 facts. For each
history size, each layout is built with that many stored entries (not timed), then each
repetition lands 10 new entries, whose energy partitions are written first (not timed;
the stored entries' only where the step reads them, before),
and times what the ``energy_facts/gpu`` asset does then:

- ``before``: the code before issue 28 (``assets/gpu.py`` ``facts``): list the energy
  table, read every stored partition, write ``energy_facts/gpu-benchmark.parquet`` whole;
- ``after owned``: the code now in a run over the 10 partitions
  (``facts_entries.replace_owned``): read the 10 partitions' energy, look up their
  stored entities, one commit of their rows to the Delta table;
- ``after sync``: the code now where a source's facts depend on each other (GEOPM,
  PowerAPI) or in a run without partitions (``facts_entries.sync``): every fact given
  (here: the stored rows and the 10 new ones, already in memory, as those steps have
  them), compared with the stored rows, the 10 changed entities written.

The Delta table is compacted after it is built (one file, as ``entry_table.compact``
leaves it) and not again: each repetition adds a file.

Run: ``.venv/bin/python benchmarks/facts_landing.py --entries 1000 100000 --repeat 3``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import deltalake
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from machine import describe, load_average
from table_format import entries

from joulehouse import entry_table, facts_entries
from joulehouse.gpu.energy import FACTS_OWNERSHIP, FACTS_SOURCE
from joulehouse.warehouse import Warehouse, partition_file_name

ENERGY = "gpu_repetition_energy"
NEW = 10
PER_DAY = 1000


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stored_energy(warehouse: Warehouse, rows: pd.DataFrame) -> list[str]:
    """One energy partition per entry of ``rows`` (written without ``Warehouse``'s fsync:
    setup, not timed); their keys."""
    folder = Path(warehouse.table_path(ENERGY))
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(rows, preserve_index=False)
    keys = rows["entity"].to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    for start, end in zip(starts, [*starts[1:], len(keys)]):
        key = keys[start]
        pq.write_table(table.slice(start, end - start), folder / partition_file_name(key))
    return [str(key) for key in keys[starts]]


def before(warehouse: Warehouse, new: list[str]) -> None:
    """The facts step before issue 28: every stored partition read, the source's file
    written whole."""
    del new
    rows = warehouse.read_partitions(ENERGY, warehouse.partition_keys(ENERGY))
    warehouse.write_partition(facts_entries.TABLE, FACTS_SOURCE, rows)


def after_owned(warehouse: Warehouse, new: list[str]) -> None:
    """The facts step now, in a run over the ``new`` partitions."""
    stored = [key for key in new if warehouse.has_partition(ENERGY, key)]
    rows = warehouse.read_partitions(ENERGY, stored)
    facts_entries.replace_owned(warehouse, FACTS_SOURCE, rows, new, FACTS_OWNERSHIP)


def after_sync(given: list[pd.DataFrame]) -> Callable[[Warehouse, list[str]], None]:
    """The facts step now where every fact is given (``given``: the stored ones, then
    each landing's, in memory)."""
    def sync(warehouse: Warehouse, new: list[str]) -> None:
        given.append(warehouse.read_partitions(ENERGY, new))
        written = facts_entries.sync(warehouse, FACTS_SOURCE, pd.concat(given, ignore_index=True))
        assert written.entities == len(new) and not written.removed, written
    return sync


def measure(label: str, root: Path, stored: int, repeat: int,
            step: Callable[[Warehouse, list[str]], None], layout: str) -> None:
    warehouse = Warehouse(root / label)
    history = entries("facts", 0, stored, PER_DAY)
    made = time.perf_counter()
    if layout == "delta":  # the step reads no stored entry's energy partition
        entry_table.replace_scope(warehouse, facts_entries.TABLE, history, {"source": FACTS_SOURCE})
        entry_table.compact(warehouse, facts_entries.TABLE)
    else:
        stored_energy(warehouse, history)
        warehouse.write_partition(facts_entries.TABLE, FACTS_SOURCE, history)
    built = time.perf_counter() - made
    walls, cpus = [], []
    for landing in range(repeat):
        rows = entries("facts", stored + landing * NEW, NEW, PER_DAY)
        new = stored_energy(warehouse, rows)
        wall, cpu = time.perf_counter(), cpu_s()
        step(warehouse, new)
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_s() - cpu)
    facts = warehouse.read_table(facts_entries.TABLE)
    assert len(facts) == 4 * (stored + repeat * NEW), len(facts)
    print(f"{stored:>8,} {label:<12} wall {' '.join(f'{w:7.3f}' for w in walls)} s  "
          f"cpu {' '.join(f'{c:7.3f}' for c in cpus)} s  (built in {built:.0f} s)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", nargs="+", default=["before", "after-owned", "after-sync"])
    args = parser.parse_args()
    print(describe(pd, np, pa, deltalake), f"load average before: {load_average()}", sep="\n")
    print(f"{'stored':>8} {'step':<12} each landing of {NEW} entries, {args.repeat} times")
    for stored in args.entries:
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            if "before" in args.steps:
                measure("before", root, stored, args.repeat, before, "files")
            if "after-owned" in args.steps:
                measure("after-owned", root, stored, args.repeat, after_owned, "delta")
            if "after-sync" in args.steps:
                given = [entries("facts", 0, stored, PER_DAY)]
                measure("after-sync", root, stored, args.repeat, after_sync(given), "delta")
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
