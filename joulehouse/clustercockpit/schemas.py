"""pandera schemas of the ClusterCockpit frames and tables.

``cc_jobs`` keeps the names of cc-backend's ``job`` table (DB version 11),
whose units are fixed by cc-backend: times in s since the epoch, durations
in s, ``energy`` in kWh; our added columns carry units in their names.
Every column has a description with its unit. Applied with
:func:`joulehouse.validation.validate` (InputError naming the table).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

UTC_TIME = pd.DatetimeTZDtype("ns", "UTC")

#: cc-backend's job states (migration 09's CHECK).
JOB_STATES = ("boot_fail", "cancelled", "completed", "deadline", "failed", "node_fail",
              "out_of_memory", "pending", "preempted", "running", "suspended", "timeout")
SHARED = ("none", "single_user", "multi_user")
ENERGY_KINDS = ("power", "energy")


def empty_table(schema: pa.DataFrameSchema) -> pd.DataFrame:
    """A frame without rows whose columns have ``schema``'s names and dtypes."""
    return pd.DataFrame({name: pd.Series(dtype=column.dtype.type)
                         for name, column in schema.columns.items()})


def _col(dtype, description: str, *checks: pa.Check, nullable: bool = False) -> pa.Column:
    return pa.Column(dtype, list(checks) or None, nullable=nullable, description=description)


_GE0 = pa.Check.ge(0)

CC_JOBS_SCHEMA = pa.DataFrameSchema(
    {
        "job": _col(str, "the job's key cluster/jobId/startTime (ours)"),
        "job_id": _col("int64", "batch system job id (jobId)"),
        "cluster": _col(str, "cluster name"),
        "subcluster": _col(str, "subcluster name"),
        "submit_time": _col("int64", "submission time, s since the epoch UTC (0 if unknown)"),
        "start_time": _col("int64", "start time, s since the epoch UTC"),
        "hpc_user": _col(str, "user name"),
        "project": _col(str, "project (account) name"),
        "cluster_partition": _col(str, "batch partition", nullable=True),
        "array_job_id": _col("Int64", "array job id", nullable=True),
        "duration": _col("int64", "run time in s", _GE0),
        "walltime": _col("int64", "requested wall time in s (0 if unknown)", _GE0),
        "job_state": _col(str, "final state (cc-backend's 12 states)",
                          pa.Check.isin(JOB_STATES)),
        "meta_data": _col(str, "meta.json's metaData as JSON text", nullable=True),
        "resources": _col(str, "meta.json's resources (hosts, hwthreads, accelerators), JSON"),
        "num_nodes": _col("int64", "nodes allocated", _GE0),
        "num_hwthreads": _col("Int64", "hardware threads allocated", nullable=True),
        "num_acc": _col("Int64", "accelerators allocated", nullable=True),
        "smt": _col("int64", "simultaneous multithreading (cc-backend default 1)"),
        "shared": _col(str, "node sharing: none, single_user, multi_user", pa.Check.isin(SHARED)),
        "monitoring_status": _col("int64", "cc-backend monitoring status 0-3",
                                  pa.Check.isin([0, 1, 2, 3])),
        "energy": _col(float, "job energy in kWh as cc-backend stores it: meta.json's energy, "
                       "else cc-backend's formula over the power metrics", _GE0),
        "energy_footprint": _col(str, "per-metric energy in kWh, JSON (meta.json's)",
                                 nullable=True),
        "footprint": _col(str, "per-metric footprint, JSON (meta.json's)", nullable=True),
        "start_time_utc": _col(UTC_TIME, "start time, UTC (ours)"),
        "end_time_utc": _col(UTC_TIME, "start time + duration, UTC (ours)"),
        "node_hours": _col(float, "num_nodes x duration in h (ours)", _GE0),
        "archive_version": _col("int64", "job archive version 1-3 (ours)",
                                pa.Check.isin([1, 2, 3])),
    },
    unique=["job_id", "cluster", "start_time"],
    strict=True,
    ordered=True,
    name="cc_jobs",
)

SAMPLES_SCHEMA = pa.DataFrameSchema(
    {
        "job": _col("category", "the job's key cluster/jobId/startTime"),
        "series": _col("int32", "position of the series in data.json (its identity: "
                       "(metric, scope, host, id) repeats in real files)", _GE0),
        "metric": _col("category", "metric name"),
        "scope": _col("category", "node, socket, memoryDomain, core, hwthread, accelerator"),
        "host": _col("category", "host name"),
        "id": _col("category", "socket, core or accelerator id; missing at node scope",
                   nullable=True),
        "time": _col(UTC_TIME, "sample time, UTC: start time + i x timestep"),
        "value": _col(float, "sample value in the SI unit of column unit; NaN where null",
                      nullable=True),
        "unit": _col("category", "SI base unit of value (W, J, B/s, F/s, Hz, ...)"),
    },
    strict=True,
    ordered=True,
    name="cc_samples",
)

