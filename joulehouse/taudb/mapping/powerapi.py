"""PowerAPI reports as TAUdb trials, one per sensor and day; ``docs/taudb-mapping.md``.

A path's report files (HWPC reports of hwpc-sensor, power reports of a
formula) are read together with the core and windowed by
:func:`joulehouse.powerapi.energy.window_energy`. Each sensor and UTC day
becomes the trial ``<sensor>/<YYYY-MM-DD>``: its threads are the targets
(node = the target's position in name order, context 0, thread 0), its
timers the windows (``window HH:MM:SS``, the window's aligned start, one
call each), its metrics ``TIME`` (µs covered) and the energy (J) by method
and component (``MEASURED CPU ENERGY (J)``, ``ESTIMATED CPU ENERGY (J)``,
...). A target has energy by one method only (``all``: measured; every
other target: estimated), and TAUdb has no missing value, so the other
method's metric is 0 there. User events: the power reports (W per tick,
summed over sockets) of each target, and on ``all`` the estimates' relative
error per window (%).

Values come from the core (``joulehouse.powerapi``); nothing is parsed or
integrated here.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.digest import digest_pairs
from joulehouse.errors import InputError
from joulehouse.powerapi import layout
from joulehouse.powerapi.energy import MACHINE_TARGETS
from joulehouse.powerapi.reports import read_reports
from joulehouse.taudb.model import DATA_SOURCE_OTHER, THREAD_COLUMNS, TrialData

DEFAULT_WINDOW = "1min"
TIME_METRIC = "TIME"
WINDOW_GROUP = "POWERAPI_WINDOW"
METHODS = ("measured", "estimated")
_DAY_NS = pd.Timedelta(days=1).value
_STATISTICS = ["sample_count", "maximum", "minimum", "mean", "sum_squares"]


def energy_metric(method: str, component: str) -> str:
    """The metric of one method's energy of one component: ``MEASURED CPU ENERGY (J)``."""
    return f"{method.upper()} {component.upper()} ENERGY (J)"


def read_trials(path: str | os.PathLike[str], *, window: str = DEFAULT_WINDOW,
                timezone: str = "UTC", epoch_zone: str | None = None,
                targets: tuple[str, ...] = MACHINE_TARGETS) -> list[TrialData]:
    """The trials of every report file under ``path`` (a file or a folder), read together;
    ``targets``: the machine-level target names (the setting ``MACHINE_TARGETS_ENV``).

    Raises the readers' InputError for a bad file (a path is loaded whole or
    not at all) and an InputError when ``path`` holds no HWPC or power report,
    or none that gives energy.
    """
    source = Path(path).resolve()
    files = [item for item in layout.discover(source) if item.kind != layout.OTHER]
    if not files:
        raise InputError(source, "no PowerAPI HWPC or power report files")
    found = read_reports(files, timezone=timezone, epoch_zone=epoch_zone)
    stats = {str(item.path): f"{(s := item.path.stat()).st_size}:{s.st_mtime_ns}"
             for item in files}
    trials = session_trials(found.window_energy(window, targets), found.power, window=window,
                            source=str(source), fingerprint=digest_pairs(
                                stats | {"#window": window}))
    if not trials:
        raise InputError(source, "no energy in its reports: no RAPL energy of a "
                         f"machine-level target ({', '.join(targets)}) and no power report "
                         "of known duration")
    return trials


def session_trials(table: pd.DataFrame, power: pd.DataFrame | None, *, window: str,
                   source: str, fingerprint: str) -> list[TrialData]:
    """One trial per sensor and UTC day of a ``window_energy`` table, in that order.

    ``power``: the power reports the table's estimates came from (user
    events), or None. ``window`` is the table's window: whole seconds that
    divide a day, so windows have distinct names and never span midnight.
    ``source_key``: ``<source>#<sensor>/<day>``.
    """
    window_ns = pd.Timedelta(window).value
    if window_ns <= 0 or window_ns % 1_000_000_000 or _DAY_NS % window_ns:
        raise ValueError(f"a TAUdb window is whole seconds dividing a day, not {window!r}")
    starts = _ns(table["window_start"]) // window_ns * window_ns
    table = table.assign(window=pd.to_datetime(starts, utc=True))
    table["day"] = table["window"].dt.floor("D")
    if power is not None:  # a report covers the tick ending at its time: 00:00:00 is the day before
        power = power.assign(day=(power["timestamp"] - pd.Timedelta(1, "ns")).dt.floor("D"))
    trials = []
    for (sensor, day), rows in table.groupby(["sensor", "day"], sort=True):
        reports = None if power is None else power[(power["sensor"] == sensor)
                                                   & (power["day"] == day)]
        name = f"{sensor}/{day:%Y-%m-%d}"
        trials.append(_trial(rows, reports, name=name, source_key=f"{source}#{name}",
                             fingerprint=fingerprint, attributes={
                                 "joulehouse.source": "powerapi sensor day",
                                 "powerapi.sensor": sensor, "powerapi.day": f"{day:%Y-%m-%d}",
                                 "powerapi.window": window}))
    return trials


