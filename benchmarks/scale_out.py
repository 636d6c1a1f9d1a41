"""Scale-out: per-partition work through local processes, Dask on this machine, Dask in Slurm.

The same work through three ``concurrent.futures`` executors of 2 workers each:

- ``processes``: the standard library's ``ProcessPoolExecutor`` (the step's
  default pool);
- ``dask-local``: ``joulehouse.cluster.dask_executor("local", workers=2)``;
- ``dask-slurm``: ``dask_executor("slurm", jobs=2, cores=1)`` on a one-node
  Slurm cluster started here (``tests/slurm_cluster.py``: munged, slurmctld,
  slurmd from Debian's packages; root only).

For each: the start (until the executor is yielded: for Slurm, until the
first worker has connected), ``--tasks`` empty tasks one after the other
(submit, wait: the round trip a task costs), the same tasks submitted at once
(the cost per task when the workers are kept busy), ``--repetitions`` real
partitions (read and validate one repetition of ``examples/gpu-data``, then its
energy; the 8 repetitions taken in turn), and the close (for Slurm, until
``squeue`` is empty). The repetitions are also timed in this process, one
after the other, as the baseline. Run as root:
``.venv/bin/python benchmarks/scale_out.py [--tasks 200] [--repetitions 64]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path

import dask_jobqueue
import distributed

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from machine import describe, load_average
from slurm_cluster import one_node_slurm

from joulehouse.cluster import dask_executor
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.layout import RepetitionRef, find_repetitions
from joulehouse.gpu.readers import read_repetition

EXAMPLES = ROOT / "examples" / "gpu-data"
WORKERS = 2


def nothing(index: int) -> int:
    """An empty task."""
    return index


def energy_rows(key: str) -> int:
    """One partition's work: read and validate a repetition, compute its energy; the rows."""
    return len(repetition_energy(read_repetition(RepetitionRef.from_key(EXAMPLES, key))))


def worker_pid(_: int) -> int:
    """The worker's process id, after 50 ms (so that every idle worker takes one)."""
    time.sleep(0.05)
    return os.getpid()


def measure(name: str, open_pool, tasks: int, keys: list[str]) -> dict[str, float]:
    """Start, round trip per task, cost per task at once, repetitions, close (s)."""
    figures: dict[str, float] = {}
    start = time.perf_counter()
    with open_pool() as pool:
        pool: Executor
        figures["start_s"] = time.perf_counter() - start
        deadline = time.monotonic() + 120  # every worker in and done with its imports
        while len(set(pool.map(worker_pid, range(2 * WORKERS)))) < WORKERS:
            assert time.monotonic() < deadline, f"{name}: not {WORKERS} workers in 120 s"
        figures["all_workers_s"] = time.perf_counter() - start
        begin = time.perf_counter()
        for index in range(tasks):
            pool.submit(nothing, index).result()
        figures["round_trip_ms"] = (time.perf_counter() - begin) / tasks * 1e3
        begin = time.perf_counter()
        assert list(pool.map(nothing, range(tasks))) == list(range(tasks))
        figures["at_once_ms"] = (time.perf_counter() - begin) / tasks * 1e3
        begin = time.perf_counter()
        rows = sum(pool.map(energy_rows, keys))
        figures["repetitions_s"] = time.perf_counter() - begin
        assert rows == 5 * len(keys)
        closing = time.perf_counter()
    figures["close_s"] = time.perf_counter() - closing
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=64)
    args = parser.parse_args()
    refs = [ref.key for ref in find_repetitions(EXAMPLES)]
    keys = [refs[i % len(refs)] for i in range(args.repetitions)]
    logs = ROOT / "benchmarks" / ".data" / "scale-out-logs"
    logs.mkdir(parents=True, exist_ok=True)
    print(describe(distributed, dask_jobqueue, extra=f"load {load_average()}"))
    energy_rows(keys[0])
    begin = time.perf_counter()
    for key in keys:
        energy_rows(key)
    print(f"in-process, one after the other: {args.repetitions} repetitions "
          f"{time.perf_counter() - begin:.2f} s")
    path = os.pathsep.join(map(str, (ROOT, ROOT / "tests", ROOT / "benchmarks")))
    pools = {
        "processes": lambda: ProcessPoolExecutor(WORKERS),
        "dask-local": lambda: dask_executor("local", workers=WORKERS),
        "dask-slurm": lambda: dask_executor(
            "slurm", jobs=WORKERS, cores=1, memory="1GiB", log_directory=str(logs),
            start_timeout_s=120, prologue=[f"export PYTHONPATH={path}"]),
    }
    print(f"{'executor':<11} {'start s':>8} {'all in s':>9} {'round trip ms':>14} "
          f"{'at once ms':>11} {args.repetitions} reps s {'close s':>8}")
    with one_node_slurm() as cluster:
        for name, open_pool in pools.items():
            f = measure(name, open_pool, args.tasks, keys)
            print(f"{name:<11} {f['start_s']:8.2f} {f['all_workers_s']:9.2f} "
                  f"{f['round_trip_ms']:14.2f} {f['at_once_ms']:11.2f} "
                  f"{f['repetitions_s']:10.2f} {f['close_s']:8.2f}")
        begin = time.perf_counter()
        cluster.wait_until(lambda: not cluster.job_ids(), "rid of the jobs", 60)
        print(f"squeue empty {time.perf_counter() - begin:.2f} s after the Slurm close")
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
