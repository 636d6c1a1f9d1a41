"""What ``entry_table.stored_entries`` costs: the entries of a source starting with one of
N prefixes, over a table of E entries, against the lookup it replaced (DataFusion queries
of at most ``OR_LIMIT`` ``starts_with`` terms joined by ``OR``), in the same run, with the
same answer asserted. Prints the CPU seconds of each.

    .venv/bin/python benchmarks/entry_lookup.py [--entries 25000] [--every 6]
"""

from __future__ import annotations

import argparse
import resource
import tempfile

import pandas as pd
import pyarrow as pa
from deltalake import QueryBuilder
from machine import describe

from joulehouse import entry_table
from joulehouse.warehouse import Warehouse

SCOPE = {"source": "gpu-benchmark"}


def cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def by_datafusion(tables: Warehouse, table: str, prefixes: list[str]) -> set[str]:
    """The lookup as it was until 2026-12-01: queries of ``OR_LIMIT`` prefixes each."""
    delta = entry_table._open(tables, table)
    found: set[str] = set()
    for start in range(0, len(prefixes), entry_table.OR_LIMIT):
        terms = " OR ".join(f"starts_with(entity, '{prefix}')"
                            for prefix in prefixes[start:start + entry_table.OR_LIMIT])
        batches = QueryBuilder().register("entries", delta).execute(
            f"SELECT DISTINCT entity FROM entries WHERE source = 'gpu-benchmark' AND ({terms})")
        found |= {str(v) for batch in batches for v in pa.array(batch.column(0)).to_pylist()}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=25_000)
    parser.add_argument("--every", type=int, default=6, help="a prefix every so many entries")
    args = parser.parse_args()
    print(describe(pa, pd))
    with tempfile.TemporaryDirectory() as folder:
        tables = Warehouse(folder)
        rows = pd.DataFrame({**SCOPE, "entity": [f"r/{n:05d}" for n in range(args.entries)],
                             "energy_j": 1.0})
        tables.write_entries("facts", rows, SCOPE)
        prefixes = sorted({f"r/{n:05d}" for n in range(0, args.entries, args.every)})
        timed = {}
        for name, lookup in (
                ("stored_entries", lambda: entry_table.stored_entries(
                    tables, "facts", SCOPE, prefixes)),
                ("DataFusion OR queries", lambda: by_datafusion(tables, "facts", prefixes))):
            start = cpu_s()
            timed[name] = lookup()
            print(f"{name:24} {len(prefixes)} prefixes over {args.entries} entries: "
                  f"{cpu_s() - start:.2f} CPU-s, {len(timed[name])} found", flush=True)
        assert timed["stored_entries"] == timed["DataFusion OR queries"]


if __name__ == "__main__":
    main()
