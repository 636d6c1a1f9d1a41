"""Benchmark: the tables step of a run over 10 new ClusterCockpit blocks or GEOPM reports,
over 100 and 2,000 stored ones, before and after issue 28's tables kept per entry, in the
same run (on a path).

For each source and history size the stored blocks' (reports') frames are written first
(not timed), then each repetition stores 10 new ones (not timed) and times what the step
does to its tables over all partitions (``energy_facts`` left out: its own benchmark is
``facts_landing.py``):

- ``before``: the code before (``assets/clustercockpit.py``/``assets/geopm.py``
  ``whole_tables`` at 14eca5c): list the stored partitions, read every one's frames,
  compute the tables (the rollup; the reports given twice, the sums across hosts) and
  write each whole;
- ``after``: ``joulehouse.clustercockpit.tables.land`` / ``joulehouse.geopm.tables.land``
  over the 10 partitions, the tables built first by a ``rebuild`` of the history (not
  timed).

ClusterCockpit: each block holds ``--jobs`` synthetic jobs (the generator's, one job's rows
copied under other ids and start days; a real block holds up to 1000), starting on the
block's day. GEOPM: each report is ``examples/geopm/fm_stream_dgemm_2host.yaml.report``'s
frames with its start time and energies changed (no two alike).

Run: ``.venv/bin/python benchmarks/kept_tables_landing.py --stored 100 2000 --repeat 3``.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from machine import describe, load_average

from joulehouse.clustercockpit import tables as cc_tables
from joulehouse.clustercockpit.aggregate import rollup
from joulehouse.clustercockpit.blocks import read_block
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.geopm import energy as geopm_energy
from joulehouse.geopm import tables as geopm_tables
from joulehouse.geopm.readers import read_report
from joulehouse.geopm.store import TABLE as GEOPM_FRAMES
from joulehouse.geopm.store import distinct_reports, load_frames
from joulehouse.warehouse import Warehouse

NEW = 10
CC_FRAMES = "cc_block_tables"
GEOPM_REPORT = ROOT / "examples" / "geopm" / "fm_stream_dgemm_2host.yaml.report"
DAY = pd.Timedelta(days=1)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- ClusterCockpit -------------------------------------------------------------------------

def cc_template(folder: Path) -> dict[str, pd.DataFrame]:
    """The frames of one generated job (block ``alpha/0``)."""
    write_archive_files(folder, ["alpha"])
    write_job(folder, JobSpec(cluster="alpha", job_id=1, hosts=2, samples=61))
    return read_block(folder, "alpha/0", check_schema=False).frames


def cc_block(template: dict[str, pd.DataFrame], block: int, jobs: int
             ) -> dict[str, pd.DataFrame]:
    """Block ``alpha/<block>``: ``jobs`` copies of the template job, on the block's day."""
    frames = {}
    for name in ("jobs", "job_energy"):
        copies = []
        for i in range(jobs):
            job_id = block * 1000 + i
            start = pd.Timestamp("2025-01-01", tz="UTC") + (block % 365) * DAY + i * pd.Timedelta(
                minutes=1)
            copy = template[name].assign(job=f"alpha/{job_id}/{int(start.timestamp())}",
                                         job_id=job_id)
            if name == "jobs":
                copy = copy.assign(start_time_utc=start,
                                   end_time_utc=start + (copy["end_time_utc"]
                                                         - copy["start_time_utc"]))
            copies.append(copy)
        frames[name] = pd.concat(copies, ignore_index=True)
    return frames


def cc_store(warehouse: Warehouse, template, blocks: range, jobs: int) -> list[str]:
    keys = []
    for block in blocks:
        key = f"alpha/{block}"
        for name, frame in cc_block(template, block, jobs).items():
            warehouse.write_partition(f"{CC_FRAMES}/{name}", key, frame)
        keys.append(key)
    return keys


