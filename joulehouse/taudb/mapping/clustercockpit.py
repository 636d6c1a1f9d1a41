"""A ClusterCockpit job as a TAUdb trial; ``docs/taudb-mapping.md``.

The job ``cluster/jobId/startTime`` becomes the trial of that name. Its
threads are its hosts (node = the host's position in name order, context 0,
thread 0), so TAU's MEAN, MIN, MAX and STDDEV threads are statistics over
hosts. One timer, ``job`` (group ``CLUSTERCOCKPIT_JOB``, 1 call, no
subroutines), whose metrics are ``TIME`` (the job's duration, µs) and
``ENERGY <metric> (J)`` per energy metric (each host's integrated power or
counter energy). User events: every metric's per-host statistics
(``<metric> (<unit>)``: samples, min, max, mean, SumSqr). Metadata: the host,
its energy's coverage per metric, and meta.json flattened (``meta.<key>``,
the same on every host, so primary metadata of the trial).

Values come from the core (:func:`~joulehouse.clustercockpit.measure.measure_jobs`);
nothing is parsed or integrated here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulehouse.clustercockpit.layout import LEVELS, JobRef, archive_level, fingerprint
from joulehouse.clustercockpit.measure import JobMeasurement, measure_jobs
from joulehouse.errors import InputError
from joulehouse.taudb.mapping.gpu import flatten_system_info
from joulehouse.taudb.model import DATA_SOURCE_OTHER, THREAD_COLUMNS, TrialData

TIMER = "job"
TIMER_GROUP = "CLUSTERCOCKPIT_JOB"
TIME_METRIC = "TIME"
JOB_LEVEL = LEVELS.index("job")


def energy_metric(metric: str) -> str:
    """The TAUdb metric of a ClusterCockpit energy metric: ``ENERGY rapl_power (J)``."""
    return f"ENERGY {metric} (J)"


def user_event(metric: str, unit: str) -> str:
    """The TAU user event of a metric's samples: ``mem_bw (B/s)``, ``cpu_load`` when unitless."""
    return f"{metric} ({unit})" if unit else metric


# --- reading a job ---------------------------------------------------------------------------

def read_job(folder: str | Path, *, max_missing: int = 1) -> TrialData:
    """Measure the job folder ``folder`` of an archive with the core and map it to a trial.

    The archive root is the nearest folder up holding version.txt, four levels
    above a job folder. Raises InputError naming the folder when it is another
    folder of an archive (saying which to give), or the core's InputError for
    a job that cannot be read.
    """
    source = Path(folder).resolve()
    found = archive_level(source)
    if found is None:
        raise InputError(source, "not inside a ClusterCockpit job archive (no version.txt "
                         "up to four levels above)")
    level, root = found
    if level != JOB_LEVEL:
        jobs = list(islice(_folders_below(source, JOB_LEVEL - level), 4))  # not millions
        shown = ", ".join([str(job.relative_to(source)) for job in jobs[:3]]
                          + ["..."] * (len(jobs) > 3))
        where = f"its job folders ({shown})" if jobs else "a job folder; it holds none"
        what = ("a ClusterCockpit job archive" if level == 0 else
                f"a {LEVELS[level]} folder of a ClusterCockpit job archive")
        raise InputError(source, f"{what}: a trial is one job, give {where}")
    measured, errors = measure_jobs(root, [JobRef.from_path(root, source)], check_schema=False,
                                    max_missing=max_missing)
    if not measured:  # else only cluster.json failed: the known power metric names were used
        raise errors[-1]
    return job_trial(measured[0])


def _folders_below(folder: Path, depth: int) -> Iterator[Path]:
    """The folders ``depth`` levels below ``folder``, in name order, listed as they are asked for."""
    if depth == 0:
        yield folder
        return
    for child in sorted(entry for entry in folder.iterdir() if entry.is_dir()):
        yield from _folders_below(child, depth - 1)


# --- the mapping -----------------------------------------------------------------------------

