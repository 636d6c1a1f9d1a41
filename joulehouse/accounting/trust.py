"""Trust: energy facts checked across methods and sources where they measure the same thing.

Each rule pairs a *reference* figure with a *compared* one over the same entity and
window, and passes when ``ratio = compared_j / reference_j`` lies in ``[low, high]``.
Rules are versioned code: change a rule's pairing or bounds and its ``version`` goes up,
and every row of the ``trust_checks`` table names the rule and version that judged it.

======================== ============================== ============================== ==============
rule                     reference                      compared                       passes when
======================== ============================== ============================== ==============
gpu_counter_vs_power     GPU energy counter (``gpu``,   the GPU's integrated power     0.95 <= r <= 1.05
                         ``counter``)                   (``power``), same repetition
external_at_least_gpu    GPU energy counter             the external meter             r >= 1
                                                        (``external``), same window    (a meter outside
                                                                                       sees the GPU too)
smartwatts_vs_rapl       PowerAPI RAPL measurement      the sum of SmartWatts'         0.8 <= r <= 1.05
                         (``measured``) per sensor,     per-cgroup estimates           (they share out
                         component and window           (``estimated``)                the measurement,
                                                                                       idle time aside)
geopm_vs_clustercockpit  a ClusterCockpit job's CPU     GEOPM package energy (``cpu``  0.9 <= r <= 1.1
                         power integration, prorated    ``rapl``) of the job's hosts
                         to the GEOPM report's window   in that report
======================== ============================== ============================== ==============

Pairs exist only where both figures do (a GEOPM report on a job's host inside the job's
time): a rule with no pair judges nothing, and says so. Ratios of a zero reference are NaN
and fail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from joulehouse.accounting.schemas import TRUST_SCHEMA
from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.geopm.energy import FACTS_SOURCE as GEOPM_SOURCE
from joulehouse.gpu.energy import FACTS_SOURCE as GPU_SOURCE
from joulehouse.powerapi.energy import FACTS_SOURCE as POWERAPI_SOURCE
from joulehouse.validation import validate


@dataclass(frozen=True)
class Rule:
    """A trust rule: its id, version, what it compares and the bounds of the ratio."""

    id: str
    version: int
    reference: str
    compared: str
    low: float
    high: float = np.inf


GPU_COUNTER_VS_POWER = Rule("gpu_counter_vs_power", 1, "gpu counter", "gpu power", 0.95, 1.05)
EXTERNAL_AT_LEAST_GPU = Rule("external_at_least_gpu", 1, "gpu counter", "external meter", 1.0)
SMARTWATTS_VS_RAPL = Rule("smartwatts_vs_rapl", 1, "rapl measured", "smartwatts estimates sum",
                          0.8, 1.05)
GEOPM_VS_CLUSTERCOCKPIT = Rule("geopm_vs_clustercockpit", 2, "clustercockpit cpu power",
                               "geopm cpu rapl", 0.9, 1.1)
RULES = [GPU_COUNTER_VS_POWER, EXTERNAL_AT_LEAST_GPU, SMARTWATTS_VS_RAPL,
         GEOPM_VS_CLUSTERCOCKPIT]
_WINDOW = ["window_start", "window_end"]


def _judged(rule: Rule, pairs: pd.DataFrame) -> pd.DataFrame:
    """TRUST_SCHEMA rows of ``pairs`` (columns ``source``, ``entity``, ``component``, the
    window, ``reference_j``, ``compared_j``) judged by ``rule``."""
    reference = pairs["reference_j"].to_numpy(float)
    compared = pairs["compared_j"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(reference > 0, compared / reference, np.nan)
    return pd.DataFrame({
        "rule": rule.id, "version": np.int64(rule.version),
        "source": pairs["source"].astype(str).to_numpy(),
        "entity": pairs["entity"].astype(str).to_numpy(),
        "component": pairs["component"].astype(str).to_numpy(),
        "window_start": pairs["window_start"].to_numpy(),
        "window_end": pairs["window_end"].to_numpy(),
        "reference": rule.reference, "reference_j": reference,
        "compared": rule.compared, "compared_j": compared, "ratio": ratio,
        "low": rule.low, "high": rule.high,
        "passed": (ratio >= rule.low) & (ratio <= rule.high),
    })


def _same_window(facts: pd.DataFrame, source: str, reference: tuple[str, str],
                 compared: tuple[str, str]) -> pd.DataFrame:
    """Pairs of ``source``'s facts of one entity and window: (component, method) of the
    reference and of the compared figure."""
    mine = facts[facts["source"] == source]

    def pick(component: str, method: str, name: str) -> pd.DataFrame:
        rows = mine[(mine["component"] == component) & (mine["method"] == method)]
        return rows[["entity", *_WINDOW, "energy_j"]].rename(columns={"energy_j": name})

    pairs = pick(*reference, "reference_j").merge(pick(*compared, "compared_j"),
                                                  on=["entity", *_WINDOW])
    return pairs.assign(source=source, component=reference[0])


def _smartwatts(facts: pd.DataFrame) -> pd.DataFrame:
    """Per PowerAPI sensor, component and window: the measurement and the estimates' sum."""
    mine = facts[facts["source"] == POWERAPI_SOURCE]
    mine = mine.assign(sensor=mine["entity"].str.split("/").str[0])
    keys = ["sensor", "component", *_WINDOW]
    measured = (mine[mine["method"] == "measured"].groupby(keys, observed=True)["energy_j"]
                .sum().rename("reference_j"))
    estimated = (mine[mine["method"] == "estimated"].groupby(keys, observed=True)["energy_j"]
                 .sum().rename("compared_j"))
    pairs = pd.concat([measured, estimated], axis=1, join="inner").reset_index()
    return pairs.rename(columns={"sensor": "entity"}).assign(source=POWERAPI_SOURCE)


