"""A GEOPM report as a TAUdb trial; ``docs/taudb-mapping.md``.

One trial per report, named by its key. Its threads are its hosts (node =
the host's position in the report, context 0, thread 0), so TAU's MEAN and
STDDEV threads are statistics over hosts. Timers are flat: each region (group
``GEOPM_REGION``) and the ``Application Totals``, ``Epoch Totals`` and
``Unmarked Totals`` (group ``GEOPM_TOTALS``), calls = the report's ``count``.
Metrics: ``TIME`` (``runtime (s)`` in µs) and the other time and energy
fields, each kept where every timer of every host has it; inclusive =
exclusive = the value. User events: power, frequency and the other numeric
fields, and the signals frame, as context events ``NAME : timer`` (one
sample, the value). Metadata: the header and the policy; per host its name.

A ``geopmsession --report-out`` report (no regions or totals) is one trial
too: its hosts are the threads, each with one timer ``geopmsession`` (group
``GEOPM_SESSION``, calls = samples taken); ``TIME`` is the sampled time
(``sample-time-total``) and every energy signal (``*ENERGY``, J, a counter)
is a metric, last - first; every signal is an atomic user event with the
session's statistics (count, max, min, mean, SumSqr from GEOPM's sample
standard deviation).

Values come from the core (``read_report``); nothing is parsed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.errors import InputError
from joulehouse.geopm.energy import SECTION_NAMES
from joulehouse.geopm.layout import identify_report
from joulehouse.geopm.readers import Report, read_report
from joulehouse.geopm.schemas import FIELD_COLUMNS
from joulehouse.landing import read_landed_item
from joulehouse.taudb.mapping.gpu import flatten_system_info
from joulehouse.taudb.model import DATA_SOURCE_OTHER, THREAD_COLUMNS, TrialData
from joulehouse.taudb.profiles import normalise_names

TIME_METRIC = "TIME"
REGION_GROUP = "GEOPM_REGION"
TOTALS_GROUP = "GEOPM_TOTALS"
SESSION_TIMER = "geopmsession"
SESSION_GROUP = "GEOPM_SESSION"
#: Unit suffix of a field column -> the unit in its TAU name.
_UNITS = {"_b_per_s": "B/s", "_s": "s", "_j": "J", "_w": "W", "_hz": "Hz", "_pct": "%", "_b": "B"}
#: Context events joined to their timer as TAU writes them: ``"NAME : timer"``.
CONTEXT_SEPARATOR = " : "
COUNTER_COLUMNS = ["name", "sample_count", "maximum", "minimum", "mean", "sum_squares"]


def tau_name(column: str) -> str:
    """The TAU name of a field column: ``package_energy_j`` -> ``PACKAGE_ENERGY (J)``."""
    suffix = next(s for s in _UNITS if column.endswith(s))
    return f"{column.removesuffix(suffix).upper()} ({_UNITS[suffix]})"


#: Field column -> metric name: the time and energy fields (``runtime_s`` is TIME, in µs).
METRICS = {column: TIME_METRIC if column == "runtime_s" else tau_name(column)
           for column in FIELD_COLUMNS if column.endswith(("_s", "_j"))
           and not column.endswith("_b_per_s")}
#: Field column -> user event name: power, frequency and the other numeric fields.
EVENTS = {column: tau_name(column) for column in FIELD_COLUMNS
          if column not in METRICS and column != "count"}


def read_report_trial(path: str | Path, *, timezone: str = "UTC") -> TrialData:
    """Read the report at ``path`` with the core and map it to a trial (key: its file name).

    Raises the core's InputError for a bad report.
    """
    path = Path(path).resolve()
    item = read_landed_item(path, path.name, identify_report)
    if item is None:
        raise InputError(path, "not a GEOPM report")
    return report_trial(read_report(path, timezone=timezone), item.fingerprint)


def report_trial(report: Report, fingerprint: str) -> TrialData:
    """The trial of one report; ``fingerprint`` is its landing fingerprint.

    ``source_key`` is the report's resolved path (a reload replaces the trial).
    """
    if report.shape == "session":
        return session_trial(report, fingerprint)
    entries = _entries(report)
    if entries.empty:
        raise InputError(report.path, f"a {report.shape} report without regions or totals "
                         "has no timers: not a TAUdb trial")
    hosts = list(dict.fromkeys(entries["host"]))
    node = {host: rank for rank, host in enumerate(hosts)}
    entries.insert(0, "node_rank", entries["host"].map(node))
    entries.insert(1, "context_rank", 0)
    entries.insert(2, "thread_rank", 0)
    twice = entries.duplicated(["node_rank", "name"])
    if twice.any():
        row = entries[twice].iloc[0]
        raise InputError(report.path, f"host {row['host']!r} has two timers named "
                         f"{row['name']!r} (region names alike once TAU trims them)")
    metrics = [metric for column, metric in METRICS.items() if entries[column].notna().all()]
    if TIME_METRIC not in metrics:
        raise InputError(report.path, "a region or totals section without 'runtime (s)': "
                         "no TIME for TAU")
    columns = {metric: column for column, metric in METRICS.items() if metric in metrics}
    values = pd.concat([
        entries[THREAD_COLUMNS + ["name"]].assign(
            metric=metric,
            inclusive=entries[column].to_numpy(dtype="float64") * (
                1e6 if metric == TIME_METRIC else 1.0))
        for metric, column in columns.items()], ignore_index=True)
    values["exclusive"] = values["inclusive"]
    timers = entries[THREAD_COLUMNS + ["name", "group_names"]].assign(
        calls=entries["count"].where(entries["count"] > 0, 1.0), subroutines=0.0)
    header = report.header.iloc[0]
    return TrialData(
        name=report.report,
        data_source=DATA_SOURCE_OTHER,
        metrics=metrics,
        threads=pd.DataFrame({"node_rank": np.arange(len(hosts)), "context_rank": 0,
                              "thread_rank": 0}),
        timers=timers,
        timer_values=values[THREAD_COLUMNS + ["name", "metric", "inclusive", "exclusive"]],
        counters=_counters(report, entries),
        metadata=_metadata(header, hosts),
        source_key=str(report.path.resolve()),
        fingerprint=fingerprint,
        trial_metadata={"joulehouse.source": "geopm report"},
    )


def session_trial(report: Report, fingerprint: str) -> TrialData:
    """The trial of a ``geopmsession --report-out`` report (see the module docstring).

    Raises InputError when a host has no ``sample-time-total`` (no TIME for TAU).
    """
    session = report.session
    hosts = list(dict.fromkeys(session["host"]))
    node = {host: rank for rank, host in enumerate(hosts)}
    per_host = session.drop_duplicates("host").set_index("host").loc[hosts]
    if per_host["sample_time_total_s"].isna().any():
        host = per_host.index[per_host["sample_time_total_s"].isna()][0]
        raise InputError(report.path, f"host {host!r} has no sample-time-total: no TIME for "
                         "TAU", field="sample-time-total")
    threads = pd.DataFrame({"node_rank": np.arange(len(hosts)), "context_rank": 0,
                            "thread_rank": 0})
    samples = per_host["sample_count"].to_numpy(dtype="float64")
    timers = threads.assign(name=SESSION_TIMER, group_names=SESSION_GROUP,
                            calls=np.where(samples > 0, samples, 1.0), subroutines=0.0)
    energy = session[session["signal"].str.split("@").str[0].str.endswith("ENERGY")]
    used = (energy["last_si"] - energy["first_si"]).groupby(energy["signal"], sort=False)
    # an energy metric exists where every host has the signal (TAUdb has no missing values)
    complete = [signal for signal, spent in used if spent.notna().sum() == len(hosts)]
    columns = {TIME_METRIC: per_host["sample_time_total_s"].to_numpy() * 1e6}
    for signal in complete:
        rows = energy[energy["signal"] == signal].set_index("host").loc[hosts]
        columns[f"{signal} (J)"] = (rows["last_si"] - rows["first_si"]).to_numpy()
    values = pd.concat([threads.assign(name=SESSION_TIMER, metric=metric, inclusive=value,
                                       exclusive=value)
                        for metric, value in columns.items()], ignore_index=True)
    header = report.header.iloc[0]
    return TrialData(
        name=report.report,
        data_source=DATA_SOURCE_OTHER,
        metrics=list(columns),
        threads=threads,
        timers=timers[THREAD_COLUMNS + ["name", "group_names", "calls", "subroutines"]],
        timer_values=values[THREAD_COLUMNS + ["name", "metric", "inclusive", "exclusive"]],
        counters=_session_counters(session, node),
        metadata=_metadata(header, hosts, {host: {
            "Sample Time First (UTC)": None if pd.isna(row["sample_time_first"])
            else row["sample_time_first"].isoformat(),
            "Sample Count": row["sample_count"], "Sample Time Total (s)":
            row["sample_time_total_s"], "Sample Period Mean (s)": row["sample_period_mean_s"],
            "Sample Period Std (s)": row["sample_period_std_s"]}
            for host, row in per_host.iterrows()}),
        source_key=str(report.path.resolve()),
        fingerprint=fingerprint,
        trial_metadata={"joulehouse.source": "geopm session report"},
    )


def _session_counters(session: pd.DataFrame, node: dict[str, int]) -> pd.DataFrame:
    """Every signal of every host as an atomic user event: count, max, min, mean and the
    sum of squares, ``(n - 1) std^2 + n mean^2`` (GEOPM's std is the sample deviation,
    NaN for one sample). A signal without samples or with a non-finite statistic is left
    out."""
    count = session["count"].to_numpy(dtype="float64")
    mean = session["mean_si"].to_numpy(dtype="float64")
    std = np.nan_to_num(session["std_si"].to_numpy(dtype="float64"), nan=0.0)
    counters = pd.DataFrame({
        "node_rank": session["host"].map(node).to_numpy(), "context_rank": 0, "thread_rank": 0,
        "name": normalise_names(session["signal"]), "sample_count": count,
        "maximum": session["max_si"].to_numpy(), "minimum": session["min_si"].to_numpy(),
        "mean": mean, "sum_squares": (count - 1) * std**2 + count * mean**2})
    finite = np.isfinite(counters[["maximum", "minimum", "mean", "sum_squares"]]).all(axis=1)
    counters = counters[finite & (count > 0)].astype({"sample_count": "int64"})
    return counters[THREAD_COLUMNS + COUNTER_COLUMNS].reset_index(drop=True)


def _entries(report: Report) -> pd.DataFrame:
    """One row per host and timer: ``host``, ``name``, ``group_names``, ``section``,
    ``region`` (the report's own name) and the field columns; regions first, then totals,
    in the report's order."""
    regions = report.regions.assign(section="region", group_names=REGION_GROUP)
    totals = report.totals.assign(region=report.totals["section"].map(SECTION_NAMES),
                                  group_names=TOTALS_GROUP)
    entries = pd.concat([regions, totals], ignore_index=True)
    entries["name"] = normalise_names(entries["region"])
    return entries[["host", "name", "group_names", "section", "region", *FIELD_COLUMNS]]


def _counters(report: Report, entries: pd.DataFrame) -> pd.DataFrame:
    """The user events: each non-metric field and each signal, one sample per finite value
    (NaN and inf, which a statistic cannot hold, are left out).

    A field of a region or totals section is the context event ``NAME : timer``;
    a signal of a host (an agent's host map) is the atomic event ``NAME``.
    """
    fields = pd.concat([
        entries[THREAD_COLUMNS + ["name"]].assign(event=event,
                                                  value=entries[column].astype("float64"))
        for column, event in EVENTS.items()], ignore_index=True)
    signals = report.signals
    timer = signals["region"].where(signals["section"] == "region",
                                    signals["section"].map(SECTION_NAMES))
    node = dict(zip(entries["host"], entries["node_rank"]))
    signal_rows = pd.DataFrame({"node_rank": signals["host"].map(node), "context_rank": 0,
                                "thread_rank": 0,
                                "name": pd.Series(normalise_names(timer.fillna("")), dtype=object),
                                "event": signals["field"],
                                "value": signals["value"].astype("float64")})
    rows = pd.concat([fields, signal_rows], ignore_index=True)
    rows = rows[np.isfinite(rows["value"]) & rows["node_rank"].notna()]
    events = pd.Series(normalise_names(rows["event"]), index=rows.index, dtype=object)
    names = events.where(rows["name"] == "", events + CONTEXT_SEPARATOR + rows["name"])
    value = rows["value"].to_numpy()
    counters = pd.DataFrame({
        "node_rank": rows["node_rank"].astype("int64").to_numpy(), "context_rank": 0,
        "thread_rank": 0, "name": names.to_numpy(), "sample_count": 1, "maximum": value,
        "minimum": value, "mean": value, "sum_squares": value**2})
    return counters[THREAD_COLUMNS + COUNTER_COLUMNS]


def _metadata(header: pd.Series, hosts: list[str],
              per_host: dict[str, dict] | None = None) -> pd.DataFrame:
    """The header (the policy as its JSON text, agent header keys flattened) on every host,
    each host's name and its ``per_host`` attributes (None and NaN left out)."""
    attributes = {
        "GEOPM Version": header["geopm_version"], "Start Time (UTC)": (
            None if pd.isna(header["start_time"]) else header["start_time"].isoformat()),
        "Profile": header["profile"], "Agent": header["agent"],
        "Policy": header["policy_json"], "report shape": header["shape"],
        "Figure of Merit": header["figure_of_merit"],
        "Total Runtime (s)": header["total_runtime_s"],
    }
    shared = _texts(attributes) | flatten_system_info(json.loads(header["extra_json"]),
                                                      "header")
    rows = [{"node_rank": node, "context_rank": 0, "thread_rank": 0, "name": name,
             "value": value}
            for node, host in enumerate(hosts)
            for name, value in {**shared, "host": host,
                                **_texts((per_host or {}).get(host, {}))}.items()]
    return pd.DataFrame(rows, columns=THREAD_COLUMNS + ["name", "value"])


def _texts(attributes: dict) -> dict[str, str]:
    """Attributes as TAU's metadata strings: text as is, a number as its repr; None and NaN
    left out."""
    return {name: value if isinstance(value, str) else repr(float(value))
            for name, value in attributes.items() if not pd.isna(value)}
