"""Benchmark: what one small ClusterCockpit job costs, stage by stage, in CPU time.

One job-id block of ``--jobs`` synthetic jobs (the backfill benchmark's: one
host, 11 samples of cpu_power and mem_bw; built once into
``benchmarks/.data/cc-per-job-<jobs>/``) is measured three ways, each timed
in CPU seconds of this process (``time.process_time``, so the figures hold
on a shared machine better than wall times do):

- ``measure_jobs``: what ``joulehouse energy cc`` does per job;
- ``read_block``: what a Dagster block run reads and computes per block;
- ``load_block_trials``: the block's TAUdb trials (mapping and loader) into a
  fresh SQLite TAUdb.

To compare two checkouts, run it from each with ``PYTHONPATH`` set to the
checkout (the archive is shared): ``PYTHONPATH=. .venv/bin/python
benchmarks/clustercockpit_per_job.py``.

``--part landing``: what a block run reads when jobs land in a block already stored.
The block of ``--jobs`` jobs is copied and stored once (a whole read, as a first run
does), then ``--landings`` landings of ``--new`` new jobs each (job ids of the block
with new start times: other jobs) are each run twice on the same files, wall and CPU
time: the run's read as it is (the stored frames read, only the new and changed jobs
read, ``store_block``: ``keep_stored``, the five frames written together, the block's
left-out records derived from them and stored; the block's trials loaded: the unchanged
jobs' looked up) and a whole read as the reference (every job read, the frames and
left-out records written, the trials loaded), into a warehouse and TAUdb of its own that hold the
same block; the two stored blocks are compared frame by frame (pandas equality).
Each run then marks the block landed (``mark_landed``, as the landing of the tables
over the blocks does; the tables themselves are not landed here), and a last
incremental run with nothing new is timed: it writes nothing.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clustercockpit_backfill import CLUSTER, DATA, SPEC, START, build_archive
from machine import describe, load_average

import joulehouse
from assets.clustercockpit import (
    ReadOfBlock,
    load_block_trials,
    mark_landed,
    store_block,
    stored_block,
)
from assets.taudb import TrialLoads
from joulehouse.clustercockpit.blocks import read_block, stored_fingerprints
from joulehouse.clustercockpit.generator import JobSpec, write_job
from joulehouse.clustercockpit.measure import measure_jobs
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.warehouse import Warehouse as Tables


class BlockRun:
    """A block run's read and trial load into a warehouse and TAUdb of its own, as
    ``assets/clustercockpit.py: read_blocks`` does them, through the same ``store_block``
    (``whole``: every job read)."""

    def __init__(self, folder: Path, root: Path, key: str, whole: bool, check_schema: bool):
        self.tables, self.root, self.key = Tables(folder / "warehouse"), root, key
        self.db = TaudbDatabase(f"sqlite:///{folder}/taudb.sqlite").__enter__()
        self.whole, self.check_schema = whole, check_schema

    def __call__(self) -> tuple[int, int]:
        """One run over the block: (jobs read, jobs unchanged)."""
        stored = None if self.whole else stored_block(self.tables, self.key)
        read = read_block(self.root, self.key, check_schema=self.check_schema,
                          known=stored_fingerprints(stored))
        done = store_block(self.tables, ReadOfBlock(self.key, read, stored, self.root))
        self.written = done.written
        loaded = load_block_trials(TrialLoads.into(self.db), self.key, read, 1)
        if read.failed or not isinstance(loaded, dict):
            raise SystemExit(f"jobs failed: {read.failed or loaded}")
        mark_landed(self.tables, {self.key: done.digest})  # as the landing of its tables does
        return len(read.measured), len(read.unchanged)

    def frames(self) -> dict[str, pd.DataFrame]:
        return stored_block(self.tables, self.key)


def landings(source: Path, key: str, args) -> None:
    """``--part landing`` (see the module docstring)."""
    with tempfile.TemporaryDirectory(dir=DATA) as folder:
        folder = Path(folder)
        root = folder / "archive"
        shutil.copytree(source, root)
        runs = {"incremental": BlockRun(folder / "incremental", root, key, False,
                                        args.check_schema),
                "whole": BlockRun(folder / "whole", root, key, True, args.check_schema)}
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            print(f"block stored ({name}): {time.perf_counter() - started:.1f} s")
        block = int(key.rpartition("/")[2])
        print("landing | jobs in block | incremental: read/unchanged, wall, CPU | "
              "whole: read, wall, CPU | whole/incremental (wall) | load")
        for landing in range(args.landings):
            for index in range(args.new):
                number = landing * args.new + index
                write_job(root, JobSpec(**{**SPEC.__dict__, "cluster": CLUSTER,
                                           "job_id": block * 1000 + number % 1000,
                                           "start_time": START + 40 * 86400 + number}))
            times = {}
            for name, run in runs.items():
                wall, cpu = time.perf_counter(), time.process_time()
                counts = run()
                times[name] = (counts, time.perf_counter() - wall, time.process_time() - cpu)
            (read, unchanged), wall, cpu = times["incremental"]
            (whole, _), whole_wall, whole_cpu = times["whole"]
            print(f"{landing + 1} | {read + unchanged} | {read}/{unchanged}, {wall:.2f} s, "
                  f"{cpu:.2f} s | {whole}, {whole_wall:.2f} s, {whole_cpu:.2f} s | "
                  f"{whole_wall / wall:.1f}x | {load_average()}")
            incremental, reference = runs["incremental"].frames(), runs["whole"].frames()
            for name in reference:
                pd.testing.assert_frame_equal(incremental[name], reference[name], obj=name)
        print("the stored blocks equal, frame by frame, after every landing")
        run = runs["incremental"]
        wall, cpu = time.perf_counter(), time.process_time()
        read, unchanged = run()
        print(f"rerun, nothing new: {read}/{unchanged}, block written: {run.written}, "
              f"{time.perf_counter() - wall:.2f} s, {time.process_time() - cpu:.2f} s CPU | "
              f"{load_average()}")
        for run in runs.values():
            run.db.__exit__(None, None, None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs of the block (<= 1000)")
    parser.add_argument("--part", choices=("stages", "landing"), default="stages")
    parser.add_argument("--landings", type=int, default=3, help="landings (--part landing)")
    parser.add_argument("--new", type=int, default=50, help="new jobs a landing")
    parser.add_argument("--check-schema", action="store_true",
                        help="validate the jobs read against the JSON schemas (--part landing)")
    args = parser.parse_args(argv)
    DATA.mkdir(exist_ok=True)
    root = DATA / f"cc-per-job-{args.jobs}"
    (key,) = build_archive(root, 1, args.jobs)
    print(f"code: {Path(joulehouse.__file__).parent.parent}; {args.jobs} jobs; "
          f"load {load_average()}")
    if args.part == "landing":
        landings(root, key, args)
        print(f"machine: {describe(pd)}")
        return

    def timed(what: str, run):
        started = time.process_time()
        result = run()
        cpu = time.process_time() - started
        print(f"{what:<18} {cpu:6.1f} s CPU: {cpu / args.jobs * 1000:5.1f} ms a job")
        return result

    measured, errors = timed("measure_jobs", lambda: measure_jobs(root, check_schema=False))
    read = timed("read_block", lambda: read_block(root, key, check_schema=False))
    with tempfile.TemporaryDirectory(dir=DATA) as folder, \
            TaudbDatabase(f"sqlite:///{folder}/taudb.sqlite") as db:
        loaded = timed("load_block_trials",
                       lambda: load_block_trials(TrialLoads.into(db), key, read, 1))
    if errors or read.failed or not isinstance(loaded, dict):
        raise SystemExit(f"jobs failed: {errors or read.failed or loaded}")
    print(f"{len(measured)} jobs measured, {len(loaded['trials'])} trials loaded; "
          f"load {load_average()}; machine: {describe(pd)}")


if __name__ == "__main__":
    main()