def job_hosts(cc_jobs: pd.DataFrame) -> pd.DataFrame:
    """``job`` and ``host`` per host of each ClusterCockpit job (from ``resources``)."""
    rows = [(job, item["hostname"]) for job, resources in
            zip(cc_jobs["job"], cc_jobs["resources"], strict=True)
            for item in json.loads(resources or "[]") if "hostname" in item]
    return pd.DataFrame(rows, columns=["job", "host"])


def _geopm_in_jobs(facts: pd.DataFrame, cc_jobs: pd.DataFrame | None) -> pd.DataFrame:
    """Per ClusterCockpit job and GEOPM report on its hosts inside its time: the job's CPU
    energy prorated to the report's window (constant power) and to the share of the job's
    hosts the report covers (the same power on every host; version 2: version 1 compared
    the whole job with a report on some of its hosts), and the report's package energy
    over those hosts."""
    empty = pd.DataFrame(columns=["source", "entity", "component", *_WINDOW,
                                  "reference_j", "compared_j"])
    if cc_jobs is None or cc_jobs.empty:
        return empty
    jobs = facts[(facts["source"] == CC_SOURCE) & (facts["component"] == "cpu")
                 & (facts["method"] == "power")]
    geopm = facts[(facts["source"] == GEOPM_SOURCE) & (facts["component"] == "cpu")
                  & (facts["method"] == "rapl")]
    if jobs.empty or geopm.empty:
        return empty
    fields = geopm["entity"].str.rsplit("/", n=1)
    geopm = geopm.assign(report=fields.str[0], host=fields.str[1])
    hosts = job_hosts(cc_jobs)
    job_host_count = hosts.groupby("job")["host"].nunique().rename("job_hosts")
    on_hosts = (jobs.rename(columns={"entity": "job"})
                .merge(hosts, on="job")
                .merge(geopm, on="host", suffixes=("", "_g")))
    inside = ((on_hosts["window_start_g"] >= on_hosts["window_start"])
              & (on_hosts["window_end_g"] <= on_hosts["window_end"]))
    on_hosts = on_hosts[inside]
    if on_hosts.empty:
        return empty
    grouped = on_hosts.groupby(["job", "report"], observed=True).agg(
        window_start=("window_start_g", "min"), window_end=("window_end_g", "max"),
        job_energy_j=("energy_j", "first"), job_duration_s=("duration_s", "first"),
        compared_j=("energy_j_g", "sum"), hosts=("host", "nunique")).reset_index()
    grouped = grouped.join(job_host_count, on="job")
    seconds = (grouped["window_end"] - grouped["window_start"]).dt.total_seconds()
    grouped["reference_j"] = (grouped["job_energy_j"] * seconds / grouped["job_duration_s"]
                              * grouped["hosts"] / grouped["job_hosts"])
    return grouped.rename(columns={"job": "entity"}).assign(source=CC_SOURCE, component="cpu")


def trust_checks(facts: pd.DataFrame, cc_jobs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every rule of RULES over ``facts`` (energy_facts rows of any sources; ``cc_jobs``
    gives ClusterCockpit jobs their hosts): the TRUST_SCHEMA table, one row per pair."""
    parts = [
        _judged(GPU_COUNTER_VS_POWER, _same_window(facts, GPU_SOURCE, ("gpu", "counter"),
                                                   ("gpu", "power"))),
        _judged(EXTERNAL_AT_LEAST_GPU, _same_window(facts, GPU_SOURCE, ("gpu", "counter"),
                                                    ("external", "external"))),
        _judged(SMARTWATTS_VS_RAPL, _smartwatts(facts)),
        _judged(GEOPM_VS_CLUSTERCOCKPIT, _geopm_in_jobs(facts, cc_jobs)),
    ]
    table = (pd.concat([part for part in parts if len(part)], ignore_index=True)
             if any(len(part) for part in parts) else parts[0])
    for column in _WINDOW:
        table[column] = pd.to_datetime(table[column], utc=True).astype(TRUST_SCHEMA.columns[
            column].dtype.type)
    table["passed"] = table["passed"].astype(bool)
    table["version"] = table["version"].astype("int64")
    return validate(TRUST_SCHEMA, table, "trust_checks")


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per rule of RULES (all of them, judged or not): version, pairs, failed pairs and the
    lowest and highest ratio."""
    rows = []
    for rule in RULES:
        mine = table[table["rule"] == rule.id]
        rows.append({"rule": rule.id, "version": rule.version, "pairs": len(mine),
                     "failed": int((~mine["passed"]).sum()),
                     "min_ratio": float(mine["ratio"].min()) if len(mine) else np.nan,
                     "max_ratio": float(mine["ratio"].max()) if len(mine) else np.nan})
    return pd.DataFrame(rows)