_ENERGY_KEY = {
    "job": _col(str, "the job's key cluster/jobId/startTime"),
    "cluster": _col(str, "cluster name"),
    "job_id": _col("int64", "batch system job id"),
    "start_time": _col(UTC_TIME, "job start, UTC"),
}
_INTEGRATED = {
    "metric": _col(str, "power metric (W) or energy counter metric (J)"),
    "kind": _col(str, "power (integrated) or energy (counter deltas)",
                 pa.Check.isin(ENERGY_KINDS)),
    "scope": _col(str, "scope of the series used (the coarsest present)"),
    "series": _col("int64", "series summed (e.g. sockets of a host); a host of meta.json's "
                   "resources without series of the metric counts one, all gap", pa.Check.ge(1)),
    "duration_s": _col(float, "job window in s: start time to start time + duration", _GE0),
    "energy_j": _col(float, "energy over the bridged part of the window in J", _GE0,
                     nullable=True),
    "gap_count": _col("int64", "stretches not bridged (longer than the gap limit)", _GE0),
    "gap_s": _col(float, "seconds not bridged, summed over series", _GE0),
    "covered_fraction": _col(float, "share of the window x series that energy_j covers",
                             pa.Check.in_range(0, 1)),
}

HOST_ENERGY_SCHEMA = pa.DataFrameSchema(
    {
        **_ENERGY_KEY,
        "host": _col(str, "host name"),
        **_INTEGRATED,
        "mean_x_duration_j": _col(
            float, "mean of the host's samples (W) x duration (s), summed over series, in J; "
            "NaN for counters", nullable=True),
    },
    unique=["job", "host", "metric"],
    strict=True,
    name="cc_host_energy",
)

JOB_ENERGY_SCHEMA = pa.DataFrameSchema(
    {
        **_ENERGY_KEY,
        "user": _col(str, "user name"),
        "project": _col(str, "project name"),
        "partition": _col(str, "batch partition", nullable=True),
        "num_nodes": _col("int64", "nodes allocated", _GE0),
        "hosts": _col("int64", "hosts with energy of the metric (bridged samples)", _GE0),
        **_INTEGRATED,
        "mean_x_duration_j": _col(float, "sum over hosts of mean sample power x duration, J",
                                  nullable=True),
        "energy_cc_kwh": _col(float, "cc-backend's formula: meta.json's average power x "
                              "numNodes x duration, kWh rounded to 0.01 (0 for counters)", _GE0),
        "energy_vs_cc_pct": _col(float, "(energy_j - energy_cc_kwh in J) / that, in %",
                                 nullable=True),
    },
    unique=["job", "metric"],
    strict=True,
    name="cc_job_energy",
)

METRIC_STATS_SCHEMA = pa.DataFrameSchema(
    {
        **_ENERGY_KEY,
        "host": _col(str, "host name"),
        "metric": _col(str, "metric name"),
        "scope": _col(str, "scope of the series used (the coarsest present)"),
        "unit": _col(str, "SI base unit of the statistics"),
        "series": _col("int64", "series of the scope on the host", pa.Check.ge(1)),
        "samples": _col("int64", "samples with a value", _GE0),
        "missing": _col("int64", "null samples", _GE0),
        "min": _col(float, "least sample, in unit", nullable=True),
        "max": _col(float, "largest sample, in unit", nullable=True),
        "mean": _col(float, "mean of the samples, in unit", nullable=True),
        "sum_squares": _col(float, "sum of the squared samples, in unit squared (TAU's SumSqr; "
                            "0 without samples)", _GE0),
        "time_weighted_mean": _col(float, "trapezoid integral / covered time, in unit",
                                   nullable=True),
    },
    unique=["job", "host", "metric"],
    strict=True,
    name="cc_metric_stats",
)

ROLLUP_SCHEMA = pa.DataFrameSchema(
    {
        "day": _col(UTC_TIME, "UTC day the jobs started (midnight)"),
        "cluster": _col(str, "cluster name"),
        "cluster_partition": _col(str, "batch partition ('' when none)"),
        "project": _col(str, "project name"),
        "hpc_user": _col(str, "user name"),
        "jobs": _col("int64", "jobs started that day", pa.Check.ge(1)),
        "node_hours": _col(float, "sum of num_nodes x duration, h (each job's rounded to "
                           "the node-ms)", _GE0),
        "energy_j": _col(float, "sum of the jobs' integrated energy over power and counter "
                         "metrics, J (each energy row's rounded to the mJ)", _GE0),
        "jobs_with_energy": _col("int64", "jobs with at least one energy metric", _GE0),
        "covered_fraction": _col(float, "share of the summed windows x series covered (gaps "
                                 "and windows summed per row rounded to the ms)",
                                 pa.Check.in_range(0, 1), nullable=True),
        "energy_cc_kwh": _col(float, "sum of cc-backend's per-metric kWh (each rounded to "
                              "the mJ)", _GE0),
    },
    unique=["day", "cluster", "cluster_partition", "project", "hpc_user"],
    strict=True,
    name="cc_rollup",
)
