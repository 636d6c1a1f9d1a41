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
covered times are summed, never averaged: each job's figures in integer units
(mJ, ms, node-ms: :func:`job_sums`), so that a group's sums are exact, the same in
any order, and can be kept by adding a landing's jobs and taking away those it
replaces (``cc_rollup``'s kept sums, ``joulehouse/clustercockpit/tables.py``); the
rollup's columns are figures of these sums (:func:`rollup_of_sums`). Every column
is a count, a sum or a ratio of sums: none (a min, a max, a distinct count) that
sums could not keep.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from joulehouse.clustercockpit.energy import J_PER_KWH, job_key_columns, job_series
from joulehouse.clustercockpit.schemas import METRIC_STATS_SCHEMA, ROLLUP_SCHEMA
from joulehouse.integrate import trapezoid_energy
from joulehouse.validation import validate

ROLLUP_KEYS = ["day", "cluster", "cluster_partition", "project", "hpc_user"]
#: Per rollup group, what is summed: jobs, jobs with energy rows, node-hours in node-ms,
#: then the energy rows' energy in mJ, gaps and window x series in ms, cc-backend's energy
#: in mJ. Integers (int64), so that sums are exact in any order.
ENERGY_SUMS = ["energy_mj", "gap_ms", "window_series_ms", "energy_cc_mj"]
SUMS = ["jobs", "jobs_with_energy", "node_ms", *ENERGY_SUMS]
SUMS_COLUMNS = [*ROLLUP_KEYS, *SUMS]
#: The largest magnitude a kept sum may reach (a quarter of int64's range: 4.6e15 J, 4.6e15
#: s, 1.3e12 node-hours per group and day); a sum or value beyond it is refused.
SUM_LIMIT = 2**62
MS_PER_H = 3.6e6
MJ_PER_KWH = 1000 * J_PER_KWH


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
    ``jobs`` and ``node_hours`` only. The rollup of the groups' exact sums
    (:func:`group_sums`), so it is the same however the rows are ordered or split.
    """
    return rollup_of_sums(group_sums(job_sums(jobs, job_energy)))


def _units(values: pd.Series, per_unit: float, name: str) -> np.ndarray:
    """``values`` in integer units of ``1 / per_unit`` of theirs (nearest; NaN: 0)."""
    scaled = np.nan_to_num(np.rint(values.to_numpy("float64", na_value=np.nan) * per_unit))
    if len(scaled) and np.abs(scaled).max() >= SUM_LIMIT:
        raise ValueError(f"cc_rollup: a value of {name} over the kept sums' range "
                         f"({SUM_LIMIT / per_unit:.3g})")
    return scaled.astype("int64")


def job_sums(jobs: pd.DataFrame, job_energy: pd.DataFrame) -> pd.DataFrame:
    """Per job of ``jobs``: its group (:data:`ROLLUP_KEYS`) and what it adds to the group's
    :data:`SUMS` (``job_energy`` rows of other jobs ignored): each ``job_energy`` row's
    energy, gap, window x series and cc-backend energy rounded to integer mJ or ms, then
    summed per job; its node-hours in node-ms."""
    energy = pd.DataFrame({
        "job": job_energy["job"].to_numpy(object),
        "energy_mj": _units(job_energy["energy_j"], 1e3, "energy_j"),
        "gap_ms": _units(job_energy["gap_s"], 1e3, "gap_s"),
        "window_series_ms": _units(job_energy["duration_s"] * job_energy["series"], 1e3,
                                   "duration_s x series"),
        "energy_cc_mj": _units(job_energy["energy_cc_kwh"], MJ_PER_KWH, "energy_cc_kwh")})
    per_job = energy.groupby("job", sort=False).sum()
    jobs = jobs.reset_index(drop=True)
    table = pd.DataFrame({
        "job": jobs["job"], "day": pd.to_datetime(jobs["start_time_utc"], utc=True).dt.floor("D"),
        "cluster": jobs["cluster"], "cluster_partition": jobs["cluster_partition"].fillna(""),
        "project": jobs["project"], "hpc_user": jobs["hpc_user"],
        "jobs": np.ones(len(jobs), "int64"),
        "node_ms": _units(jobs["node_hours"], MS_PER_H, "node_hours")}).join(per_job, on="job")
    table["jobs_with_energy"] = table["energy_mj"].notna().astype("int64")
    for name in ENERGY_SUMS:
        table[name] = table[name].fillna(0).astype("int64")
    return table[["job", *SUMS_COLUMNS]]


def group_sums(rows: pd.DataFrame) -> pd.DataFrame:
    """Per group (:data:`ROLLUP_KEYS`, sorted) of ``rows`` (:func:`job_sums`, or groups'
    sums, negated where taken away): the sum of each of :data:`SUMS`, exact (integers: in
    any order; a sum over int64's range on the way wraps back once the true sum is within
    it, which a float sum checks: over :data:`SUM_LIMIT` is refused). Sums no set of jobs
    has (:func:`_drifted`: the kept ones not those of the jobs stored) are refused, naming
    the first such day and group."""
    grouped = rows.groupby(ROLLUP_KEYS, sort=True)
    sums = grouped[SUMS].sum()
    approximate = rows[ROLLUP_KEYS].join(rows[SUMS].astype("float64")).groupby(
        ROLLUP_KEYS, sort=True)[SUMS].sum()
    if (approximate.to_numpy() >= SUM_LIMIT).any():
        raise ValueError(f"cc_rollup: a group's sum over the kept sums' range ({SUM_LIMIT})")
    drifted = _drifted(sums)
    if drifted.any():
        day, *group = sums.index[drifted][0]
        raise ValueError(
            f"cc_rollup: the kept sums of day {day:%Y-%m-%d}, group (cluster, partition, "
            f"project, user) {tuple(group)} are no jobs' sums ({dict(sums[drifted].iloc[0])}): "
            "those taken away were not those kept; rebuild the ClusterCockpit tables (a "
            "cc_pipeline run without partitions: the daily_rollups schedule's, or cc_rollup "
            "materialized with no partition selected; docs/clustercockpit.md)")
    return sums.astype("int64").reset_index()[SUMS_COLUMNS]


def _drifted(sums: pd.DataFrame) -> np.ndarray:
    """Per group of ``sums`` (:data:`SUMS` columns), whether no set of jobs sums so: a sum
    negative, more jobs with energy than jobs, or no job left but some other sum not 0."""
    jobs = sums["jobs"].to_numpy()
    return ((sums.to_numpy() < 0).any(axis=1) | (sums["jobs_with_energy"].to_numpy() > jobs)
            | ((jobs == 0) & (sums.to_numpy() != 0).any(axis=1)))


def rollup_of_sums(sums: pd.DataFrame) -> pd.DataFrame:
    """The ``cc_rollup`` rows (ROLLUP_SCHEMA) of groups' :data:`SUMS` (groups without jobs
    left out): each figure its integer sum in the column's unit, ``covered_fraction`` one
    minus the summed gaps over the summed window-series (NaN without)."""
    sums = sums[sums["jobs"] > 0]
    gap, window = (sums[name].to_numpy("float64") for name in ("gap_ms", "window_series_ms"))
    with np.errstate(invalid="ignore", divide="ignore"):
        covered = np.where(window > 0, np.clip(1.0 - gap / window, 0.0, 1.0), np.nan)
    result = sums[ROLLUP_KEYS].assign(
        jobs=sums["jobs"], node_hours=sums["node_ms"] / MS_PER_H,
        energy_j=sums["energy_mj"] / 1e3, jobs_with_energy=sums["jobs_with_energy"],
        covered_fraction=covered, energy_cc_kwh=sums["energy_cc_mj"] / MJ_PER_KWH
    ).reset_index(drop=True)[list(ROLLUP_SCHEMA.columns)]
    return validate(ROLLUP_SCHEMA, result, "cc_rollup") if len(result) else result
