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
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clustercockpit_backfill import DATA, build_archive
from machine import describe, load_average

import joulehouse
from assets.clustercockpit import load_block_trials
from assets.taudb import TrialLoads
from joulehouse.clustercockpit.blocks import read_block
from joulehouse.clustercockpit.measure import measure_jobs
from joulehouse.taudb.connect import TaudbDatabase


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs of the block (<= 1000)")
    args = parser.parse_args(argv)
    DATA.mkdir(exist_ok=True)
    root = DATA / f"cc-per-job-{args.jobs}"
    (key,) = build_archive(root, 1, args.jobs)
    print(f"code: {Path(joulehouse.__file__).parent.parent}; {args.jobs} jobs; "
          f"load {load_average()}")

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
