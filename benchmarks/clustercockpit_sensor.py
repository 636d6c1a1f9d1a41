"""Benchmark: the ClusterCockpit sensor's scan over a synthetic archive of 1,000,000 jobs.

1. Builds (once; kept in ``--archive`` and resumed block by block when
   interrupted) an archive of ``--jobs`` jobs of one cluster: 990 job ids per
   ``jobId // 1000`` block (slots 990-999 stay free for new ids), one start
   time each, increasing with the id. Each job folder holds a tiny valid
   ``meta.json`` and ``data.json``, hard links to its block's first job's
   files (no inode and no block per file: the disk is shared); the folders
   are real, 2 per job.
2. The first registration walk: ``scan`` from an empty cursor, tick after
   tick (cap ``--cap`` jobs per tick) until nothing is left; ticks, time.
3. Adds 100 jobs with the generator's real files: 60 with new ids in 6 old
   blocks (one of them with a start time older than every job: out of
   start-time order) and 40 in a new block. Times ONE tick (in a fresh
   process, from the saved cursor, ``now`` past the quiet period) and asserts
   it finds exactly those 100; its peak RSS (``getrusage``, the whole
   process) and the cursor size.
4. Removes the 100 (``--delete``: the whole archive).

Before the first walk the archive root's ctime is moved at least the clock
margin (60 s) past its last job, as on any archive whose jobs did not all
land in the last minute: the scan keeps a fingerprint in the cursor for each
job changed within the margin of the newest ctime it saw.

Run: ``.venv/bin/python benchmarks/clustercockpit_sensor.py [--jobs N]
[--archive DIR] [--cap N] [--delete]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from machine import describe, load_average

from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.layout import job_folder
from joulehouse.clustercockpit.scan import ScanState, scan
from joulehouse.treescan import CLOCK_MARGIN_NS

CLUSTER = "bench"
PER_BLOCK = 990  # job ids used per block of 1,000
START = 1_600_000_000
QUIET_S = 60.0
FULL_RESCAN_S = 86_400.0
TINY_META = '{{"jobId":{},"cluster":"bench","startTime":{},"duration":60,"tags":[]}}'
TINY_DATA = b'{"cpu_power":{"node":{"unit":{"base":"W"},"timestep":60,"series":[]}}}'


def job_of(index: int) -> tuple[int, int]:
    """(jobId, startTime) of the archive's ``index``-th job."""
    job_id = (index // PER_BLOCK) * 1000 + index % PER_BLOCK
    return job_id, START + 60 * index


def build(root: Path, jobs: int) -> float:
    """The archive of ``jobs`` jobs under ``root`` (resumed where a marker says); seconds."""
    started = time.perf_counter()
    write_archive_files(root, [CLUSTER])
    blocks = -(-jobs // PER_BLOCK)
    progress = root.parent / f".{root.name}.blocks-done"
    done = int(progress.read_text()) if progress.exists() else 0
    for block in range(done, blocks):
        first = None
        for index in range(block * PER_BLOCK, min(jobs, (block + 1) * PER_BLOCK)):
            job_id, start = job_of(index)
            folder = job_folder(root, CLUSTER, job_id, start)
            os.makedirs(folder, exist_ok=True)
            if first is None:
                first = folder
                (folder / "meta.json").write_text(TINY_META.format(job_id, start))
                (folder / "data.json").write_bytes(TINY_DATA)
                continue
            for name in ("meta.json", "data.json"):
                try:
                    os.link(first / name, folder / name)
                except FileExistsError:
                    pass
        progress.write_text(str(block + 1))
        if block % 100 == 99:
            print(f"    built {block + 1} of {blocks} blocks, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    return time.perf_counter() - started


def age_root(root: Path) -> None:
    """Rewrite version.txt (a new root ctime) once the margin has passed since now."""
    time.sleep(CLOCK_MARGIN_NS / 1e9 + 1)
    (root / "version.tmp").write_text("3\n")
    os.replace(root / "version.tmp", root / "version.txt")


def first_walk(root: Path, cap: int) -> tuple[ScanState, int, float, float, int]:
    """(state, ticks, seconds, slowest tick s, jobs reported) of the registration walk."""
    state, ticks, reported, slowest = ScanState(), 0, 0, 0.0
    started = time.perf_counter()
    while True:
        tick_start = time.perf_counter()
        result = scan(root, state, quiet_s=QUIET_S, max_jobs=cap, full_rescan_s=FULL_RESCAN_S)
        state = ScanState.from_json(result.state.to_json())
        slowest = max(slowest, time.perf_counter() - tick_start)
        ticks += 1
        reported += len(result.ready)
        assert not result.errors, result.errors
        if not result.ready and not result.unlisted and not result.pending:
            return state, ticks, time.perf_counter() - started, slowest, reported
        if ticks % 20 == 0:
            print(f"    tick {ticks}: {reported:,} reported, {result.unlisted} blocks unlisted",
                  flush=True)


def add_new_jobs(root: Path, jobs: int) -> list[str]:
    """100 new jobs: 10 new ids in each of 6 old blocks, 40 in a new block; their keys."""
    blocks = -(-jobs // PER_BLOCK)
    old = [round(i * (blocks - 2) / 5) for i in range(6)]
    specs = [JobSpec(cluster=CLUSTER, job_id=block * 1000 + slot, hosts=1, samples=3,
                     start_time=START + 60 * jobs + 100 * (block * 10 + slot))
             for block in old for slot in range(PER_BLOCK, 1000)]
    specs[0] = JobSpec(cluster=CLUSTER, job_id=specs[0].job_id, hosts=1, samples=3,
                       start_time=START - 3600)  # started before every job of the archive
    specs += [JobSpec(cluster=CLUSTER, job_id=blocks * 1000 + 500 + slot, hosts=1, samples=3,
                      start_time=START + 60 * jobs + slot) for slot in range(40)]
    return sorted(write_job(root, spec).key for spec in specs)


def timed_tick(root: Path, cursor_file: Path, cap: int) -> None:
    """ONE tick from the saved cursor (in this fresh process); prints a JSON line."""
    state = ScanState.from_json(cursor_file.read_text())
    started = time.perf_counter()
    result = scan(root, state, quiet_s=QUIET_S, max_jobs=cap, full_rescan_s=FULL_RESCAN_S,
                  now=time.time() + QUIET_S + 1)
    cursor = result.state.to_json()
    seconds = time.perf_counter() - started
    print(json.dumps({
        "seconds": seconds, "keys": sorted(job.ref.key for job in result.ready),
        "pending": result.pending, "unlisted": result.unlisted, "rescanned": result.rescanned,
        "errors": [str(error) for error in result.errors], "cursor_bytes": len(cursor),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--archive", type=Path,
                        default=Path("/tmp/joulehouse-bench/cc-sensor-archive"))
    parser.add_argument("--cap", type=int, default=10_000, help="max_jobs per tick")
    parser.add_argument("--delete", action="store_true", help="remove the archive at the end")
    parser.add_argument("--tick", type=Path, help=argparse.SUPPRESS)  # the timed child
    args = parser.parse_args()
    root = args.archive
    if args.tick:
        timed_tick(root, args.tick, args.cap)
        return
    print(describe(extra=f"load average {load_average()}"))
    root.parent.mkdir(parents=True, exist_ok=True)
    seconds = build(root, args.jobs)
    print(f"archive of {args.jobs:,} jobs in {-(-args.jobs // PER_BLOCK)} blocks at {root}: "
          f"{seconds:.0f} s to build (this run)", flush=True)
    age_root(root)
    state, ticks, seconds, slowest, reported = first_walk(root, args.cap)
    assert reported == args.jobs, reported
    cursor_file = root.parent / f".{root.name}.cursor"
    cursor_file.write_text(state.to_json())
    print(f"first walk: {reported:,} jobs in {ticks} ticks of at most {args.cap:,}, "
          f"{seconds:.1f} s (slowest tick {slowest:.2f} s); cursor "
          f"{len(cursor_file.read_text()):,} bytes; load average {load_average()}", flush=True)

    expected = add_new_jobs(root, args.jobs)
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--archive", str(root), "--cap", str(args.cap),
             "--tick", str(cursor_file)], check=True, capture_output=True, text=True)
        tick = json.loads(child.stdout.splitlines()[-1])
        assert tick["keys"] == expected, sorted(set(tick["keys"]) ^ set(expected))
        assert tick["pending"] == 0 and tick["unlisted"] == 0 and not tick["errors"]
        print(f"tick with 100 new jobs (6 old blocks, 1 new; 1 out of start-time order): "
              f"{tick['seconds']:.3f} s (target 10 s), found exactly the 100, "
              f"{tick['rescanned']} block(s) rescanned; peak RSS {tick['peak_rss_mib']:.0f} MiB "
              f"(target 500 MB); cursor {tick['cursor_bytes']:,} bytes; "
              f"load average {load_average()}")
    finally:
        for key in expected:  # the folders they made, for the next run
            cluster, job_id, start = key.split("/")
            folder = job_folder(root, cluster, int(job_id), int(start))
            shutil.rmtree(folder.parent)
            if not any(folder.parent.parent.iterdir()):
                folder.parent.parent.rmdir()
        cursor_file.unlink()
        if args.delete:
            shutil.rmtree(root)
            (root.parent / f".{root.name}.blocks-done").unlink()


if __name__ == "__main__":
    main()
