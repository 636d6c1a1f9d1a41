"""Energy of a job per host and metric, beside cc-backend's own figure.

A job's window is ``[startTime, startTime + duration]`` (s). For each
energy metric (cluster.json's ``energy`` mark, else the known power metric
names; see :meth:`~joulehouse.clustercockpit.readers.ClusterConfig.energy_kind`)
and host, the series of the metric's coarsest scope present (node, else
socket, ...) are each integrated over the window with
:mod:`joulehouse.integrate` and their energies summed:

- power metrics (W): trapezoid of the samples; a null sample is left out,
  so an isolated missing sample is bridged linearly; a stretch longer than
  ``(max_missing + 1) x timestep`` (``max_missing`` null samples in a row,
  default 1) is not bridged but reported (``gap_count``, ``gap_s``,
  ``covered_fraction``);
- energy metrics (J): cumulative counters, deltas aware of resets.

A host with no bridged energy (its series all null, or too sparse) has
``energy_j`` NaN, not 0. A host of meta.json's ``resources`` with no series
of an energy metric the job has counts as one series that is a whole-window
gap (energy NaN, ``gap_count`` 1, ``gap_s`` the duration), so the job's
``covered_fraction`` shows it and the job gets no whole-window fact.

cc-backend's figure (its ``energy`` column) is meta.json's average power
(W, whatever the unit says) x numNodes x duration / 3.6e6, in kWh rounded
to 0.01 (half away from zero, as Go's math.Round); metrics of type energy
count 0, as in cc-backend. It is computed per metric beside ours, never
instead of it. Energies and durations are summed; no power is averaged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from joulehouse.clustercockpit.layout import block_of, split_job_key
from joulehouse.clustercockpit.readers import SCOPES, ClusterConfig
from joulehouse.clustercockpit.schemas import (
    HOST_ENERGY_SCHEMA,
    JOB_ENERGY_SCHEMA,
    empty_table,
)
from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.facts_entries import Ownership
from joulehouse.integrate import counter_energy, trapezoid_energy
from joulehouse.leftout import LeftOut
from joulehouse.timeutil import epoch_ns_to_utc, seconds_since
from joulehouse.validation import validate

FACTS_SOURCE = "clustercockpit"


def _block_prefix(block: str) -> str:
    """What every job key ``cluster/jobId/startTime`` of block ``cluster/<jobId // 1000>``
    starts with: ``cluster/<block number>`` (jobs 12000-12999: ``cluster/12``), or
    ``cluster/`` for block 0 (jobs 0-999)."""
    cluster, number = block.rsplit("/", 1)
    return f"{cluster}/{number}" if int(number) else f"{cluster}/"


def _block_of(job: str) -> str:
    """The block ``cluster/<jobId // 1000>`` of a job key ``cluster/jobId/startTime``."""
    cluster, job_id, _start = split_job_key(job)
    return block_of(cluster, job_id)


#: A job-id block (its partition key) owns its jobs' entities in energy_facts
#: (:func:`energy_facts_rows`; ``joulehouse.facts_entries``).
FACTS_OWNERSHIP = Ownership(prefix=_block_prefix, owner_of=_block_of)
J_PER_KWH = 3.6e6
#: Hosts named in a left-out record's reason; the others are counted.
HOSTS_NAMED = 5
#: energy_facts component of the known energy metrics; other metrics name themselves.
COMPONENTS = {"rapl_power": "cpu", "cpu_power": "cpu", "core_power": "cpu-cores",
              "mem_power": "dram", "acc_power": "accelerator"}

HOST_ENERGY_COLUMNS = list(HOST_ENERGY_SCHEMA.columns)
JOB_ENERGY_COLUMNS = list(JOB_ENERGY_SCHEMA.columns)


def cc_energy_kwh(avg_power_w: float, num_nodes: int, duration_s: float) -> float:
    """cc-backend's energy of one power metric: avg x nodes x duration in kWh, to 0.01."""
    raw = avg_power_w * num_nodes * (duration_s / 3600.0) / 1000.0
    return float(np.sign(raw) * np.floor(abs(raw) * 100.0 + 0.5) / 100.0)


