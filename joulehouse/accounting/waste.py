"""Waste: energy spent while the hardware was idle, per repetition and job, and per user-week.

Rules are versioned code: each row of ``waste`` names the rule and version that judged it
and its threshold, and ``flagged`` says whether any energy of the row was spent idle.

- ``gpu_idle`` v1 (GPU benchmarks, per repetition): the GPU's ``gpu-power`` readings over
  the repetition's measured window (its ``energy_facts`` window). Each interval between
  two readings is idle when the utilisation of its later reading (NVML's utilisation is the
  share of the sample period before the reading that a kernel ran) is below the threshold
  (default 10 %); its energy is the trapezoid of the two powers, prorated by time where
  the window cuts the interval. An interval longer than ``max_gap_s`` is a gap and counts
  for nothing. ``energy_j`` is the sum over all intervals, ``idle_energy_j`` over the idle
  ones, ``idle_s`` their time; ``gpu_hours`` the window (one GPU).
- ``cpu_low_load`` v1 (ClusterCockpit, per job): the job's CPU use over its run, as a
  fraction of its CPUs: ``cpu_user`` (%) / 100, else ``cpu_used`` (a fraction), else
  ``cpu_load`` / the hardware threads per node, each the time-weighted mean per host,
  averaged over hosts. A job below the threshold (default 10 %) spent all its CPU energy
  (``energy_facts`` ``cpu`` by ``power`` or ``counter``) idle. ``gpu_hours`` =
  accelerators x run time.

``waste_weekly``: per UTC week (Monday) and user (``""`` where a source names none, as in
the rollups) the sums of ``energy_j``, ``gpu_hours``, ``idle_energy_j``, the idle share of
the energy and ``rank`` (1 = most idle energy in the week). A row across a week boundary
is split by time (constant power, ``split.py``), as the rollups split facts at midnight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from joulehouse.accounting.schemas import WASTE_SCHEMA, WASTE_WEEKLY_SCHEMA
from joulehouse.accounting.split import split_windows
from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.gpu.energy import FACTS_SOURCE as GPU_SOURCE
from joulehouse.validation import empty_frame, validate


@dataclass(frozen=True)
class WasteRule:
    """A waste rule: id, version and the utilisation (fraction) below which is idle."""

    id: str
    version: int
    threshold: float = 0.10


GPU_IDLE = WasteRule("gpu_idle", 1)
#: A judged window: (entity, window start, window end).
Window = tuple[str, pd.Timestamp, pd.Timestamp]
#: gpu_idle's figures of a window (energy_j, idle_energy_j, idle_s); None: not judged.
Judged = dict[str, float] | None
CPU_LOW_LOAD = WasteRule("cpu_low_load", 1)
#: Utilisation metrics of ClusterCockpit, in the order preferred, and the factor to a fraction
#: (None: divide by the hardware threads per node).
CPU_METRICS = {"cpu_user": 0.01, "cpu_used": 1.0, "cpu_load": None}
_COLUMNS = list(WASTE_SCHEMA.columns)
#: The order :func:`weekly` sums rows in.
WEEKLY_ORDER = ["source", "entity", "window_start", "window_end", "rule"]


def gpu_idle(power: pd.DataFrame, window_start: pd.Timestamp, window_end: pd.Timestamp,
             rule: WasteRule = GPU_IDLE, max_gap_s: float = 5.0) -> Judged:
    """``energy_j``, ``idle_energy_j`` and ``idle_s`` of one repetition's ``gpu-power`` frame
    (``time``, ``power_w``, ``util_gpu_pct``) over the window (see the module); None where
    the frame has no utilisation (NVML gives none on some GPUs, e.g. MIG instances): the
    rule cannot judge it."""
    if "util_gpu_pct" not in power.columns:
        return None
    t = power["time"].to_numpy("datetime64[ns]").view(np.int64)
    p = power["power_w"].to_numpy(float, na_value=np.nan)
    util = power["util_gpu_pct"].to_numpy(float, na_value=np.nan)
    read = ~(np.isnan(p) | np.isnan(util))  # readings with both
    order = np.argsort(t[read], kind="stable")
    t, p, util = t[read][order] / 1e9, p[read][order], util[read][order]
    idle = util[1:] < rule.threshold * 100
    lo, hi = window_start.value / 1e9, window_end.value / 1e9
    dt = np.diff(t)
    inside = np.clip(np.minimum(t[1:], hi) - np.maximum(t[:-1], lo), 0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where((dt > 0) & (dt <= max_gap_s), inside / dt, 0.0)
    energy = (p[:-1] + p[1:]) / 2 * dt * share
    return {"energy_j": float(energy.sum()), "idle_energy_j": float(energy[idle].sum()),
            "idle_s": float((dt * share)[idle].sum())}


def gpu_windows(facts: pd.DataFrame) -> pd.DataFrame:
    """The facts ``gpu_idle`` judges: each GPU repetition's ``gpu`` ``counter`` fact (its
    experiment window)."""
    return facts[(facts["source"] == GPU_SOURCE) & (facts["component"] == "gpu")
                 & (facts["method"] == "counter")]


def gpu_waste(facts: pd.DataFrame, frame_of: Callable[[str], pd.DataFrame | None],
              judged: Mapping[Window, Judged] | None = None,
              rule: WasteRule = GPU_IDLE) -> pd.DataFrame:
    """WASTE_SCHEMA rows of the GPU repetitions over their :func:`gpu_windows`: each
    window's :func:`gpu_idle` figures from ``judged`` ((entity, window start, window end)
    -> figures, judged by ``rule`` already) where there, else from the ``gpu-power`` frame
    ``frame_of(entity)`` gives (None: not stored). A window with neither, or without
    utilisation, has no row."""
    judged = judged or {}
    rows = []
    for fact in gpu_windows(facts).itertuples():
        window = (fact.entity, fact.window_start, fact.window_end)
        if window in judged:
            found = judged[window]
        else:
            frame = frame_of(fact.entity)
            found = (None if frame is None
                     else gpu_idle(frame, fact.window_start, fact.window_end, rule))
        if found is None:
            continue
        rows.append({"rule": rule.id, "version": rule.version, "threshold": rule.threshold,
                     "source": GPU_SOURCE, "entity": fact.entity, "user": "",
                     "window_start": fact.window_start, "window_end": fact.window_end,
                     "gpu_hours": fact.duration_s / 3600.0, **found})
    return _table(rows)


def cpu_share(stats: pd.DataFrame, jobs: pd.DataFrame) -> pd.Series:
    """Per job (index), its CPU use as a fraction of its CPUs from ``cc_block_tables/
    metric_stats`` rows (see the module): the first metric of CPU_METRICS it has."""
    threads = (jobs.set_index("job")["num_hwthreads"].astype("Float64")
               / jobs.set_index("job")["num_nodes"].replace(0, np.nan)).astype(float)
    shares = []
    for metric, factor in CPU_METRICS.items():
        rows = stats[stats["metric"] == metric]
        per_job = rows.groupby("job")["time_weighted_mean"].mean()
        per_job = per_job * factor if factor is not None else per_job / threads.reindex(
            per_job.index)
        shares.append(per_job.dropna())
    combined = pd.concat(shares)
    return combined[~combined.index.duplicated(keep="first")]


def cpu_waste(facts: pd.DataFrame, stats: pd.DataFrame, jobs: pd.DataFrame,
              rule: WasteRule = CPU_LOW_LOAD) -> pd.DataFrame:
    """WASTE_SCHEMA rows of the ClusterCockpit jobs with CPU energy and a CPU-use metric."""
    cpu = facts[(facts["source"] == CC_SOURCE) & (facts["component"] == "cpu")
                & facts["method"].isin(["power", "counter"])]
    share = cpu_share(stats, jobs)
    cpu = cpu[cpu["entity"].isin(share.index)]
    if cpu.empty:
        return _table([])
    job = jobs.drop_duplicates("job").set_index("job")
    accelerators = job["num_acc"].astype("Float64").fillna(0).astype(float)
    users = job["hpc_user"].astype(str)
    per_job = cpu.groupby("entity").agg(window_start=("window_start", "min"),
                                        window_end=("window_end", "max"),
                                        duration_s=("duration_s", "max"),
                                        energy_j=("energy_j", "sum"))
    low = share.reindex(per_job.index) < rule.threshold
    return _table([{
        "rule": rule.id, "version": rule.version, "threshold": rule.threshold,
        "source": CC_SOURCE, "entity": entity, "user": users.get(entity, ""),
        "window_start": row.window_start, "window_end": row.window_end,
        "gpu_hours": accelerators.get(entity, 0.0) * row.duration_s / 3600.0,
        "energy_j": row.energy_j, "idle_energy_j": row.energy_j if low[entity] else 0.0,
        "idle_s": row.duration_s if low[entity] else 0.0,
    } for entity, row in per_job.iterrows()])


def _table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=[c for c in _COLUMNS if c != "flagged"])
    table["flagged"] = table["idle_energy_j"] > 0
    for column in ("window_start", "window_end"):
        table[column] = pd.to_datetime(table[column], utc=True).astype(
            WASTE_SCHEMA.columns[column].dtype.type)
    table = table.astype({"version": "int64", "threshold": float, "gpu_hours": float,
                          "energy_j": float, "idle_energy_j": float, "idle_s": float,
                          "flagged": bool})
    return table[_COLUMNS]


def waste(facts: pd.DataFrame, gpu: pd.DataFrame | None,
          cc_stats: pd.DataFrame | None, cc_jobs: pd.DataFrame | None) -> pd.DataFrame:
    """The ``waste`` table (WASTE_SCHEMA): every rule over what it needs; ``gpu``: the GPU
    repetitions' rows (:func:`gpu_waste`; None: none)."""
    parts = [_table([]) if gpu is None else gpu]
    if cc_stats is not None and cc_jobs is not None:
        parts.append(cpu_waste(facts, cc_stats, cc_jobs))
    parts = [part for part in parts if len(part)] or parts[:1]
    return validate(WASTE_SCHEMA, pd.concat(parts, ignore_index=True), "waste")


