"""CPU of creating a new run's SQLite event-log shard: Dagster's own storage against
Joulehouse's (``resources/instance_storage.py``, a copy of an empty shard made once per
process), interleaved, after a warm-up shard each.

    .venv/bin/python benchmarks/run_shard.py [--shards N]
"""

import argparse
import statistics
import tempfile
import time

import sqlalchemy as sa
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from resources.instance_storage import BatchedSqliteEventLogStorage


def shard_cpu_s(storage: SqliteEventLogStorage, run_id: str) -> float:
    """CPU seconds of creating ``run_id``'s shard (its engine, tables and alembic stamp)."""
    started = time.process_time()
    engine = sa.create_engine(storage.conn_string_for_shard(run_id), poolclass=sa.pool.NullPool)
    storage._initdb(engine)
    engine.dispose()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=50)
    shards = parser.parse_args().shards
    with tempfile.TemporaryDirectory() as dagster, tempfile.TemporaryDirectory() as ours:
        storages = {"dagster": SqliteEventLogStorage(dagster),
                    "joulehouse": BatchedSqliteEventLogStorage(ours)}
        for storage in storages.values():
            shard_cpu_s(storage, "warm-up")
        times: dict[str, list[float]] = {name: [] for name in storages}
        for shard in range(shards):
            for name, storage in storages.items():
                times[name].append(shard_cpu_s(storage, f"run-{shard}"))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"{name}: median {median * 1000:.1f} ms CPU per new run shard "
              f"({shards} shards, best {min(times[name]) * 1000:.1f} ms)")
    print(f"ratio dagster / joulehouse: {medians['dagster'] / medians['joulehouse']:.1f}x")


if __name__ == "__main__":
    main()
