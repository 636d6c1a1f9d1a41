"""Benchmark: the ClusterCockpit core, (1) cc_jobs from meta.json and (2) one emmy job's energy.

(1) Builds an archive of ``--jobs`` job folders under ``benchmarks/.data/``
from the bundled example's real meta.json files (fritz with its job script,
taurus pre-v3, the emmy job's meta; new jobIds and start times, one tiny
data.json each), then times, interleaved, best and median of ``--rounds``:

- Joulehouse: ``read_jobs`` (walk, read and check every meta.json against
  its folder, v1/v2 -> v3, cc-backend's energy formula, one validated frame);
- baseline: ``os.walk`` + ``json.load`` of every meta.json + ``pd.DataFrame``
  of the records (no checks, no normalisation, no validation).

The issue's target is 2,000 jobs/s on this 2-CPU machine (cc-backend's Go
importer: about 2,100 jobs/s with 4 workers, its one published figure:
900k jobs in 430 s, 2021, SSD; not runnable here: no Go toolchain, not on PyPI).

(2) One real emmy job (32 nodes, 24 h at 60 s, data.json.gz 0.86 MB,
13 MB of JSON; needs ../shared/peer-data): energy of rapl_power per host
and for the job. Joulehouse: read_meta + read_cluster + read_samples (the
file streamed, only rapl_power converted) + host_energy + job_energy;
baseline: ``json.load`` of the whole gunzipped file + numpy's trapezoid per
host (nulls dropped, no edges, no gaps, no checks). Peak Python memory of
one call of each (tracemalloc) shows the streaming. Target: at most 0.5 s.

(3) ``--tiny-jobs N`` instead: the per-job fixed cost. N generated tiny
jobs (:mod:`joulehouse.clustercockpit.generator`: 1 host, 11 samples of
cpu_power and 2 sockets of mem_bw) under ``benchmarks/.data/``; times
``measure_jobs`` (tables schema-checked per batch) against the same jobs
measured one by one with ``measure_job`` (each job's three tables checked
alone, as ``measure_jobs`` did before), jobs/s, interleaved; both without
the JSON-schema pass, as ``joulehouse energy cc``. Run from another checkout
(its ``joulehouse`` on the path) it times that checkout's code.

Run: ``.venv/bin/python benchmarks/clustercockpit_core.py [--jobs N] [--rounds N]
[--tiny-jobs N]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time
import tracemalloc
from pathlib import Path

import ijson
import jsonschema
import numpy as np
import pandas as pd
from machine import describe, load_average

from joulehouse.clustercockpit.energy import host_energy, job_energy
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.layout import JobRef, job_folder
from joulehouse.clustercockpit.measure import measure_job, measure_jobs
from joulehouse.clustercockpit.readers import (
    each_job,
    read_cluster,
    read_meta,
    read_samples,
    read_version,
)

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "clustercockpit" / "archive"
DATA = HERE / ".data" / "cc-meta-archive"
EMMY_ROOT = HERE.parents[1] / "shared" / "peer-data" / "clustercockpit" / \
    "cc-backend-testdata-archive"
EMMY_JOB = ("emmy", 1403244, 1608923076)
TEMPLATES = ["fritz/398/955/1675956725", "fritz/398/764/1675954353",
             "taurus/20639/587/1635856524", "emmy/1403/244/1608923076"]
TINY_DATA = b'{"cpu_power":{"node":{"unit":{"base":"W"},"timestep":60,"series":[]}}}'


def build_archive(jobs: int) -> Path:
    """``jobs`` job folders of real meta.json templates (kept when already built)."""
    marker = DATA / f".built-{jobs}"
    if marker.exists():
        return DATA
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    shutil.copyfile(EXAMPLE / "version.txt", DATA / "version.txt")
    templates = []
    for template in TEMPLATES:
        cluster = template.split("/")[0]
        (DATA / cluster).mkdir(exist_ok=True)
        shutil.copyfile(EXAMPLE / cluster / "cluster.json", DATA / cluster / "cluster.json")
        templates.append(json.loads((EXAMPLE / template / "meta.json").read_text()))
    for index in range(jobs):
        meta = dict(templates[index % len(templates)])
        meta["jobId"] = 1_000_000 + index // 2  # every jobId twice: reused ids
        meta["startTime"] = 1_600_000_000 + 37 * index
        folder = job_folder(DATA, meta["cluster"], meta["jobId"], meta["startTime"])
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps(meta))
        (folder / "data.json").write_bytes(TINY_DATA)
    marker.touch()
    return DATA


def build_tiny_archive(jobs: int) -> Path:
    """``jobs`` generated tiny jobs of one cluster (kept when already built)."""
    root = HERE / ".data" / f"cc-tiny-{jobs}"
    if (root / ".built").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    write_archive_files(root, ["bench"])
    for index in range(jobs):
        write_job(root, JobSpec(cluster="bench", job_id=1_000_000 + index, hosts=1, samples=11,
                                start_time=1_700_000_000 + 600 * index, null_every=4))
    (root / ".built").touch()
    return root


def one_by_one(root: Path) -> int:
    """Every job measured alone by measure_job (its tables checked alone)."""
    version, errors = read_version(root), []
    return sum(1 for ref, cluster in each_job(root, None, errors)
               if measure_job(ref, cluster, version, check_schema=False))


def tiny_jobs(jobs: int, rounds: int) -> None:
    root = build_tiny_archive(jobs)
    measured, errors = measure_jobs(root, check_schema=False)
    assert len(measured) == jobs and not errors and one_by_one(root) == jobs
    result = timed({"measure_jobs": lambda: measure_jobs(root, check_schema=False),
                    "one_by_one": lambda: one_by_one(root)}, rounds)
    print(f"(3) {jobs} tiny jobs (1 host, 11 samples, 2 metrics), best / median of {rounds}:")
    for name, (best, median) in result.items():
        print(f"    {name}: {best:.2f} / {median:.2f} s = {jobs / best:,.1f} / "
              f"{jobs / median:,.1f} jobs/s")


def baseline_jobs(root: Path) -> pd.DataFrame:
    """Every meta.json loaded as it is, into a DataFrame of records."""
    records = []
    for folder, _, files in os.walk(root):
        if "meta.json" in files:
            with open(os.path.join(folder, "meta.json"), "rb") as handle:
                records.append(json.load(handle))
    return pd.DataFrame.from_records(records)


def ours_energy(root: Path) -> pd.DataFrame:
    ref = JobRef(root, *EMMY_JOB)
    meta = read_meta(ref)
    cluster = read_cluster(root, ref.cluster)
    samples = read_samples(ref, meta, cluster, metrics={"rapl_power"})
    return job_energy(meta, host_energy(meta, samples, cluster))


def baseline_energy(root: Path) -> float:
    ref = JobRef(root, *EMMY_JOB)
    with gzip.open(ref.path / "data.json.gz") as handle:
        data = json.load(handle)
    total = 0.0
    for series in data["rapl_power"]["node"]["series"]:
        values = np.array(series["data"], dtype="float64")
        times = np.arange(len(values)) * 60.0
        present = ~np.isnan(values)
        total += float(np.trapezoid(values[present], times[present]))
    return total


def timed(functions: dict, rounds: int) -> dict[str, tuple[float, float]]:
    """(best, median) wall seconds of each function, interleaved, after a warm-up call."""
    for function in functions.values():
        function()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


def peak_mib(function) -> float:
    tracemalloc.start()
    function()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tiny-jobs", type=int, help="time only (3) over this many jobs")
    args = parser.parse_args()
    print(describe(pd, np, ijson, jsonschema, extra=f"load average {load_average()}"))
    if args.tiny_jobs:
        tiny_jobs(args.tiny_jobs, args.rounds)
        print(f"load average at end {load_average()}")
        return

    root = build_archive(args.jobs)
    result = timed({"joulehouse": lambda: read_jobs(root),
                    "baseline": lambda: baseline_jobs(root)}, args.rounds)
    table = read_jobs(root)
    assert len(table.jobs) == args.jobs and not table.errors
    ours, base = result["joulehouse"], result["baseline"]
    print(f"(1) cc_jobs from {args.jobs} meta.json, best / median of {args.rounds}:")
    print(f"    joulehouse read_jobs: {ours[0]:.3f} / {ours[1]:.3f} s = "
          f"{args.jobs / ours[0]:,.0f} / {args.jobs / ours[1]:,.0f} jobs/s (target 2,000)")
    print(f"    baseline json.load + DataFrame: {base[0]:.3f} / {base[1]:.3f} s = "
          f"{args.jobs / base[0]:,.0f} jobs/s")
    print(f"    ratio joulehouse / baseline time, best: {ours[0] / base[0]:.2f}x; "
          f"vs cc-backend's published 2,100 jobs/s: {args.jobs / ours[0] / 2100:.2f}x")

    if not (EMMY_ROOT / "version.txt").is_file():
        print(f"(2) skipped: peer data not found at {EMMY_ROOT}")
        return
    result = timed({"joulehouse": lambda: ours_energy(EMMY_ROOT),
                    "baseline": lambda: baseline_energy(EMMY_ROOT)}, args.rounds)
    ours, base = result["joulehouse"], result["baseline"]
    energy = ours_energy(EMMY_ROOT)["energy_j"].item()
    print(f"(2) emmy job {EMMY_JOB[1]} rapl_power energy ({energy / 3.6e6:.2f} kWh; baseline "
          f"{baseline_energy(EMMY_ROOT) / 3.6e6:.2f} kWh), best / median of {args.rounds}:")
    print(f"    joulehouse: {ours[0]:.3f} / {ours[1]:.3f} s (target 0.5 s), peak "
          f"{peak_mib(lambda: ours_energy(EMMY_ROOT)):.1f} MiB")
    print(f"    baseline json.load + numpy: {base[0]:.3f} / {base[1]:.3f} s, peak "
          f"{peak_mib(lambda: baseline_energy(EMMY_ROOT)):.1f} MiB")
    print(f"    ratio joulehouse / baseline time, best: {ours[0] / base[0]:.2f}x")


if __name__ == "__main__":
    main()
