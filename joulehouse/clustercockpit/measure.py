"""A job measured whole: its energy, statistics and schema warnings from one read.

The entry point for callers (Dagster assets, CLI, TAUdb mapping):
:func:`measure_job` reads one job's files once (data.json streamed) and
returns every per-job table; :func:`measure_jobs` does it for many jobs,
leaving out only a job that cannot be read (its InputError returned).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from joulehouse.clustercockpit.aggregate import metric_stats
from joulehouse.clustercockpit.conformance import DataConformance, SchemaWarning, meta_warnings
from joulehouse.clustercockpit.energy import host_energy, job_energy
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.clustercockpit.readers import (
    ClusterConfig,
    each_job,
    load_json,
    read_meta,
    read_samples,
    read_version,
)
from joulehouse.clustercockpit.schemas import JOB_ENERGY_SCHEMA, empty_table
from joulehouse.errors import InputError


@dataclass(frozen=True)
class JobMeasurement:
    """One job's tables (see :mod:`.schemas`) and its schema warnings."""

    ref: JobRef
    meta: dict[str, Any]
    host_energy: pd.DataFrame
    job_energy: pd.DataFrame
    stats: pd.DataFrame
    warnings: list[SchemaWarning]


def measure_job(ref: JobRef, cluster: ClusterConfig, version: int, *,
                check_schema: bool = True, max_missing: int = 1) -> JobMeasurement:
    """Read ``ref`` once; energy per host and job, statistics, schema warnings.

    ``check_schema`` validates meta.json and data.json against the archive
    ``version``'s JSON schemas (about 1 s for a 13 MB data.json): the
    violations are returned, never raised. Bad input raises InputError.
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
    per_host = host_energy(meta, samples, cluster, max_missing=max_missing)
    return JobMeasurement(ref, meta, per_host, job_energy(meta, per_host),
                          metric_stats(meta, samples, max_missing=max_missing), warnings)


def measure_jobs(root: str | os.PathLike[str], refs: Iterable[JobRef] | None = None,
                 **options) -> tuple[list[JobMeasurement], list[InputError]]:
    """:func:`measure_job` for every job of the archive (or ``refs``).

    A job that raises InputError is left out and its error returned (a folder
    linked outside the root too, :func:`~.layout.find_jobs`); each
    cluster.json is read once (a missing or bad one: its InputError is
    returned once and the cluster's jobs are measured with the known power
    metric names only).
    """
    root = Path(root)
    version = read_version(root)
    measured, errors = [], []
    for ref, cluster in each_job(root, refs, errors):
        try:
            measured.append(measure_job(ref, cluster, version, **options))
        except InputError as err:
            errors.append(err)
    return measured, errors


def energy_table(measured: Iterable[JobMeasurement]) -> pd.DataFrame:
    """The per-job, per-metric energy of many jobs in one frame (JOB_ENERGY_SCHEMA)."""
    parts = [m.job_energy for m in measured if len(m.job_energy)]
    if not parts:
        return empty_table(JOB_ENERGY_SCHEMA)
    return pd.concat(parts, ignore_index=True)
