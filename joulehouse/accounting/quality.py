"""How each energy fact was measured: method, component, sampling interval, coverage.

``energy_facts`` carries the method and the component; the sampling interval and the
fraction of the fact's window covered by readings are in each source's own tables.
``fact_quality`` gathers them, one row per fact, NaN where the source does not say:

============== ===================================== ======================================
source         sampling_interval_s                   covered_fraction
============== ===================================== ======================================
gpu-benchmark  median step of the method's series    1 - the method's unbridged gap time
               (``gpu-power`` for counter and power,  / the experiment window
               the 50 Hz samples, the external meter) (``<method>_gap_s`` / ``duration_s``)
               ``<method>_step_s``                    both of ``gpu_repetition_figures``
clustercockpit about the timestep: the job's duration  ``cc_job_energy.covered_fraction``
               x series / samples (with the missing)  (power and counter metrics)
               of its metric, the mean over hosts
               (``cc_block_tables/metric_stats``)
powerapi       --                                    ``covered_s / duration_s`` of its window
geopm          --                                    -- (a report's totals say nothing of it)
============== ===================================== ======================================

A fact is only made of whole windows (``facts.py``), so a coverage below 1 is gap time
bridged by interpolation (ClusterCockpit's isolated missing samples), never energy left
out. cc-backend's own figures (method ``cc-backend``) have neither.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from joulehouse.accounting.schemas import QUALITY_SCHEMA
from joulehouse.clustercockpit.energy import COMPONENTS
from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.gpu.energy import FACTS_SOURCE as GPU_SOURCE
from joulehouse.powerapi.energy import FACTS_SOURCE as POWERAPI_SOURCE
from joulehouse.validation import validate

#: The GPU frame each method's readings come from.
GPU_FRAMES = {"counter": "gpu_power", "power": "gpu_power", "samples": "samples_total_power",
              "external": "external_power"}
_KEY = ["source", "entity", "component", "window_start", "window_end", "method"]


def median_step_s(frame: pd.DataFrame) -> float:
    """The median step between consecutive readings (column ``time``) in s; NaN for fewer
    than two."""
    times = np.sort(frame["time"].to_numpy("datetime64[ns]").view(np.int64))
    return float(np.median(np.diff(times)) / 1e9) if len(times) > 1 else np.nan


def _gpu(facts: pd.DataFrame, figures: pd.DataFrame | None) -> pd.DataFrame:
    """GPU facts with the coverage and step of their method (``figures``: per repetition,
    ``repetition.FIGURES``' columns; the first row of an entity counts)."""
    mine = facts[facts["source"] == GPU_SOURCE]
    covered = pd.Series(np.nan, index=mine.index)
    step = pd.Series(np.nan, index=mine.index)
    if figures is not None and len(figures):
        figures = figures.drop_duplicates("entity").set_index("entity")
        for method in GPU_FRAMES:
            rows = mine["method"] == method
            gap = 1 - figures[f"{method}_gap_s"] / figures["duration_s"]
            covered[rows] = mine.loc[rows, "entity"].map(gap)
            step[rows] = mine.loc[rows, "entity"].map(figures[f"{method}_step_s"])
    return mine[_KEY].assign(sampling_interval_s=step.to_numpy(float),
                             covered_fraction=covered.to_numpy(float))


def _clustercockpit(facts: pd.DataFrame, energy: pd.DataFrame | None,
                    stats: pd.DataFrame | None) -> pd.DataFrame:
    """ClusterCockpit facts with their metric's coverage and sampling step."""
    mine = facts[facts["source"] == CC_SOURCE]
    empty = mine[_KEY].assign(sampling_interval_s=np.nan, covered_fraction=np.nan)
    if energy is None or energy.empty:
        return empty
    rows = energy.assign(method=np.where(energy["kind"] == "power", "power", "counter"))
    if stats is not None and len(stats):
        per_host = stats.assign(step=stats["series"] / (stats["samples"] + stats["missing"]))
        step = per_host.groupby(["job", "metric"], as_index=False)["step"].mean()
        rows = rows.merge(step, on=["job", "metric"], how="left")
        rows["sampling_interval_s"] = rows["duration_s"] * rows["step"]
    else:
        rows["sampling_interval_s"] = np.nan
    # a fact's component is the metric's (COMPONENTS), or the metric's name where two
    # metrics of a job share one: match either
    both = pd.concat([rows.assign(component=rows["metric"].map(lambda m: COMPONENTS.get(m, m))),
                      rows.assign(component=rows["metric"])]).drop_duplicates(
        ["job", "component", "method"])
    found = mine[_KEY].merge(
        both[["job", "component", "method", "sampling_interval_s", "covered_fraction"]]
        .rename(columns={"job": "entity"}), on=["entity", "component", "method"], how="left")
    return found if len(found) else empty


def _powerapi(facts: pd.DataFrame, windows: pd.DataFrame | None) -> pd.DataFrame:
    """PowerAPI facts with their window's coverage."""
    mine = facts[facts["source"] == POWERAPI_SOURCE][_KEY]
    if windows is None or windows.empty or mine.empty:
        return mine.assign(sampling_interval_s=np.nan, covered_fraction=np.nan)
    rows = windows.assign(entity=windows["sensor"] + "/" + windows["target"],
                          covered_fraction=windows["covered_s"] / windows["duration_s"])
    rows = rows.drop_duplicates(["entity", "component", "window_start", "window_end", "method"])
    found = mine.merge(rows[["entity", "component", "window_start", "window_end", "method",
                             "covered_fraction"]],
                       on=["entity", "component", "window_start", "window_end", "method"],
                       how="left")
    return found.assign(sampling_interval_s=np.nan)


def fact_quality(facts: pd.DataFrame, *, gpu_figures: pd.DataFrame | None = None,
                 cc_energy: pd.DataFrame | None = None, cc_stats: pd.DataFrame | None = None,
                 powerapi_windows: pd.DataFrame | None = None) -> pd.DataFrame:
    """QUALITY_SCHEMA: every fact of ``facts`` with its sampling interval and coverage from
    its source's tables (see the module; a table not given leaves NaN)."""
    known = [_gpu(facts, gpu_figures),
             _clustercockpit(facts, cc_energy, cc_stats),
             _powerapi(facts, powerapi_windows)]
    done = {CC_SOURCE, GPU_SOURCE, POWERAPI_SOURCE}
    rest = facts[~facts["source"].isin(done)][_KEY].assign(sampling_interval_s=np.nan,
                                                           covered_fraction=np.nan)
    parts = [part for part in [*known, rest] if len(part)]
    table = (pd.concat(parts, ignore_index=True) if parts else
             rest.reset_index(drop=True))
    table = table.astype({"sampling_interval_s": float, "covered_fraction": float,
                          **{c: object for c in ("source", "entity", "component", "method")}})
    table = table.sort_values(_KEY, ignore_index=True)[list(QUALITY_SCHEMA.columns)]
    return validate(QUALITY_SCHEMA, table, "fact_quality")