def series_slices(samples: pd.DataFrame) -> list[tuple[tuple[str, str, str, Any], slice]]:
    """((metric, scope, host, id), rows) of each series of a reader's sample frame.

    Series are told apart by the ``series`` column (labels can repeat in real
    files); the reader writes each series' rows together.
    """
    if samples.empty:
        return []
    ordinal = samples["series"].to_numpy()
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(ordinal)) + 1, [len(samples)]))
    names = ("metric", "scope", "host", "id")
    columns = [(samples[name].cat.codes.to_numpy(), samples[name].cat.categories)
                for name in names]
    labels = [tuple(None if codes[start] < 0 else categories[codes[start]]
                    for codes, categories in columns) for start in bounds[:-1]]
    return [(label, slice(int(a), int(b)))
            for label, a, b in zip(labels, bounds[:-1], bounds[1:], strict=True)]


def coarsest_scopes(slices) -> dict[str, str]:
    """The coarsest scope each metric has series in (SCOPES order; unknown scopes last)."""
    rank = {scope: i for i, scope in enumerate(SCOPES)}
    chosen: dict[str, str] = {}
    for (metric, scope, _, _), _rows in slices:
        best = chosen.get(metric)
        if best is None or rank.get(scope, len(rank)) < rank.get(best, len(rank)):
            chosen[metric] = scope
    return chosen


@dataclass(frozen=True)
class Series:
    """One series of a metric's coarsest scope: its rows of the sample frame, sample times
    (s since the job's start), values (SI unit, NaN for null) and step (s; the job's
    duration for a series of one sample)."""

    metric: str
    scope: str
    host: str
    rows: slice
    times_s: np.ndarray
    values: np.ndarray
    step_s: float


@dataclass(frozen=True)
class JobSeries:
    """A job's window (start, duration in s, and as the one window of :mod:`.integrate`'s
    functions) and the series of each metric's coarsest scope, in file order."""

    start: pd.Timestamp
    duration_s: float
    window: tuple[np.ndarray, np.ndarray]
    series: list[Series]


def job_series(meta: dict[str, Any], samples: pd.DataFrame) -> JobSeries:
    """The series of each metric's coarsest scope of one job's sample frame (see
    :func:`series_slices`, :func:`coarsest_scopes`), timed from meta.json's startTime."""
    start = pd.Timestamp(int(meta["startTime"]), unit="s", tz="UTC").as_unit("ns")
    duration = float(meta["duration"])
    slices = series_slices(samples)
    scopes = coarsest_scopes(slices)
    times = seconds_since(samples["time"], start) if len(samples) else np.empty(0)
    values = samples["value"].to_numpy()
    series = []
    for (metric, scope, host, _), rows in slices:
        if scope != scopes[metric]:
            continue
        t = times[rows]
        series.append(Series(metric, scope, host, rows, t, values[rows],
                             t[1] - t[0] if len(t) > 1 else duration))
    return JobSeries(start, duration, (np.array([0.0]), np.array([duration])), series)