def cc_rows(warehouse: Warehouse, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (warehouse.read_partitions(f"{CC_FRAMES}/jobs", keys),
            warehouse.read_partitions(f"{CC_FRAMES}/job_energy", keys))


def cc_before(warehouse: Warehouse, new: list[str]) -> None:
    del new
    jobs, energy = cc_rows(warehouse, warehouse.partition_keys(f"{CC_FRAMES}/jobs"))
    warehouse.write_table("cc_jobs", jobs)
    warehouse.write_table("cc_job_energy", energy)
    warehouse.write_table("cc_rollup", rollup(jobs, energy))


def cc_after(warehouse: Warehouse, new: list[str]) -> None:
    cc_tables.land(warehouse, new, lambda keys: cc_rows(warehouse, keys))


# --- GEOPM ----------------------------------------------------------------------------------

def geopm_store(warehouse: Warehouse, template, reports: range, jobs: int) -> list[str]:
    del jobs
    keys = []
    for number in reports:
        key = f"landing/{number:06d}.report"
        for name, frame in template.items():
            frame = frame.assign(report=key)
            if name == "header":
                frame = frame.assign(start_time=frame["start_time"] + number * pd.Timedelta(
                    seconds=1))
            if name in ("totals", "regions"):
                frame = frame.assign(package_energy_j=frame["package_energy_j"] * (1 + number
                                                                                   * 1e-6))
            warehouse.write_partition(f"{GEOPM_FRAMES}/{name}", key, frame)
        keys.append(key)
    return keys


def geopm_before(warehouse: Warehouse, new: list[str]) -> None:
    del new
    keys, _ = distinct_reports(warehouse, warehouse.partition_keys(f"{GEOPM_FRAMES}/header"))
    totals = load_frames(warehouse, "totals", keys)
    regions = geopm_energy.regions_across_hosts(load_frames(warehouse, "regions", keys), "r")
    warehouse.write_table("geopm_region_energy", regions)
    warehouse.write_table("geopm_report_energy", geopm_energy.sections_across_hosts(totals, "t"))


def geopm_after(warehouse: Warehouse, new: list[str]) -> None:
    geopm_tables.land(warehouse, new, new)


SOURCES: dict[str, tuple[Callable, Callable, Callable, Callable, Callable]] = {
    # template, store, before, after, rebuild of the history
    "clustercockpit": (cc_template, cc_store, cc_before, cc_after,
                       lambda w, keys: cc_tables.rebuild(w, *cc_rows(w, keys))),
    "geopm": (lambda folder: read_report(GEOPM_REPORT, report="t").frames(), geopm_store,
              geopm_before, geopm_after, geopm_tables.rebuild),
}


def measure(source: str, step: str, root: Path, stored: int, repeat: int, jobs: int) -> None:
    template_of, store, before, after, rebuild = SOURCES[source]
    warehouse = Warehouse(root / step)
    template = template_of(root / "template")
    history = store(warehouse, template, range(stored), jobs)
    if step == "after":
        rebuild(warehouse, history)
    walls, cpus = [], []
    for landing in range(repeat):
        new = store(warehouse, template, range(stored + landing * NEW,
                                               stored + (landing + 1) * NEW), jobs)
        wall, cpu = time.perf_counter(), cpu_s()
        (before if step == "before" else after)(warehouse, new)
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_s() - cpu)
    print(f"{source:<15} {stored:>6,} {step:<7} wall {' '.join(f'{w:7.3f}' for w in walls)} s"
          f"  cpu {' '.join(f'{c:7.3f}' for c in cpus)} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, nargs="+", default=[100, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20, help="jobs per ClusterCockpit block")
    parser.add_argument("--sources", nargs="+", default=list(SOURCES))
    parser.add_argument("--steps", nargs="+", default=["before", "after"])
    args = parser.parse_args()
    print(describe(pd, np, pa, deltalake), f"load average before: {load_average()}", sep="\n")
    print(f"{'source':<15} {'stored':>6} {'step':<7} each landing of {NEW}, {args.repeat} times")
    for source in args.sources:
        for stored in args.stored:
            for step in args.steps:
                with tempfile.TemporaryDirectory() as folder:
                    measure(source, step, Path(folder), stored, args.repeat, args.jobs)
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