def job_trial(m: JobMeasurement) -> TrialData:
    """The trial of one measured job.

    Threads are the hosts with samples of any metric. An energy metric is kept
    when every host has a value of it (TAUdb has no missing values); a host's
    energy over the bridged part of the window is its value, and the share it
    covers is the host's metadata. A host energy that covers nothing
    (``covered_fraction`` 0: no bridged samples) is missing, not 0. ``source_key`` is the job folder (a reload
    replaces the trial); ``fingerprint`` its files' names, sizes and mtimes.
    """
    per_host = m.host_energy
    covering = per_host[per_host["covered_fraction"].to_numpy() > 0]
    hosts = sorted(set(m.stats["host"]) | set(covering["host"]))
    if not hosts:
        raise InputError(m.ref.path, "no samples of any metric: a trial needs a host")
    node = {host: rank for rank, host in enumerate(hosts)}
    energy: dict[str, dict[str, float]] = {}  # metric -> host -> J
    for host, metric, joules in zip(covering["host"], covering["metric"], covering["energy_j"],
                                    strict=True):
        energy.setdefault(metric, {})[host] = float(joules)
    kept = [metric for metric in sorted(energy)
            if not any(math.isnan(energy[metric].get(host, math.nan)) for host in hosts)]
    metrics = [TIME_METRIC, *(energy_metric(metric) for metric in kept)]
    threads = pd.DataFrame({"node_rank": np.arange(len(hosts)), "context_rank": 0,
                            "thread_rank": 0})
    duration_us = float(m.meta["duration"]) * 1e6
    values = [row for host in hosts for row in [
        (host, TIME_METRIC, duration_us),
        *((host, energy_metric(metric), energy[metric][host]) for metric in kept)]]
    stats = m.stats[m.stats["samples"].to_numpy() > 0]
    events = [user_event(metric, unit) for metric, unit in
              zip(stats["metric"], stats["unit"], strict=True)]
    attributes = _attributes(m, hosts)
    metadata = [(host, name, value) for host in hosts for name, value in attributes[host].items()]
    return TrialData(
        name=m.ref.key,
        data_source=DATA_SOURCE_OTHER,
        metrics=metrics,
        threads=threads,
        timers=_by_thread(node, [(host, TIMER, TIMER_GROUP, 1.0, 0.0) for host in hosts],
                          {"name": object, "group_names": object, "calls": "float64",
                           "subroutines": "float64"}),
        timer_values=_by_thread(node, [(host, TIMER, metric, joules, joules)
                                       for host, metric, joules in values],
                                {"name": object, "metric": object, "inclusive": "float64",
                                 "exclusive": "float64"}),
        counters=_by_thread(node, list(zip(
            stats["host"], events, stats["samples"], stats["max"], stats["min"], stats["mean"],
            stats["sum_squares"], strict=True)),
            {"name": object, "sample_count": "int64", "maximum": "float64",
             "minimum": "float64", "mean": "float64", "sum_squares": "float64"}),
        metadata=_by_thread(node, metadata, {"name": object, "value": object}),
        source_key=str(m.ref.path.resolve()),
        fingerprint=fingerprint(m.ref.path),
        trial_metadata={"joulehouse.source": "clustercockpit job"},
    )


def _by_thread(node: dict[str, int], rows: list[tuple], columns: dict[str, Any]
               ) -> pd.DataFrame:
    """A frame of ``rows`` (host, then ``columns`` with their dtypes) with the host as
    thread ranks, sorted by thread (rows of one thread in their given order)."""
    ranks = [node[row[0]] for row in rows]
    order = sorted(range(len(rows)), key=ranks.__getitem__)
    node_rank, context_rank, thread_rank = THREAD_COLUMNS
    frame = {node_rank: np.array([ranks[i] for i in order], dtype="int64"),
             context_rank: np.zeros(len(rows), "int64"),
             thread_rank: np.zeros(len(rows), "int64")}
    for position, (name, dtype) in enumerate(columns.items(), start=1):
        frame[name] = np.array([rows[i][position] for i in order], dtype=dtype)
    return pd.DataFrame(frame)  # no ``columns=``: four times the cost of the dict's own order


def _attributes(m: JobMeasurement, hosts: list[str]) -> dict[str, dict[str, str]]:
    """The metadata of each host (thread), as strings: the host, its energy's coverage per
    metric, meta.json flattened."""
    coverage: dict[str, dict[str, str]] = {host: {} for host in hosts}
    per_host = m.host_energy
    for host, metric, covered, gap_s in zip(per_host["host"], per_host["metric"],
                                            per_host["covered_fraction"], per_host["gap_s"],
                                            strict=True):
        if host in coverage:
            coverage[host][f"energy.{metric}.covered_fraction"] = repr(float(covered))
            coverage[host][f"energy.{metric}.gap_s"] = repr(float(gap_s))
    meta = flatten_system_info(m.meta, prefix="meta")
    return {host: {"host": host, **coverage[host], **meta} for host in hosts}