def weekly(table: pd.DataFrame) -> pd.DataFrame:
    """``waste_weekly`` (WASTE_WEEKLY_SCHEMA) of a ``waste`` table (see the module)."""
    if table.empty:
        return validate(WASTE_WEEKLY_SCHEMA, empty_frame(WASTE_WEEKLY_SCHEMA), "waste_weekly")
    # summed in one order whatever the rows' (a week recomputed from the rows stored sums
    # as one computed from scratch: kept.py)
    table = table.sort_values(WEEKLY_ORDER, kind="stable", ignore_index=True)
    start = table["window_start"].to_numpy("datetime64[ns]").view(np.int64)
    end = table["window_end"].to_numpy("datetime64[ns]").view(np.int64)
    first = table["window_start"].min().tz_localize(None).normalize()
    mondays = pd.date_range(first - pd.Timedelta(days=first.weekday()),
                            table["window_end"].max().tz_localize(None) + pd.Timedelta(days=7),
                            freq="7D")
    pieces = split_windows(start, end, mondays.as_unit("ns").asi8)
    frame = pd.DataFrame({
        "week": mondays[pieces.segment],
        "user": table["user"].to_numpy()[pieces.window],
        **{column: table[column].to_numpy(float)[pieces.window] * pieces.fraction
           for column in ("energy_j", "gpu_hours", "idle_energy_j")},
    })
    result = frame.groupby(["week", "user"], as_index=False).sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        result["idle_share"] = np.where(result["energy_j"] > 0,
                                        result["idle_energy_j"] / result["energy_j"], np.nan)
    result["rank"] = (result.groupby("week")["idle_energy_j"]
                      .rank(method="min", ascending=False).astype("int64"))
    result = result.sort_values(["week", "rank", "user"], ignore_index=True)
    return validate(WASTE_WEEKLY_SCHEMA, result[list(WASTE_WEEKLY_SCHEMA.columns)],
                    "waste_weekly")

