"""Energy of GEOPM reports: per host and region, rolled up by GEOPM's own rules, and facts.

geopm_report(7): energies and ``sync-runtime (s)`` are sampled together
(deltas while all the host's CPUs were in the region); ``power (W)`` and the
frequencies are ratios of such deltas; ``runtime (s)`` and ``count`` are
means over the host's processes from exact entry/exit times, and are not to
be compared with the sampled fields. So a roll-up over hosts sums energies
and times (J, host-seconds) and derives power from the sums,

- ``power_w`` = sum(package_energy_j) / sum(sync_runtime_s), the times
  summed over the hosts that have a package energy: mean package power per
  host over the sampled time (never a mean of the hosts' powers);
- ``gpu_power_w`` likewise from ``gpu_energy_j``, over the hosts with a GPU
  energy (a host without a GPU adds no time);
- ``frequency_hz`` = sum(frequency_hz x sync_runtime_s) / sum(sync_runtime_s):
  cycles over time, exact only if the hosts' sticker frequencies are equal
  (a report does not hold the cycle counts themselves);

and keeps ``runtime_s`` (summed, host-seconds) apart from them. A sum over
values that are all missing is missing (NaN), not 0.

Legacy 1.x Application Totals have no sync-runtime: GEOPM 1.x wrote their
power as energy / runtime (and geopmpy's converter sets sync-runtime =
runtime), so the time of these ratios is ``runtime_s`` where
``sync_runtime_s`` is missing (:func:`ratio_time_s`); the ``sync_runtime_s``
column stays as written.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.facts_entries import Ownership
from joulehouse.geopm import schemas
from joulehouse.geopm.readers import Report
from joulehouse.leftout import LeftOut
from joulehouse.validation import validate

FACTS_SOURCE = "geopm"
#: A report (its partition key) owns its hosts' entities ``<report>/<host>`` in energy_facts
#: (a host name holds no ``/``).
FACTS_OWNERSHIP = Ownership(prefix=lambda report: f"{report}/",
                            owner_of=lambda entity: entity.rsplit("/", 1)[0])

#: Summed over hosts (J, s, host-seconds).
SUMMED = ["runtime_s", "sync_runtime_s", "package_energy_j", "dram_energy_j", "gpu_energy_j"]
#: The per report, host and region energy table (``joulehouse energy geopm``).
HOST_ENERGY_COLUMNS = ["report", "host", "section", "region", "hash", "runtime_s",
                       "sync_runtime_s", "package_energy_j", "dram_energy_j", "gpu_energy_j",
                       "power_w", "gpu_power_w", "frequency_hz"]
#: Components of ``energy_facts``: (column, component, method).
FACT_COMPONENTS = [("package_energy_j", "cpu", "rapl"), ("dram_energy_j", "dram", "rapl"),
                   ("gpu_energy_j", "gpu", "counter")]
#: The name of a totals section in the ``region`` column of the host energy table.
SECTION_NAMES = {"application": "Application Totals", "epoch": "Epoch Totals",
                 "unmarked": "Unmarked Totals"}


def _ratio(numerator: pd.Series, denominator: pd.Series) -> pd.Series:
    """numerator / denominator, NaN where the denominator is 0 or missing."""
    return numerator / denominator.where(denominator > 0)


def ratio_time_s(table: pd.DataFrame) -> pd.Series:
    """The time (s) GEOPM's ratios are over: sync-runtime, or runtime where there is none."""
    return table["sync_runtime_s"].fillna(table["runtime_s"])


def host_energy(report: Report) -> pd.DataFrame:
    """One row per host and region, and per host and totals section (``section`` says which).

    Energies and times as the report wrote them; ``power_w`` and
    ``gpu_power_w`` recomputed as energy / :func:`ratio_time_s` (what GEOPM's
    own ``power (W)`` is), so the table is the same for every report version.
    Totals rows have ``region`` = the section's name (``Application Totals``
    ...) and no hash.
    """
    regions = report.regions.assign(section="region")
    totals = report.totals.assign(region=report.totals["section"].map(SECTION_NAMES),
                                  hash=None)
    table = pd.concat([regions, totals], ignore_index=True)
    time_s = ratio_time_s(table)
    table["power_w"] = _ratio(table["package_energy_j"], time_s)
    table["gpu_power_w"] = _ratio(table["gpu_energy_j"], time_s)
    return validate(schemas.HOST_ENERGY_SCHEMA, table[HOST_ENERGY_COLUMNS], report.path)


