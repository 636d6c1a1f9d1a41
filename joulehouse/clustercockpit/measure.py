"""A job measured whole: its energy, statistics and schema warnings from one read.

The entry point for callers (Dagster assets, CLI, TAUdb mapping):
:func:`measure_job` reads one job's files once (data.json streamed) and
returns every per-job table; :func:`measure_jobs` does it for many jobs,
leaving out only a job that cannot be read (its InputError returned).

The schema check of the per-job tables costs about as much as computing
them (a fixed cost per frame, column and check: :mod:`joulehouse.validation`),
so many jobs' tables are checked at once (:func:`check_measurements`: per
batch here, per block in :mod:`.blocks`); only when a batch fails is each
job checked alone, so one bad job fails alone, with the error it gets from
:func:`measure_job`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any

import pandas as pd

from joulehouse.clustercockpit.aggregate import metric_stats
from joulehouse.clustercockpit.conformance import DataConformance, SchemaWarning, meta_warnings
from joulehouse.clustercockpit.energy import host_energy, job_energy, left_out
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.clustercockpit.readers import (
    ClusterConfig,
    each_job,
    load_json,
    read_meta,
    read_samples,
    read_version,
)
from joulehouse.clustercockpit.schemas import (
    HOST_ENERGY_SCHEMA,
    JOB_ENERGY_SCHEMA,
    METRIC_STATS_SCHEMA,
    empty_table,
)
from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut
from joulehouse.validation import passes, validate

#: Jobs whose tables :func:`measure_jobs` checks at once (bounds a batch's extra memory).
BATCH_JOBS = 500
#: A job's tables in the order they are checked: (attribute, schema, name in errors).
CHECKED = (("host_energy", HOST_ENERGY_SCHEMA, "cc_host_energy"),
           ("job_energy", JOB_ENERGY_SCHEMA, "cc_job_energy"),
           ("stats", METRIC_STATS_SCHEMA, "cc_metric_stats"))


@dataclass(frozen=True)
class JobMeasurement:
    """One job's tables (see :mod:`.schemas`) and its schema warnings."""

    ref: JobRef
    meta: dict[str, Any]
    host_energy: pd.DataFrame
    job_energy: pd.DataFrame
    stats: pd.DataFrame
    warnings: list[SchemaWarning]

    def left_out(self) -> list[LeftOut]:
        """What the job's tables give no ``energy_facts`` row of (:func:`.energy.left_out`),
        each record's input the job folder."""
        return left_out(self.host_energy, self.job_energy, str(self.ref.path))


def measure_job(ref: JobRef, cluster: ClusterConfig, version: int, *,
                check_schema: bool = True, max_missing: int = 1,
                check: bool = True) -> JobMeasurement:
    """Read ``ref`` once; energy per host and job, statistics, schema warnings.

    ``check_schema`` validates meta.json and data.json against the archive
    ``version``'s JSON schemas (about 1 s for a 13 MB data.json): the
    violations are returned, never raised. Bad input raises InputError.
    ``check=False`` leaves the tables' pandera check to the caller
    (:func:`check_measurements`).
    """
    meta = read_meta(ref)
    warnings: list[SchemaWarning] = []
    observe = None
    if check_schema:
        warnings += meta_warnings(ref.key, ref.meta_path, load_json(ref.meta_path), version)
        data_path = ref.data_path()
        if data_path is not None:
            conformance = DataConformance(ref.key, data_path, version)
            observe = conformance.observe
    samples = read_samples(ref, meta, cluster, observe=observe)
    if observe is not None:
        warnings += conformance.warnings()
    per_host = host_energy(meta, samples, cluster, max_missing=max_missing, check=False)
    measured = JobMeasurement(
        ref, meta, per_host, job_energy(meta, per_host, check=False),
        metric_stats(meta, samples, max_missing=max_missing, check=False), warnings)
    return _checked(measured) if check else measured


def _checked(measured: JobMeasurement) -> JobMeasurement:
    """``measured`` with its tables checked one by one (:data:`CHECKED` order); InputError
    from the first that fails."""
    return replace(measured, **{
        name: validate(schema, getattr(measured, name), label)
        for name, schema, label in CHECKED if len(getattr(measured, name))})


def check_measurements(measured: list[JobMeasurement]
                       ) -> tuple[list[JobMeasurement], list[tuple[JobMeasurement, InputError]]]:
    """The jobs whose tables pass their schemas, and each other job with its InputError.

    Each table of all the jobs is first checked concatenated (one fixed cost
    for the lot). A proof of the lot (:func:`~joulehouse.validation.passes`)
    holds for every job: the schemas have only column checks and uniqueness
    keys that include the job. Otherwise every job is checked alone as
    :func:`measure_job` does, so only the bad ones fail, each with its error.
    """
    if all(_pass_together([getattr(m, name) for m in measured], schema)
           for name, schema, _ in CHECKED):
        return measured, []
    good, bad = [], []
    for one in measured:
        try:
            good.append(_checked(one))
        except InputError as err:
            bad.append((one, err))
    return good, bad


def _pass_together(frames: list[pd.DataFrame], schema) -> bool:
    frames = [frame for frame in frames if len(frame)]
    return not frames or passes(schema, pd.concat(frames, ignore_index=True))


def measure_jobs(root: str | os.PathLike[str], refs: Iterable[JobRef] | None = None,
                 **options) -> tuple[list[JobMeasurement], list[InputError]]:
    """:func:`measure_job` for every job of the archive (or ``refs``).

    A job that raises InputError is left out and its error returned (a folder
    linked outside the root too, :func:`~.layout.find_jobs`); each
    cluster.json is read once (a missing or bad one: its InputError is
    returned once and the cluster's jobs are measured with the known power
    metric names only). Tables are checked :data:`BATCH_JOBS` jobs at once
    (:func:`check_measurements`); errors come batch by batch: the listing's
    and reading's first, then the checks'.
    """
    root = Path(root)
    version = read_version(root)
    measured, errors = [], []
    jobs = each_job(root, refs, errors)
    while batch := list(islice(jobs, BATCH_JOBS)):
        read = []
        for ref, cluster in batch:
            try:
                read.append(measure_job(ref, cluster, version, check=False, **options))
            except InputError as err:
                errors.append(err)
        good, bad = check_measurements(read)
        measured += good
        errors += [err for _, err in bad]
    return measured, errors


def energy_table(measured: Iterable[JobMeasurement]) -> pd.DataFrame:
    """The per-job, per-metric energy of many jobs in one frame (JOB_ENERGY_SCHEMA)."""
    parts = [m.job_energy for m in measured if len(m.job_energy)]
    if not parts:
        return empty_table(JOB_ENERGY_SCHEMA)
    return pd.concat(parts, ignore_index=True)
