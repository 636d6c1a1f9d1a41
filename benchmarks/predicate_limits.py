"""Where deltalake stops parsing a write's predicate: the sizes behind ``entry_table``'s
``IN_LIMIT``/``OR_LIMIT``/``IN_MAX``/``OR_MAX`` (docs/ARCHITECTURE.md, "Predicates stay small").

For each size N, in a process of its own (deltalake kills the process, SIGSEGV, where it
fails): a table of N rows, then

- ``in``: a predicate overwrite ``source = 'a' AND entity IN (N values)``;
- ``or``: a DataFusion query ``source = 'a' AND (starts_with(entity, ..) OR ..)``, N terms,
  as ``entry_table.stored_entries`` built them until 2026-12-01;
- ``keys``: a predicate overwrite of N terms ``(source = .. AND entity IN (..))``, as
  ``entry_table.keys_predicate`` builds them for keys of two columns;
- ``or-in``: a predicate overwrite shaped as ``accounting.months.kept_where`` built it, a
  month's counts ``OR`` the members of N entities of one source (an ``IN`` list inside an
  ``OR``'s term, one ``OR`` deeper than the others), the entities as wide as
  ClusterCockpit's (23 characters);
- ``flat-in``: the same entities in the flat shape every predicate now has (``keys``'s):
  two terms ``(source = .. AND entity IN (N values))`` joined by one ``OR``.

Prints, per kind and size, whether the process lived (its exit code otherwise).

    .venv/bin/python benchmarks/predicate_limits.py [--in 5000,10000,15000,20000,25000]
        [--or 1000,2000,3000] [--keys 1000,2000,3000] [--or-in 5000,8500,10000]
        [--flat-in 10000,12000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

ONE = """
import sys, pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake
kind, n, uri = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = pa.table({"source": ["a"] * n, "entity": [f"e{i:07d}" for i in range(n)], "v": [1.0] * n})
write_deltalake(uri, rows)
if kind == "in":
    where = "source = 'a' AND entity IN (" + ", ".join(f"'e{i:07d}'" for i in range(n)) + ")"
    write_deltalake(uri, rows, mode="overwrite", predicate=where)
elif kind == "or":
    where = "source = 'a' AND (" + " OR ".join(
        f"starts_with(entity, 'e{i:07d}')" for i in range(n)) + ")"
    list(QueryBuilder().register("t", DeltaTable(uri)).execute(
        f"SELECT count(*) FROM t WHERE {where}"))
elif kind == "keys":
    where = " OR ".join(f"(source = 's{i}' AND entity IN ('e{i:07d}'))" for i in range(n))
    write_deltalake(uri, rows.slice(0, 0), mode="overwrite", predicate=where)
elif kind == "flat-in":
    jobs = [f"soak/{6900000 + i}/1764460957" for i in range(n)]
    two = pa.table({"source": ["a"] * n + ["b"] * n, "entity": jobs * 2})
    write_deltalake(uri, two, mode="overwrite", schema_mode="overwrite")
    listed = ", ".join(f"'{job}'" for job in jobs)
    where = " OR ".join(f"(source = '{s}' AND entity IN ({listed}))" for s in "ab")
    write_deltalake(uri, two.slice(0, 1), mode="overwrite", predicate=where)
else:
    jobs = [f"soak/{6900000 + i}/1764460957" for i in range(n)]
    members = pa.table({"kind": ["member"] * n, "calendar": ["utc"] * n, "source": ["a"] * n,
                        "month": ["2026-01"] * n, "entity": jobs})
    write_deltalake(uri, members, mode="overwrite", schema_mode="overwrite")
    where = ("(kind = 'month' AND (calendar = 'utc' AND source = 'a' AND month IN ('2026-01')))"
             " OR (kind = 'member' AND (source = 'a' AND entity IN ("
             + ", ".join(f"'{job}'" for job in jobs) + ")))")
    write_deltalake(uri, members.slice(0, 1), mode="overwrite", predicate=where)
"""


def lives(kind: str, size: int) -> int:
    """The exit code of one try (0: the process lived)."""
    with tempfile.TemporaryDirectory() as folder:
        return subprocess.run([sys.executable, "-c", ONE, kind, str(size), f"{folder}/t"],
                              capture_output=True, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sizes = lambda text: [int(part) for part in text.split(",")]
    parser.add_argument("--in", dest="in_", type=sizes, default=[5000, 10000, 15000, 20000,
                                                                 25000])
    parser.add_argument("--or", dest="or_", type=sizes, default=[1000, 2000, 3000])
    parser.add_argument("--keys", type=sizes, default=[1000, 2000, 3000])
    parser.add_argument("--or-in", type=sizes, default=[5000, 8500, 10000])
    parser.add_argument("--flat-in", type=sizes, default=[10000, 12000])
    args = parser.parse_args()
    for kind, chosen in (("in", args.in_), ("or", args.or_), ("keys", args.keys),
                         ("or-in", args.or_in), ("flat-in", args.flat_in)):
        for size in chosen:
            code = lives(kind, size)
            print(f"{kind:5} {size:>7,}: {'lives' if code == 0 else f'dies (exit {code})'}",
                  flush=True)


if __name__ == "__main__":
    main()