def host_energy(meta: dict[str, Any], samples: pd.DataFrame, cluster: ClusterConfig,
                *, max_missing: int = 1, check: bool = True) -> pd.DataFrame:
    """One row per host and energy metric of one job (HOST_ENERGY_SCHEMA columns).

    ``samples`` is :func:`~joulehouse.clustercockpit.readers.read_samples`'
    frame of the job (other metrics in it are ignored). ``check=False`` leaves
    the schema check to the caller (:func:`~.measure.check_measurements`
    checks many jobs' frames at once).
    """
    job = job_series(meta, samples)
    start, duration = job.start, job.duration_s
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for one in job.series:
        kind = cluster.energy_kind(one.metric)
        if kind is None:
            continue
        present = ~np.isnan(one.values)
        v = one.values[present]
        integrate = trapezoid_energy if kind == "power" else counter_energy
        result = integrate(one.times_s[present], v, *job.window, (max_missing + 1) * one.step_s)
        host, metric = one.host, one.metric
        row = totals.setdefault((host, metric), {
            "host": host, "metric": metric, "kind": kind, "scope": one.scope, "series": 0,
            "energy_j": np.nan, "gap_count": 0, "gap_s": 0.0, "mean_x_duration_j": 0.0})
        row["series"] += 1
        if not np.isnan(result.energy_j[0]):
            row["energy_j"] = float(np.nan_to_num(row["energy_j"]) + result.energy_j[0])
        row["gap_count"] += int(result.gap_count[0])
        row["gap_s"] += float(result.gap_s[0])
        row["mean_x_duration_j"] += (float(v.mean()) * duration if kind == "power" and len(v)
                                     else np.nan)
    _add_missing_hosts(totals, meta, duration)
    if not totals:
        return empty_table(HOST_ENERGY_SCHEMA)
    rows = sorted(totals.values(), key=lambda row: (row["metric"], row["host"]))
    series = _column(rows, "series", "int64")
    gap_s = _column(rows, "gap_s", "float64")
    frame = pd.DataFrame({
        **job_key_columns(meta, start, len(rows)),
        **{name: _column(rows, name, object) for name in ("host", "metric", "kind", "scope")},
        "series": series, "duration_s": np.full(len(rows), duration, "float64"),
        "energy_j": _column(rows, "energy_j", "float64"),
        "gap_count": _column(rows, "gap_count", "int64"), "gap_s": gap_s,
        "covered_fraction": _covered(gap_s, duration * series),
        "mean_x_duration_j": _column(rows, "mean_x_duration_j", "float64"),
    }, columns=HOST_ENERGY_COLUMNS)
    return validate(HOST_ENERGY_SCHEMA, frame, "cc_host_energy") if check else frame


def _column(rows: list[dict[str, Any]], name: str, dtype) -> np.ndarray:
    """The values of ``name`` in ``rows`` as one array."""
    return np.array([row[name] for row in rows], dtype=dtype)


def job_key_columns(meta: dict[str, Any], start: pd.Timestamp, rows: int) -> dict[str, Any]:
    """The key columns of ``rows`` rows of one job's tables: job, cluster, job_id and
    start_time (UTC), built at once rather than inserted one by one."""
    return {"job": np.full(rows, f"{meta['cluster']}/{meta['jobId']}/{meta['startTime']}",
                           dtype=object),
            "cluster": np.full(rows, meta["cluster"], dtype=object),
            "job_id": np.full(rows, int(meta["jobId"]), dtype="int64"),
            "start_time": epoch_ns_to_utc(np.full(rows, start.value, dtype="int64"))}


def _add_missing_hosts(totals: dict[tuple[str, str], dict[str, Any]], meta: dict[str, Any],
                       duration: float) -> None:
    """A row per host of meta.json's resources lacking an energy metric the job has:
    one series, all of it a gap."""
    hosts = [item.get("hostname") for item in meta.get("resources") or []
             if isinstance(item, dict) and item.get("hostname")]
    metrics = {metric: (row["kind"], row["scope"]) for (_, metric), row in totals.items()}
    for metric, (kind, scope) in metrics.items():
        for host in hosts:
            totals.setdefault((host, metric), {
                "host": host, "metric": metric, "kind": kind, "scope": scope, "series": 1,
                "energy_j": np.nan, "gap_count": 1, "gap_s": duration,
                "mean_x_duration_j": np.nan})