def rollup(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sum energies and times over hosts by ``by`` and derive power and frequency from sums.

    ``table`` has the field columns (the regions or totals frame, or
    :func:`host_energy`); the result has ``by``, ``host_count`` and
    :data:`SUMMED`, then ``power_w``, ``gpu_power_w`` and ``frequency_hz``.
    """
    time_s = ratio_time_s(table)
    timed = {"_package_time": time_s.where(table["package_energy_j"].notna()),
             "_gpu_time": time_s.where(table["gpu_energy_j"].notna()),
             "_frequency_time": time_s.where(table["frequency_hz"].notna())}
    weighted = table.assign(_cycles=table["frequency_hz"] * time_s, **timed)
    grouped = weighted.groupby(by, sort=False, dropna=False)
    sums = grouped[[*SUMMED, "_cycles", *timed]].sum(min_count=1)
    sums.insert(0, "host_count", grouped["host"].nunique())
    sums["power_w"] = _ratio(sums["package_energy_j"], sums["_package_time"])
    sums["gpu_power_w"] = _ratio(sums["gpu_energy_j"], sums["_gpu_time"])
    sums["frequency_hz"] = _ratio(sums["_cycles"], sums["_frequency_time"])
    return sums.drop(columns=["_cycles", *timed]).reset_index()


def region_rollup(report: Report) -> pd.DataFrame:
    """Per report and region (name and hash) across hosts: see :func:`rollup`."""
    return regions_across_hosts(report.regions, report.path)


def report_rollup(report: Report) -> pd.DataFrame:
    """Per report and totals section across hosts (application, epoch, unmarked)."""
    return sections_across_hosts(report.totals, report.path)


def regions_across_hosts(regions: pd.DataFrame, where: str | os.PathLike[str]) -> pd.DataFrame:
    """:func:`region_rollup` of the regions frames of one or many reports (concatenated);
    an InputError names ``where``."""
    return validate(schemas.REGION_ROLLUP_SCHEMA, rollup(regions, ["report", "region", "hash"]),
                    where)


def sections_across_hosts(totals: pd.DataFrame, where: str | os.PathLike[str]) -> pd.DataFrame:
    """:func:`report_rollup` of the totals frames of one or many reports (concatenated)."""
    return validate(schemas.REPORT_ROLLUP_SCHEMA, rollup(totals, ["report", "section"]), where)


def energy_facts_rows(report: Report) -> pd.DataFrame:
    """The ``energy_facts`` rows of a report: per host, the Application Totals' energies.

    ``entity`` is ``<report>/<host>``; components ``cpu`` (package energy)
    and ``dram`` (method ``rapl``), ``gpu`` (``counter``); the window is the
    report's Start Time plus the host's application ``runtime (s)`` (start
    to end of the application), ``duration_s`` that runtime. A component the
    report lacks, or a report without a start time, gives no row. Region
    rows stay in the GEOPM tables. Rows are checked against
    ENERGY_FACTS_SCHEMA (InputError naming ``energy_facts``).
    """
    return facts_rows(report.header, report.totals)


def facts_rows(header: pd.DataFrame, totals: pd.DataFrame) -> pd.DataFrame:
    """:func:`energy_facts_rows` of one or many reports: their header and totals frames
    (concatenated), joined on ``report``."""
    start = header.drop_duplicates("report").set_index("report")["start_time"]
    application = totals[totals["section"] == "application"]
    application = application.assign(_start=application["report"].map(start))
    application = application[application["_start"].notna()]
    if application.empty:
        return pd.DataFrame(columns=ENERGY_FACTS_COLUMNS)
    duration = application["runtime_s"].astype("float64")
    entity = application["report"] + "/" + application["host"]
    parts = [
        pd.DataFrame({
            "source": FACTS_SOURCE,
            "entity": entity,
            "component": component,
            "window_start": application["_start"],
            "window_end": application["_start"] + pd.to_timedelta(duration.to_numpy(), unit="s"),
            "duration_s": duration,
            "energy_j": application[column].astype("float64"),
            "method": method,
        }, columns=ENERGY_FACTS_COLUMNS)
        for column, component, method in FACT_COMPONENTS
    ]
    facts = pd.concat(parts, ignore_index=True).dropna(subset=["energy_j", "duration_s"])
    for column in ("window_start", "window_end"):
        facts[column] = facts[column].astype(ENERGY_FACTS_SCHEMA.columns[column].dtype.type)
    facts = facts.sort_values(["entity", "component", "method"], ignore_index=True)
    return validate(ENERGY_FACTS_SCHEMA, facts, "energy_facts") if len(facts) else facts


def left_out(report: Report, path: str | os.PathLike[str]) -> list[LeftOut]:
    """What :func:`energy_facts_rows` leaves out of ``report`` (read from ``path``) that the
    user would miss: every fact of a report without ``Start Time`` (a fact needs its window;
    the host energies are still read)."""
    if report.header["start_time"].notna().all():
        return []
    hosts = report.totals.loc[report.totals["section"] == "application", "host"].nunique()
    return [LeftOut(FACTS_SOURCE, str(path), f"its energy_facts rows ({hosts} host(s))",
                    "the report has no Start Time: a fact needs its window")]


def total_energy_j(report: Report) -> float:
    """Package + DRAM + GPU energy of the report's Application Totals over all hosts (J)."""
    application = report.totals[report.totals["section"] == "application"]
    columns = [column for column, _, _ in FACT_COMPONENTS]
    return float(np.nansum(application[columns].to_numpy()))
