"""A job-id block of an archive, read whole: the unit of work of the Dagster layer.

A block is the archive's own folder ``<cluster>/<jobId // 1000>``: at most
1000 job ids, each with any number of start times (a reused job id is
another job), so its size is bounded whatever the archive's. Its key is
``<cluster>/<jobId // 1000>`` (:attr:`~.layout.JobRef.block`). The tree is
the index: a block's jobs are listed from its folder alone
(:func:`~.layout.find_jobs` with ``block``, symlinks leading outside the
root refused), so no side index is kept and jobs landing out of start-time
order need nothing special.

:func:`read_block` reads every job of a block once (meta.json and the
streamed data file): its ``cc_jobs`` rows, energy per host and per job and
metric, per-metric statistics and schema warnings; the tables of all the
block's jobs are schema-checked at once
(:func:`~.measure.check_measurements`). A job that cannot be read, or whose
tables fail their schemas, is left out with its InputError; :func:`keep_stored` then takes that
job's rows from what was stored for the block before, so a failed re-read
loses nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from joulehouse.clustercockpit.conformance import SchemaWarning
from joulehouse.clustercockpit.jobs import job_row, jobs_frame
from joulehouse.clustercockpit.layout import find_jobs
from joulehouse.clustercockpit.measure import JobMeasurement, check_measurements, measure_job
from joulehouse.clustercockpit.readers import each_job, read_version
from joulehouse.clustercockpit.schemas import (
    HOST_ENERGY_SCHEMA,
    JOB_ENERGY_SCHEMA,
    METRIC_STATS_SCHEMA,
    empty_table,
)
from joulehouse.errors import InputError

#: The frames of a block, by name, with their schemas' names (``jobs``: cc_jobs rows).
FRAMES = ("jobs", "host_energy", "job_energy", "metric_stats")


def parse_block_key(key: str) -> tuple[str, int]:
    """(cluster, block) of a block key (:attr:`~.layout.JobRef.block` formats it); InputError naming the key when it is none (so only
    that partition fails)."""
    cluster, _, block = key.rpartition("/")
    if not cluster or "/" in cluster or not block.isdigit():
        raise InputError(key, "not a job-id block key <cluster>/<jobId // 1000>")
    return cluster, int(block)


@dataclass
class BlockRead:
    """What one read of a block gave: its frames (:data:`FRAMES`; the jobs read only),
    the measured jobs, their schema warnings, and what could not be read, with its
    error: jobs by job key, a folder that could not be listed or a bad cluster.json by
    its path."""

    frames: dict[str, pd.DataFrame]
    measured: list[JobMeasurement]
    warnings: list[SchemaWarning]
    failed: dict[str, InputError] = field(default_factory=dict)
    listed: int = 0  # job folders found in the block
    unlisted: bool = False  # a folder of the block could not be listed (leads outside)


def read_block(root: str | os.PathLike[str], key: str, *, check_schema: bool = True,
               max_missing: int = 1) -> BlockRead:
    """Read every job of block ``key`` of the archive at ``root`` once.

    Raises InputError when the archive itself cannot be read (version.txt) or
    the block folder does not exist. A missing or bad cluster.json is one
    failure (key: the file) and the jobs are still read with the known power
    metric names, as :func:`~.readers.each_job` does.
    """
    root = Path(root)
    cluster, block = parse_block_key(key)
    version = read_version(root)
    folder = root / cluster / str(block)
    if not folder.is_dir():
        raise InputError(folder, "no such job-id block folder in the archive")
    listing: list[InputError] = []
    refs = list(find_jobs(root, cluster, block=block, errors=listing))
    failed = {err.path: err for err in listing}
    errors: list[InputError] = []
    read, configs = [], {}
    for ref, config in each_job(root, refs, errors):
        try:
            read.append(measure_job(ref, config, version, check_schema=check_schema,
                                    max_missing=max_missing, check=False))
        except InputError as err:
            failed[ref.key] = err
            continue
        configs[ref.key] = config
    measured, bad = check_measurements(read)  # the block's tables checked at once
    failed |= {m.ref.key: err for m, err in bad}
    failed |= {err.path: err for err in errors}
    warnings = [warning for m in measured for warning in m.warnings]
    rows = [job_row(m.ref, m.meta, configs[m.ref.key], version) for m in measured]
    frames = {"jobs": jobs_frame(rows, version),
              "host_energy": _concat([m.host_energy for m in measured], HOST_ENERGY_SCHEMA),
              "job_energy": _concat([m.job_energy for m in measured], JOB_ENERGY_SCHEMA),
              "metric_stats": _concat([m.stats for m in measured], METRIC_STATS_SCHEMA)}
    return BlockRead(frames, measured, warnings, failed, len(refs), bool(listing))


def _concat(parts: list[pd.DataFrame], schema) -> pd.DataFrame:
    parts = [part for part in parts if len(part)]
    return pd.concat(parts, ignore_index=True) if parts else empty_table(schema)


def kept_jobs(read: BlockRead, stored: dict[str, pd.DataFrame] | None) -> set[str]:
    """The keys of the stored jobs that :func:`keep_stored` keeps: not read this time, and
    failed this time (or in a folder that could not be listed)."""
    if not stored:
        return set()
    read_jobs = set(read.frames["jobs"]["job"])
    return {job for job in set(stored["jobs"]["job"]) - read_jobs
            if read.unlisted or job in read.failed}


def keep_stored(read: BlockRead, stored: dict[str, pd.DataFrame] | None) -> dict[str, pd.DataFrame]:
    """The frames to store for the block: those read, plus the stored rows of every job
    that failed this time (a failed re-read loses nothing). When a folder of the block
    could not be listed, every stored job not read this time is kept (which jobs it holds
    is unknown)."""
    kept = kept_jobs(read, stored)
    if not kept:
        return read.frames
    merged = {}
    for name in FRAMES:
        old = stored.get(name)
        rows = old[old["job"].isin(kept)] if old is not None and len(old) else None
        merged[name] = read.frames[name] if rows is None or rows.empty else pd.concat(
            [df for df in (read.frames[name], rows) if len(df)], ignore_index=True)
    merged["jobs"] = merged["jobs"].sort_values("job", ignore_index=True)
    return merged
