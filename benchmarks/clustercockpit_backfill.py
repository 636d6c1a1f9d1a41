"""Benchmark: a ClusterCockpit archive backfilled through Dagster, beside `joulehouse energy cc`.

Generates (once, reused) a synthetic archive into
``benchmarks/.data/cc-backfill-<blocks>x<jobs>/``: ``--blocks`` job-id blocks
of ``--jobs-per-block`` small jobs each (one host, 11 samples of cpu_power and
mem_bw; ``joulehouse/clustercockpit/generator.py``), start times spread over
days. Registers the blocks as ``cc_job_blocks`` partitions in a fresh
DAGSTER_HOME (``deploy/dagster.yaml``: SQLite, queued runs), starts ``dagster
dev`` on the archive and launches, as the UI does, an asset backfill of every
asset of ``cc_job`` (block tables, TAUdb trials, the tables over all blocks)
over every block through the webserver's GraphQL API (the trials cannot be left
out: their eager automation condition would ask for them meanwhile). The
backfill policy makes at
most ``ceil(blocks / BLOCKS_PER_RUN)`` block runs and one run for the tables over
all blocks (100 blocks: 9 + 1). Then runs
``joulehouse energy cc`` on the same archive and compares: jobs/s of each,
and the same per-job energy.

Schema validation is off in both (``--check-schema`` turns it on in Dagster;
the CLI never validates). The default (100 blocks x 50 jobs = 5,000 jobs)
keeps the run count of 100,000 jobs with fewer jobs per block; the full
size: ``.venv/bin/python benchmarks/clustercockpit_backfill.py --jobs-per-block 1000``.
"""

import argparse
import math
import shutil
import sys
import tempfile
from pathlib import Path

import dagster as dg
import pandas as pd
from dagster._core.execution.backfill import BulkActionStatus

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from backfill import backfilled, cli_seconds, load_summary, run_report
from machine import describe, load_average

from assets.clustercockpit import BLOCKS_PER_RUN, JOB_ENERGY_TABLE, cc_block_tables
from definitions import defs
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.warehouse import Warehouse as Tables
from sensors.clustercockpit import JOB_NAME

PROJECT = Path(__file__).resolve().parent.parent
DATA = PROJECT / "benchmarks" / ".data"
CLUSTER = "bench"
FIRST_BLOCK = 1000
SPEC = JobSpec(cluster=CLUSTER, hosts=1, samples=11, timestep_s=60)
START = 1_700_000_000
PARTITIONS = "cc_job_blocks"


def build_archive(root: Path, blocks: int, per_block: int) -> list[str]:
    """The archive (written once; ``.complete`` marks it whole) and its block keys."""
    marker = root / ".complete"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        write_archive_files(root, [CLUSTER])
        for block in range(FIRST_BLOCK, FIRST_BLOCK + blocks):
            for index in range(per_block):
                job_id = block * 1000 + index
                # out of start-time order across blocks: any start time lands in any block
                start = START + ((job_id * 7919) % (30 * 86400))
                write_job(root, JobSpec(**{**SPEC.__dict__, "job_id": job_id,
                                           "start_time": start, "user": f"u{index % 7}",
                                           "project": f"p{block % 3}"}))
        marker.touch()
    return [f"{CLUSTER}/{block}" for block in range(FIRST_BLOCK, FIRST_BLOCK + blocks)]


def backfill(root: Path, keys: list[str], jobs: int, args) -> tuple[float, Path]:
    """Backfill the blocks through ``dagster dev`` (``backfill.backfilled``, SQLite); returns
    the wall time from submission to completion and the warehouse folder."""
    selection = sorted(defs.resolve_job_def(JOB_NAME).asset_layer.selected_asset_keys)
    home = Path(tempfile.mkdtemp(prefix="cc-backfill-home-", dir=DATA))
    warehouse = home / "warehouse"
    limit = math.ceil(len(keys) / BLOCKS_PER_RUN) + 1
    print(f"{len(keys)} blocks, {jobs} jobs; load {load_average()}")
    with backfilled("sqlite", home, PARTITIONS, keys, selection, {
            "JOULEHOUSE_CC_ARCHIVE": str(root), "JOULEHOUSE_WAREHOUSE": str(warehouse),
            "JOULEHOUSE_CC_CHECK_SCHEMA": str(args.check_schema).lower()},
            args.timeout) as done:
        print(f"status {done.status.value}: {len(done.records)} run(s) (limit {limit}) in "
              f"{done.elapsed_s:.1f} s from submission to completion: "
              f"{jobs / done.elapsed_s:.1f} jobs/s; load {load_average()}")
        for record in done.records:
            print(run_report(done.instance, record, done.submitted)[0])
        materialized = done.instance.get_materialized_partitions(cc_block_tables.key)
        print(f"cc_block_tables materialized for {len(materialized)} of {len(keys)}")
    print(load_summary(done.loads))
    if (done.status != BulkActionStatus.COMPLETED_SUCCESS or len(done.records) > limit
            or set(keys) - materialized):
        raise SystemExit(f"backfill benchmark failed; instance kept in {home}")
    return done.elapsed_s, warehouse


def cli(root: Path, jobs: int, out: Path) -> float:
    """``joulehouse energy cc`` on the archive into ``out``; returns its wall time."""
    elapsed, cpu = cli_seconds("energy", "cc", "--quiet", str(root), "--format", "parquet",
                               "--out", str(out))
    print(f"joulehouse energy cc: {jobs} jobs in {elapsed:.1f} s: {jobs / elapsed:.1f} jobs/s "
          f"({cpu:.1f} s of CPU: {cpu / jobs * 1000:.1f} ms a job); load {load_average()}")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--jobs-per-block", type=int, default=50)
    parser.add_argument("--check-schema", action="store_true",
                        help="validate the JSON schemas in Dagster (the CLI never does)")
    parser.add_argument("--timeout", type=float, default=7200)
    args = parser.parse_args(argv)
    DATA.mkdir(exist_ok=True)
    root = DATA / f"cc-backfill-{args.blocks}x{args.jobs_per_block}"
    keys = build_archive(root, args.blocks, args.jobs_per_block)
    jobs = args.blocks * args.jobs_per_block
    dagster_s, warehouse = backfill(root, keys, jobs, args)
    out = warehouse / "energy-cc.parquet"
    cli_s = cli(root, jobs, out)
    ours = Tables(warehouse).read_table(JOB_ENERGY_TABLE).sort_values(["job", "metric"])
    theirs = pd.read_parquet(out).sort_values(["job", "metric"])
    same = len(ours) == len(theirs) and bool(
        (ours["energy_j"].to_numpy() == theirs["energy_j"].to_numpy()).all())
    print(f"per-job energy: {len(ours)} rows in Dagster, {len(theirs)} from the CLI, "
          f"{'identical' if same else 'DIFFERENT'}; Dagster / CLI wall time "
          f"{dagster_s / cli_s:.2f}")
    print(f"machine: {describe(dg, pd)}")
    if not same:
        raise SystemExit("the Dagster and CLI energies differ")
    shutil.rmtree(warehouse.parent)


if __name__ == "__main__":
    main()