def _covered(gap_s, window_s) -> np.ndarray:
    """1 - gap / window, clipped to [0, 1]; a window of 0 s is covered."""
    gap_s, window_s = np.asarray(gap_s, float), np.asarray(window_s, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip(np.where(window_s > 0, 1.0 - gap_s / window_s, 1.0), 0.0, 1.0)


def job_energy(meta: dict[str, Any], per_host: pd.DataFrame, *,
               check: bool = True) -> pd.DataFrame:
    """One row per energy metric of one job: hosts summed, beside cc-backend's figure.

    Columns JOB_ENERGY_SCHEMA: ``energy_j`` and ``mean_x_duration_j`` are sums
    over hosts (NaN where no host has one), ``hosts`` counts the hosts with
    energy, ``covered_fraction`` is over all hosts' series (a host without
    series counts as one series, all gap);
    ``energy_cc_kwh`` is cc-backend's formula from meta.json's statistics
    (0 when meta.json has no average for the metric, and for counters).
    ``check=False``: the schema check is the caller's (as :func:`host_energy`).
    """
    if per_host.empty:
        return empty_table(JOB_ENERGY_SCHEMA)
    # one job: its key columns, and a metric's kind and scope, are the same on every row
    metric = per_host["metric"].to_numpy()
    order = np.argsort(metric, kind="stable")  # metric order, hosts in row order
    metrics, first = np.unique(metric[order], return_index=True)
    groups = np.split(order, first[1:])
    head = order[first]

    def per_metric(name: str, total) -> np.ndarray:
        values = per_host[name].to_numpy()
        return np.array([total(values[rows]) for rows in groups], dtype="float64")

    energy, series = per_metric("energy_j", _sum_or_nan), per_metric("series", np.sum)
    gap_s, duration = per_metric("gap_s", _kahan_sum), per_host["duration_s"].to_numpy()[head]
    kind = per_host["kind"].to_numpy()[head]
    stats = meta.get("statistics") or {}
    energy_cc = np.array([
        cc_energy_kwh(float(stats.get(name, {}).get("avg", 0.0)), meta["numNodes"],
                      meta["duration"]) if how == "power" else 0.0
        for name, how in zip(metrics, kind, strict=True)], dtype="float64")
    cc_j = energy_cc * J_PER_KWH
    with np.errstate(invalid="ignore", divide="ignore"):
        versus_cc = np.where(cc_j > 0, (energy - cc_j) / cc_j * 100, np.nan)
    rows = len(metrics)
    frame = pd.DataFrame({
        **{name: per_host[name].array[head] for name in ("job", "cluster", "job_id",
                                                          "start_time")},
        "user": np.full(rows, meta.get("user") or "", dtype=object),
        "project": np.full(rows, meta.get("project") or "", dtype=object),
        "partition": np.full(rows, meta.get("partition"), dtype=object),
        "num_nodes": np.full(rows, int(meta["numNodes"]), dtype="int64"),
        "hosts": per_metric("energy_j", lambda part: np.count_nonzero(~np.isnan(part))
                            ).astype("int64"),
        "metric": metrics.astype(object), "kind": kind.astype(object),
        "scope": per_host["scope"].to_numpy()[head].astype(object),
        "series": series.astype("int64"), "duration_s": duration.astype("float64"),
        "energy_j": energy, "gap_count": per_metric("gap_count", np.sum).astype("int64"),
        "gap_s": gap_s, "covered_fraction": _covered(gap_s, duration * series),
        "mean_x_duration_j": per_metric("mean_x_duration_j", _sum_or_nan),
        "energy_cc_kwh": energy_cc, "energy_vs_cc_pct": versus_cc,
    }, columns=JOB_ENERGY_COLUMNS)
    return validate(JOB_ENERGY_SCHEMA, frame, "cc_job_energy") if check else frame


def _sum_or_nan(values: np.ndarray) -> float:
    """The sum of ``values``, NaN skipped; NaN where all are (pandas' ``sum(min_count=1)``)."""
    present = ~np.isnan(values)
    return float(np.sum(np.where(present, values, 0.0))) if present.any() else np.nan


def _kahan_sum(values: np.ndarray) -> float:
    """The compensated sum of ``values``, NaN skipped, in row order: pandas' grouped
    ``sum`` (Kahan summation, a NaN compensation reset), to the last bit."""
    total = compensation = 0.0
    for value in values.tolist():
        if math.isnan(value):
            continue
        y = value - compensation
        t = total + y
        compensation = t - total - y
        if math.isnan(compensation):
            compensation = 0.0
        total = t
    return total


def energy_facts_rows(job_energy_rows: pd.DataFrame) -> pd.DataFrame:
    """``energy_facts`` of ClusterCockpit jobs: per job and metric, ours and cc-backend's.

    ``entity`` is the job key ``cluster/jobId/startTime``; ``component`` from
    COMPONENTS (else the metric's name; two metrics of one job with the same
    component keep their metric names); ``method`` is ``power`` (integrated)
    or ``counter``, and ``cc-backend`` for cc-backend's rounded average x
    duration (power metrics with a figure). Integrated rows with unbridged
    gaps give no fact (a fact covers its whole window).
    """
    rows = job_energy_rows
    component = rows["metric"].map(lambda m: COMPONENTS.get(m, m))
    clash = pd.DataFrame({"job": rows["job"], "c": component}).duplicated(keep=False)
    component = component.where(~clash.to_numpy(), rows["metric"])
    end = rows["start_time"] + pd.to_timedelta(rows["duration_s"], unit="s")

    def facts(mask, energy, method) -> pd.DataFrame:
        return pd.DataFrame({
            "source": FACTS_SOURCE, "entity": rows["job"], "component": component,
            "window_start": rows["start_time"], "window_end": end,
            "duration_s": rows["duration_s"].astype("float64"),
            "energy_j": energy.astype("float64"), "method": method,
        }, columns=ENERGY_FACTS_COLUMNS)[np.asarray(mask, bool)]

    whole = (rows["gap_count"] == 0).to_numpy() & rows["energy_j"].notna().to_numpy()
    power = (rows["kind"] == "power").to_numpy()
    parts = [facts(whole & power, rows["energy_j"], "power"),
             facts(whole & ~power, rows["energy_j"], "counter"),
             facts(power & (rows["energy_cc_kwh"] > 0).to_numpy(),
                   rows["energy_cc_kwh"] * J_PER_KWH, "cc-backend")]
    parts = [part for part in parts if len(part)] or [pd.DataFrame(columns=ENERGY_FACTS_COLUMNS)]
    result = pd.concat(parts, ignore_index=True)
    result = result.sort_values(["entity", "component", "method"], ignore_index=True)
    return validate(ENERGY_FACTS_SCHEMA, result, "energy_facts") if len(result) else result


def left_out(per_host: pd.DataFrame, job_energy_rows: pd.DataFrame, job_folder: str
             ) -> list[LeftOut]:
    """What :func:`energy_facts_rows` leaves out of one job (its tables :func:`host_energy`
    and :func:`job_energy`, read from ``job_folder``): one record per metric whose
    integrated fact (``power`` or ``counter``) it does not give, since a fact covers its
    whole window: hosts without a bridged sample (energy NaN: no series, as a host of
    meta.json's ``resources`` missing from data.json, or all of it null or too sparse)
    are named, else the unbridged gaps are counted. cc-backend's own figure is still a
    fact."""
    whole = (job_energy_rows["gap_count"] == 0) & job_energy_rows["energy_j"].notna()
    records = []
    for row in job_energy_rows[~whole].itertuples(index=False):
        hosts = per_host[per_host["metric"] == row.metric]
        empty = hosts.loc[hosts["energy_j"].isna(), "host"].tolist()
        method = "power" if row.kind == "power" else "counter"
        # rounded down: a window not whole is never said to be covered 1
        covered = f"covered {math.floor(row.covered_fraction * 1000) / 1000:g} of the window"
        if empty:
            named = ", ".join(empty[:HOSTS_NAMED]) + (
                f" and {len(empty) - HOSTS_NAMED} more" if len(empty) > HOSTS_NAMED else "")
            why = f"no sample of it bridged on host(s) {named} (energy NaN)"
        else:
            why = f"{row.gap_count} unbridged gap(s), {row.gap_s:g} s in all"
        records.append(LeftOut(
            FACTS_SOURCE, job_folder, f"its {method} fact of {row.metric} "
            f"({len(hosts)} host(s))", f"{why}: {covered}, and a fact covers its whole window"))
    return records
