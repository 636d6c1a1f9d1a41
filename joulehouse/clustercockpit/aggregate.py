"""Per-host metric statistics of a job, and rollups of jobs per day and owner.

Statistics use each metric's coarsest scope present (as the energy does):
min, max, mean and sum of squares (TAU's SumSqr, in unit squared) of the
samples with a value (nulls skipped, as cc-backend), and the time-weighted mean = trapezoid integral over the job's
window / the time it covers (:func:`joulehouse.integrate.trapezoid_energy`,
whose arithmetic holds for any quantity, with the energy's gap limit). At a
finer scope than node the statistics are over all the host's series (each
socket's values, not their sum).

Rollups group jobs by UTC start day, cluster, partition, project and user;
a job counts wholly on the day it started. Energies, node-hours and
covered times are summed, never averaged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from joulehouse.clustercockpit.energy import job_key_columns, job_series
from joulehouse.clustercockpit.schemas import METRIC_STATS_SCHEMA, ROLLUP_SCHEMA
from joulehouse.integrate import trapezoid_energy
from joulehouse.validation import validate

ROLLUP_KEYS = ["day", "cluster", "cluster_partition", "project", "hpc_user"]


def metric_stats(meta: dict[str, Any], samples: pd.DataFrame, *,
                 max_missing: int = 1, check: bool = True) -> pd.DataFrame:
    """One row per host and metric of one job (METRIC_STATS_SCHEMA columns).

    ``check=False`` leaves the schema check to the caller
    (:func:`~.measure.check_measurements` checks many jobs' frames at once).
    """
    job = job_series(meta, samples)
    start, duration = job.start, job.duration_s
    units = samples["unit"].to_numpy()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for one in job.series:
        t, v = one.times_s, one.values
        present = ~np.isnan(v)
        row = rows.setdefault((one.host, one.metric), {
            "host": one.host, "metric": one.metric, "scope": one.scope,
            "unit": str(units[one.rows.start]),
            "series": 0, "samples": 0, "missing": 0, "min": np.inf, "max": -np.inf, "sum": 0.0,
            "sum_squares": 0.0, "integral": 0.0, "covered_s": 0.0})
        row["series"] += 1
        row["samples"] += int(present.sum())
        row["missing"] += int((~present).sum())
        if present.any():
            v_present = v[present]
            row["min"] = min(row["min"], float(v_present.min()))
            row["max"] = max(row["max"], float(v_present.max()))
            row["sum"] += float(v_present.sum())
            row["sum_squares"] += float(np.dot(v_present, v_present))
            result = trapezoid_energy(t[present], v_present, *job.window,
                                      (max_missing + 1) * one.step_s)
            if not np.isnan(result.energy_j[0]):
                row["integral"] += float(result.energy_j[0])
                row["covered_s"] += duration - float(result.gap_s[0])
    ordered = sorted(rows.values(), key=lambda row: (row["metric"], row["host"]))

    def column(name: str, dtype: str) -> np.ndarray:
        return np.array([row[name] for row in ordered], dtype=dtype)

    samples_n = column("samples", "int64")
    has = samples_n > 0
    integral, covered = column("integral", "float64"), column("covered_s", "float64")
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(has, column("sum", "float64") / samples_n, np.nan)
        time_weighted = np.where(covered > 0, integral / covered, np.nan)
    frame = pd.DataFrame({
        **job_key_columns(meta, start, len(ordered)),
        **{name: column(name, object) for name in ("host", "metric", "scope", "unit")},
        **{name: column(name, "int64") for name in ("series", "samples", "missing")},
        "min": np.where(has, column("min", "float64"), np.nan),
        "max": np.where(has, column("max", "float64"), np.nan),
        "mean": mean, "sum_squares": column("sum_squares", "float64"),
        "time_weighted_mean": time_weighted})
    frame = frame[list(METRIC_STATS_SCHEMA.columns)]
    return validate(METRIC_STATS_SCHEMA, frame, "cc_metric_stats") if check and len(frame) \
        else frame


def rollup(jobs: pd.DataFrame, job_energy: pd.DataFrame) -> pd.DataFrame:
    """Jobs, node-hours and energy per UTC start day, cluster, partition, project and user.

    ``jobs``: cc_jobs rows; ``job_energy``: the per-job, per-metric energy of
    (some of) those jobs. ``energy_j`` sums every metric's integrated energy
    (counters included), ``covered_fraction`` is the summed covered
    window-series over the summed window-series, ``energy_cc_kwh`` sums
    cc-backend's per-metric figures. Jobs without energy rows count in
    ``jobs`` and ``node_hours`` only.
    """
    per_job = job_energy.assign(
        window_series_s=job_energy["duration_s"] * job_energy["series"],
    ).groupby("job", observed=True).agg(
        energy_j=("energy_j", "sum"), gap_s=("gap_s", "sum"),
        window_series_s=("window_series_s", "sum"), energy_cc_kwh=("energy_cc_kwh", "sum"))
    table = jobs[["job", "start_time_utc", "cluster", "cluster_partition", "project",
                  "hpc_user", "node_hours"]].join(per_job, on="job")
    table["day"] = table["start_time_utc"].dt.floor("D")
    table["cluster_partition"] = table["cluster_partition"].fillna("")
    table["has_energy"] = table["window_series_s"].notna()
    groups = table.groupby(ROLLUP_KEYS, sort=True)
    result = groups.agg(
        jobs=("job", "size"), node_hours=("node_hours", "sum"),
        energy_j=("energy_j", "sum"), jobs_with_energy=("has_energy", "sum"),
        gap_s=("gap_s", "sum"), window_series_s=("window_series_s", "sum"),
        energy_cc_kwh=("energy_cc_kwh", "sum")).reset_index()
    with np.errstate(invalid="ignore", divide="ignore"):
        result["covered_fraction"] = np.where(
            result["window_series_s"] > 0,
            np.clip(1.0 - result["gap_s"] / result["window_series_s"], 0.0, 1.0), np.nan)
    for name in ("jobs", "jobs_with_energy"):
        result[name] = result[name].astype("int64")
    result = result[list(ROLLUP_SCHEMA.columns)]
    return validate(ROLLUP_SCHEMA, result, "cc_rollup") if len(result) else result