def _ns(times: pd.Series) -> np.ndarray:
    return np.asarray(times.values, dtype="datetime64[ns]").view("int64")


def _trial(rows: pd.DataFrame, power: pd.DataFrame | None, *, name: str, source_key: str,
           fingerprint: str, attributes: dict[str, str]) -> TrialData:
    targets = sorted(rows["target"].unique())
    node = {target: rank for rank, target in enumerate(targets)}
    rows = rows.assign(node_rank=rows["target"].map(node), context_rank=0, thread_rank=0,
                       name="window " + rows["window"].dt.strftime("%H:%M:%S"),
                       metric=[energy_metric(m, c) for m, c in zip(
                           rows["method"], rows["component"], strict=True)])
    present = set(rows["metric"])
    metrics = [TIME_METRIC] + [energy_metric(method, component)
                               for component in sorted(rows["component"].unique())
                               for method in METHODS if energy_metric(method, component) in present]
    entry = THREAD_COLUMNS + ["name"]
    inclusive = rows.pivot_table(index=entry, columns="metric", values="energy_j",
                                 aggfunc="sum", fill_value=0.0)
    inclusive[TIME_METRIC] = rows.groupby(entry)["duration_s"].max() * 1e6
    values = inclusive[metrics].rename_axis(columns="metric").stack().rename(
        "inclusive").reset_index()
    values["exclusive"] = values["inclusive"]
    timers = inclusive.index.to_frame(index=False).assign(group_names=WINDOW_GROUP, calls=1.0,
                                                          subroutines=0.0)
    methods = rows.groupby("target")["method"].agg(lambda m: ", ".join(sorted(set(m))))
    metadata = pd.DataFrame({"node_rank": range(len(targets)), "context_rank": 0,
                             "thread_rank": 0, "target": targets,
                             "method": methods.reindex(targets).to_numpy()}).melt(
        id_vars=THREAD_COLUMNS, var_name="name", value_name="value")
    return TrialData(
        name=name,
        data_source=DATA_SOURCE_OTHER,
        metrics=metrics,
        threads=pd.DataFrame({"node_rank": range(len(targets)), "context_rank": 0,
                              "thread_rank": 0}),
        timers=timers[THREAD_COLUMNS + ["name", "group_names", "calls", "subroutines"]],
        timer_values=values[THREAD_COLUMNS + ["name", "metric", "inclusive", "exclusive"]],
        counters=_user_events(rows, power, node),
        metadata=metadata.sort_values(THREAD_COLUMNS, kind="stable", ignore_index=True),
        source_key=source_key,
        fingerprint=fingerprint,
        trial_metadata=attributes,
    )


def _user_events(rows: pd.DataFrame, power: pd.DataFrame | None,
                 node: dict[str, int]) -> pd.DataFrame:
    """Per thread: ``<COMPONENT> POWER (W)``, each target's power per tick (summed over
    sockets), and on ``all`` ``<COMPONENT> ESTIMATE ERROR (%)``, the estimates' relative
    error per window."""
    samples = []
    if power is not None and len(power):
        reports = power[power["target"].isin(list(node))].assign(
            component=power["scope"].fillna("cpu"))
        ticks = reports.groupby(["target", "component", "timestamp"], as_index=False)[
            "power_w"].sum()
        samples.append(pd.DataFrame({"target": ticks["target"],
                                     "name": ticks["component"].str.upper() + " POWER (W)",
                                     "value": ticks["power_w"]}))
    measured = rows[(rows["method"] == "measured") & rows["relative_error"].notna()]
    if len(measured):
        samples.append(pd.DataFrame({"target": measured["target"],
                                     "name": measured["component"].str.upper()
                                     + " ESTIMATE ERROR (%)",
                                     "value": measured["relative_error"] * 100.0}))
    if not samples:
        return pd.DataFrame(columns=THREAD_COLUMNS + ["name", *_STATISTICS])
    frame = pd.concat(samples, ignore_index=True).assign(
        square=lambda f: f["value"] ** 2)
    events = frame.groupby(["target", "name"], sort=True).agg(
        sample_count=("value", "size"), maximum=("value", "max"), minimum=("value", "min"),
        mean=("value", "mean"), sum_squares=("square", "sum")).reset_index()
    events.insert(0, "node_rank", events.pop("target").map(node))
    events.insert(1, "context_rank", 0)
    events.insert(2, "thread_rank", 0)
    return events.sort_values(THREAD_COLUMNS + ["name"], ignore_index=True)
