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

``--part day`` (issue 28, cc_rollup kept from its groups' sums): ``land`` of a new block of
10 jobs into a UTC day already holding ``--day-jobs`` jobs (1,000 and 100,000: a centre's
10x rate of 3 jobs/s makes 260,000), ``--repeat`` landings in a row, each timed (CPU of
the process, all threads, and wall). The day's jobs are copies of the generated job (ids
0.., a second apart, 50 users) written fast, not through Dagster runs: cc_jobs and
cc_job_energy appended a block (1,000 jobs) per file, as landings leave them, then a
``rebuild`` writes the rollup (not timed). The tables' compaction (``entry_sync``'s, due
once over 64 small files: once every 64 landings) is held off throughout, before and
after alike: it would merge the history's files at the first timed landing. ``--code``
imports ``joulehouse`` from another checkout (the code before: a detached worktree of
main at its commit), so that before and after run the same script::

    git -C /work/main worktree add --detach /tmp/rollup-before c9cafdb
    .venv/bin/python benchmarks/kept_tables_landing.py --part day --code /tmp/rollup-before
    .venv/bin/python benchmarks/kept_tables_landing.py --part day
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import code_root, describe, load_average

#: The checkout whose ``joulehouse`` is measured (``--code``; this one by default).
CODE = code_root(ROOT)
sys.path.insert(0, str(CODE))

from joulehouse import entry_sync, entry_table
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


def cc_copies(template: dict[str, pd.DataFrame], job_ids: np.ndarray, starts: pd.Series,
              users: int | None = None) -> dict[str, pd.DataFrame]:
    """Copies of the template job, ids ``job_ids`` starting at ``starts`` (UTC), user
    ``u<id % users>`` (the template's when None)."""
    keys = "alpha/" + pd.Series(job_ids).astype(str) + "/" + (
        starts.astype("int64") // 10**9).astype(str)
    frames = {}
    for name, user in (("jobs", "hpc_user"), ("job_energy", "user")):
        rows = template[name]
        copy = rows.iloc[np.tile(np.arange(len(rows)), len(job_ids))].reset_index(drop=True)
        per_row = np.repeat(np.arange(len(job_ids)), len(rows))
        copy["job"], copy["job_id"] = keys.to_numpy()[per_row], job_ids[per_row]
        start = starts.iloc[per_row].reset_index(drop=True)
        if users is not None:
            copy[user] = "u" + pd.Series(job_ids[per_row] % users).astype(str)
        if name == "jobs":
            copy = copy.assign(start_time=start.astype("int64") // 10**9, start_time_utc=start,
                               end_time_utc=start + (copy["end_time_utc"]
                                                     - copy["start_time_utc"]))
        else:
            copy["start_time"] = start
        frames[name] = copy
    return frames


def cc_block(template: dict[str, pd.DataFrame], block: int, jobs: int
             ) -> dict[str, pd.DataFrame]:
    """Block ``alpha/<block>``: ``jobs`` copies of the template job, on the block's day."""
    starts = pd.Series(pd.Timestamp("2025-01-01", tz="UTC") + (block % 365) * DAY
                       + pd.to_timedelta(np.arange(jobs), unit="min"))
    return cc_copies(template, block * 1000 + np.arange(jobs), starts)


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


# --- ClusterCockpit: a landing into a day of many jobs (--part day) ---------------------

DAY_START = pd.Timestamp("2025-03-01", tz="UTC")
DAY_USERS = 50


def day_copies(template: dict[str, pd.DataFrame], job_ids: np.ndarray) -> dict[str, pd.DataFrame]:
    """Copies of the template job on the day, a second apart (wrapping at midnight)."""
    return cc_copies(template, job_ids, pd.Series(DAY_START + pd.to_timedelta(
        job_ids % 86_400, unit="s")), users=DAY_USERS)


def measure_day(root: Path, day_jobs: int, repeat: int) -> None:
    """``repeat`` landings of NEW jobs (a block each) into a day of ``day_jobs`` jobs."""
    warehouse = Warehouse(root / "day")
    template = cc_template(root / "template")
    entry_sync.COMPACT_ABOVE = 10**9  # held off: see the docstring
    history = {"jobs": [], "job_energy": []}
    for first in range(0, day_jobs, 1000):
        frames = day_copies(template, np.arange(first, min(first + 1000, day_jobs)))
        for name, kept in (("jobs", cc_tables.JOBS), ("job_energy", cc_tables.JOB_ENERGY)):
            entry_table.replace_where(warehouse, kept.table, kept.ready(frames[name]), "")
            history[name].append(frames[name])
    cc_tables.rebuild(warehouse, *(pd.concat(history[name], ignore_index=True)
                                   for name in ("jobs", "job_energy")))
    walls, cpus = [], []
    for landing in range(repeat):
        block = day_jobs // 1000 + 1 + landing
        frames = day_copies(template, block * 1000 + np.arange(NEW))
        wall, cpu = time.perf_counter(), cpu_s()
        cc_tables.land(warehouse, [f"alpha/{block}"],
                       lambda keys, frames=frames: (frames["jobs"], frames["job_energy"]))
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_s() - cpu)
    print(f"{day_jobs:>8,} jobs that day  wall {' '.join(f'{w:6.3f}' for w in walls)} s"
          f"  cpu {' '.join(f'{c:6.3f}' for c in cpus)} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, nargs="+", default=[100, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20, help="jobs per ClusterCockpit block")
    parser.add_argument("--sources", nargs="+", default=list(SOURCES))
    parser.add_argument("--steps", nargs="+", default=["before", "after"])
    parser.add_argument("--part", choices=["blocks", "day"], default="blocks")
    parser.add_argument("--day-jobs", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--code", type=Path, default=ROOT,
                        help="the checkout whose joulehouse is measured")
    args = parser.parse_args()
    print(describe(pd, np, pa, deltalake), f"load average before: {load_average()}", sep="\n")
    if args.part == "day":
        print(f"code: {cc_tables.__file__}; each landing of {NEW} jobs, {args.repeat} in a row")
        for day_jobs in args.day_jobs:
            with tempfile.TemporaryDirectory() as folder:
                measure_day(Path(folder), day_jobs, args.repeat)
        print(f"load average after: {load_average()}")
        return 0
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
