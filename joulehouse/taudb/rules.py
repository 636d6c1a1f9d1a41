"""What TAU's own tools need of a trial beyond TAUdb's DDL, in one place.

ParaProf and PerfExplorer open a trial through PerfDMF's ``DBDataSource.load()``.
Every :class:`~joulehouse.taudb.model.TrialData` passes through
:func:`check_trial`, :func:`with_flat_entries` and :func:`timer_groups` on its
way into TAUdb (the loader calls them), so no source mapping can break these
rules unnoticed. ``docs/taudb.md`` ("What TAU's tools need") explains each.

- Names: timer, callpath frame, metric and user event names are non-empty and
  without leading or trailing blanks (TAU's loader trims them; the reader
  would show a different name); metric names are unique.
- Every (thread, timer entry) has a value for every metric of the trial, and
  no value is NaN: TAUdb has no missing value, TAU's reader would read a 0
  and average it into its MEAN. Nor is a user event's value (maximum,
  minimum, mean, sum of squares) NaN.
- calls and subroutines are finite and >= 0; an entry with 0 calls is not
  written at all (TAU's rule), so TAU's reader does not show it.
- Every callpath leaf has a flat entry on each thread that entered it
  (:func:`with_flat_entries` derives the missing ones): TAU writes both, and
  ParaProf's default views show flat functions only.
- Every timer has at least one group (:func:`timer_groups`): the reader reads
  its functions with an inner join on ``timer_group`` (as the
  ``interval_event`` view does), so the values of a timer without a group arrive for a
  function it never created (NullPointerException in
  ``fastGetIntervalEventData``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from joulehouse.taudb.model import CALLPATH_SEPARATOR, THREAD_COLUMNS, TrialData

#: The group TAU itself gives a timer that states none (``TAU_DEFAULT``).
DEFAULT_GROUP = "TAU_DEFAULT"
#: A user event's values, none of which may be NaN.
_EVENT_VALUES = ["maximum", "minimum", "mean", "sum_squares"]
#: The group TAU's reader adds to every callpath function; not a group of the timer.
CALLPATH_GROUP = "TAU_CALLPATH"


def check_trial(trial: TrialData) -> None:
    """Raise ValueError naming the first broken rule (see the module docstring)."""
    metrics = pd.Index(trial.metrics)
    if metrics.has_duplicates:
        raise ValueError(f"TrialData.metrics names a metric twice: {trial.metrics}")
    _check_names("metrics", metrics.to_series())
    frames = trial.timers["name"].str.split(CALLPATH_SEPARATOR, regex=False).explode()
    _check_names("timers (a callpath frame)", frames)
    _check_names("counters", trial.counters["name"])
    for column in ("calls", "subroutines"):
        value = trial.timers[column].to_numpy(dtype="float64")
        bad = ~np.isfinite(value) | (value < 0)
        if bad.any():
            where = int(np.argmax(bad))
            raise ValueError(f"TrialData.timers: {column} {value[where]} of "
                             f"{trial.timers['name'].iloc[where]!r} "
                             "is not a finite number >= 0")
    events = trial.counters[_EVENT_VALUES].to_numpy(dtype="float64")
    if np.isnan(events).any():
        row, column = np.argwhere(np.isnan(events))[0]
        raise ValueError(f"TrialData.counters: NaN {_EVENT_VALUES[column]} of "
                         f"{trial.counters['name'].iloc[row]!r} (TAUdb has no missing values)")
    values = trial.timer_values[["inclusive", "exclusive"]].to_numpy(dtype="float64")
    if np.isnan(values).any():
        row = trial.timer_values.iloc[int(np.argmax(np.isnan(values).any(axis=1)))]
        raise ValueError(f"TrialData.timer_values: NaN for {row['name']!r}, metric "
                         f"{row['metric']!r} (TAUdb has no missing values)")
    unknown = trial.timer_values.loc[~trial.timer_values["metric"].isin(metrics), "metric"]
    if len(unknown):
        raise ValueError(f"TrialData.timer_values: metric {unknown.iloc[0]!r} "
                         f"is not in TrialData.metrics {trial.metrics}")
    keys = THREAD_COLUMNS + ["name"]
    twice = trial.timer_values.duplicated(keys + ["metric"])
    if twice.any():
        row = trial.timer_values[twice].iloc[0]
        thread = tuple(int(row[c]) for c in THREAD_COLUMNS)
        raise ValueError(f"TrialData.timer_values: two values for {row['name']!r}, metric "
                         f"{row['metric']!r} on thread {thread}")
    # each (entry, metric) at most once and every metric known: a count of one per metric
    count = trial.timer_values.groupby(keys).size().reindex(
        pd.MultiIndex.from_frame(trial.timers[keys]), fill_value=0)
    short = count[count != len(trial.metrics)]
    if len(short):
        entry, found = short.index[0], int(short.iloc[0])
        raise ValueError(f"TrialData.timer_values: {found} values for {entry[-1]!r} on "
                         f"thread {tuple(int(r) for r in entry[:3])}, one per metric "
                         f"({len(trial.metrics)}) needed")


def with_flat_entries(trial: TrialData) -> TrialData:
    """``trial`` with a flat entry for every callpath leaf a thread lacks one for.

    TAU's measurement writes a flat profile beside every callpath, and
    ParaProf's default views show flat functions only. The derived entry of
    timer X on a thread sums the callpath entries ending in X there: calls,
    subroutines and exclusive values over all of them, inclusive values over
    those where X is not already an outer frame (a recursive path's inclusive
    time is inside its outer call's). Its groups are those of these entries
    (``TAU_CALLPATH`` dropped). Entries the trial states are kept as they are.
    """
    timers = trial.timers
    frames = timers["name"].str.split(CALLPATH_SEPARATOR, regex=False)
    is_path = frames.str.len() > 1
    if not is_path.any():
        return trial
    keys = THREAD_COLUMNS + ["name"]
    leaf = frames[is_path].str[-1].str.strip()
    paths = timers[is_path].assign(leaf=leaf, outermost=[
        f[-1].strip() not in {frame.strip() for frame in f[:-1]} for f in frames[is_path]])
    flat = pd.MultiIndex.from_frame(timers.loc[~is_path, keys])
    wanted = pd.MultiIndex.from_frame(paths[THREAD_COLUMNS + ["leaf"]])
    paths = paths[~wanted.isin(flat)]
    if paths.empty:
        return trial
    by_leaf = THREAD_COLUMNS + ["leaf"]
    groups = paths["group_names"].fillna("").str.split("|").explode().str.strip()
    groups = groups[(groups != "") & (groups != CALLPATH_GROUP)]
    group_names = (paths[by_leaf].loc[groups.index].assign(group=groups.to_numpy())
                   .drop_duplicates().groupby(by_leaf)["group"].agg("|".join))
    added = paths.groupby(by_leaf)[["calls", "subroutines"]].sum()
    added["group_names"] = group_names.reindex(added.index).fillna("")
    values = trial.timer_values.merge(paths[keys + ["leaf", "outermost"]], on=keys)
    values["inclusive"] = values["inclusive"].where(values["outermost"], 0.0)
    added_values = values.groupby(by_leaf + ["metric"])[["inclusive", "exclusive"]].sum()
    return dataclasses.replace(
        trial,
        timers=pd.concat([timers, _as_entries(added, trial.timers.columns)], ignore_index=True),
        timer_values=pd.concat([trial.timer_values,
                                _as_entries(added_values, trial.timer_values.columns)],
                               ignore_index=True))


def _as_entries(frame: pd.DataFrame, columns: pd.Index) -> pd.DataFrame:
    return frame.reset_index().rename(columns={"leaf": "name"})[list(columns)]


def timer_groups(entries: pd.DataFrame, timers: pd.Index) -> pd.DataFrame:
    """``(name, group_name)`` rows, at least one for every name in ``timers`` (flat names).

    A timer's groups are the ``A|B`` groups of its flat entries (TAU's loader;
    :func:`with_flat_entries` gives every callpath leaf one); a timer without
    any gets :data:`DEFAULT_GROUP`, as in TAU.
    """
    flat = entries.loc[~entries["name"].str.contains(CALLPATH_SEPARATOR, regex=False),
                       ["name", "group_names"]].drop_duplicates()
    groups = flat.assign(group_name=flat["group_names"].fillna("").str.split("|")).explode(
        "group_name")
    groups["group_name"] = groups["group_name"].str.strip()
    stated = groups.loc[groups["group_name"] != "", ["name", "group_name"]].drop_duplicates()
    default = pd.DataFrame({"name": timers.difference(stated["name"]),
                            "group_name": DEFAULT_GROUP})
    return pd.concat([stated, default], ignore_index=True)


def _check_names(what: str, names: pd.Series) -> None:
    for name in names.tolist():
        if not isinstance(name, str) or not name or name.strip() != name:
            raise ValueError(f"TrialData.{what}: name {name!r} is empty or has "
                             "leading or trailing blanks")
