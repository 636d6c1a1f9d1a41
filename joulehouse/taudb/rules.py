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
    """Raise ValueError naming the first broken rule (see the module docstring).

    Plain Python over distinct names and numpy over the values, so that a small trial
    costs little (no frame operation per rule)."""
    if len(set(trial.metrics)) < len(trial.metrics):
        raise ValueError(f"TrialData.metrics names a metric twice: {trial.metrics}")
    _check_names("metrics", trial.metrics)
    timer_names = trial.timers["name"].tolist()
    _check_names("timers (a callpath frame)", [
        frame for name in dict.fromkeys(timer_names)
        for frame in (name.split(CALLPATH_SEPARATOR) if isinstance(name, str) else [name])])
    _check_names("counters", dict.fromkeys(trial.counters["name"].tolist()))
    for column in ("calls", "subroutines"):
        value = trial.timers[column].to_numpy(dtype="float64")
        bad = ~np.isfinite(value) | (value < 0)
        if bad.any():
            where = int(np.argmax(bad))
            raise ValueError(f"TrialData.timers: {column} {value[where]} of "
                             f"{timer_names[where]!r} is not a finite number >= 0")
    events = np.column_stack([trial.counters[column].to_numpy(dtype="float64")
                              for column in _EVENT_VALUES])
    if np.isnan(events).any():
        row, column = np.argwhere(np.isnan(events))[0]
        raise ValueError(f"TrialData.counters: NaN {_EVENT_VALUES[column]} of "
                         f"{trial.counters['name'].iloc[row]!r} (TAUdb has no missing values)")
    values = trial.timer_values
    names, metrics = values["name"].tolist(), values["metric"].tolist()
    nan = (np.isnan(values["inclusive"].to_numpy(dtype="float64"))
           | np.isnan(values["exclusive"].to_numpy(dtype="float64")))
    if nan.any():
        row = int(np.argmax(nan))
        raise ValueError(f"TrialData.timer_values: NaN for {names[row]!r}, metric "
                         f"{metrics[row]!r} (TAUdb has no missing values)")
    number = {metric: i for i, metric in enumerate(trial.metrics)}
    unknown = [metric for metric in metrics if metric not in number]
    if unknown:
        raise ValueError(f"TrialData.timer_values: metric {unknown[0]!r} "
                         f"is not in TrialData.metrics {trial.metrics}")
    # a value's (thread, name) and an entry's as one key number each, over both frames
    rank_rows = np.concatenate([thread_ranks(values), thread_ranks(trial.timers)])
    name_codes = pd.factorize(np.array(names + timer_names, dtype=object))[0]
    keys = row_keys(np.column_stack([rank_rows, name_codes]))
    value_keys, entry_keys = keys[:len(names)], keys[len(names):]
    n_metrics = max(len(trial.metrics), 1)
    distinct, first = np.unique(value_keys * n_metrics
                                + np.array([number[m] for m in metrics], dtype="int64"),
                                return_index=True)
    if len(distinct) < len(names):
        twice = np.ones(len(names), dtype=bool)
        twice[first] = False
        row = int(np.argmax(twice))
        raise ValueError(f"TrialData.timer_values: two values for {names[row]!r}, metric "
                         f"{metrics[row]!r} on thread {_rank(values, row)}")
    # each (entry, metric) at most once and every metric known: a count of one per metric
    count = np.bincount(value_keys, minlength=len(rank_rows))[entry_keys]
    short = count != len(trial.metrics)
    if short.any():
        row = int(np.argmax(short))
        raise ValueError(f"TrialData.timer_values: {int(count[row])} values for "
                         f"{timer_names[row]!r} on thread {_rank(trial.timers, row)}, one per "
                         f"metric ({len(trial.metrics)}) needed")


def thread_ranks(frame: pd.DataFrame) -> np.ndarray:
    """The thread ranks (:data:`THREAD_COLUMNS`) of ``frame``'s rows: (rows, 3) int64.

    Raises ValueError on a rank that is not a whole number >= 0 (a NaN, a fraction, a
    negative rank: TAUdb's negative thread indexes are the derived threads')."""
    if not len(frame):
        return np.zeros((0, 3), dtype="int64")
    return np.column_stack([_rank_column(frame, column) for column in THREAD_COLUMNS])


def _rank_column(frame: pd.DataFrame, column: str) -> np.ndarray:
    values = frame[column].to_numpy()
    if values.dtype.kind not in "iu":
        values = values.astype("float64")
        whole = np.isfinite(values) & (values == np.floor(values))
        if not whole.all():
            bad = float(values[np.argmin(whole)])
            raise ValueError(f"thread {column} {bad} is not a whole number")
    values = values.astype("int64")
    if (values < 0).any():
        raise ValueError(f"thread {column} {int(values.min())} is negative")
    return values


def row_keys(rows: np.ndarray) -> np.ndarray:
    """One key per row of ``rows`` (rows, columns) of integers: equal rows, equal keys,
    numbered 0.. in the rows' lexicographic order (dense). Each row as one integer (mixed
    radix over the columns' ranges) where that fits int64, else rows compared whole."""
    if not len(rows):
        return np.zeros(0, dtype="int64")
    low = rows.min(axis=0)
    span = rows.max(axis=0) - low + 1
    if float(np.prod(span.astype("float64"))) >= 2.0**62:
        return np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
    weights = np.cumprod(np.concatenate([span[1:], [1]])[::-1])[::-1]
    return np.unique((rows - low) @ weights, return_inverse=True)[1].reshape(-1)


def _rank(frame: pd.DataFrame, row: int) -> tuple[int, ...]:
    return tuple(int(frame[column].iloc[row]) for column in THREAD_COLUMNS)


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
    if not any(isinstance(name, str) and CALLPATH_SEPARATOR in name
               for name in timers["name"].tolist()):
        return trial
    frames = timers["name"].str.split(CALLPATH_SEPARATOR, regex=False)
    is_path = frames.str.len() > 1
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
    """``(name, group_name)`` rows, at least one for every name in ``timers`` (flat names):
    :func:`group_pairs` of the entries."""
    pairs = group_pairs(entries["name"].tolist(), entries["group_names"].tolist(), timers)
    return pd.DataFrame(pairs if pairs else None, columns=["name", "group_name"], dtype=object)


def group_pairs(names: list[str], group_names: list, timers) -> list[tuple[str, str]]:
    """``(name, group)`` pairs, at least one for every name in ``timers`` (flat names), from
    the entries' ``names`` and their ``group_names`` (TAU's ``A|B``, None or empty).

    A timer's groups are the ``A|B`` groups of its flat entries (TAU's loader;
    :func:`with_flat_entries` gives every callpath leaf one), each once, in the order
    they first appear; a timer without any gets :data:`DEFAULT_GROUP`, as in TAU (these
    last, by name).
    """
    stated: dict[tuple[str, str], None] = {}  # an ordered set
    for name, groups in dict.fromkeys(zip(names, group_names)):
        if CALLPATH_SEPARATOR in name:
            continue
        for group in (groups if isinstance(groups, str) else "").split("|"):
            if group.strip():
                stated[name, group.strip()] = None
    named = {name for name, _ in stated}
    return [*stated, *((name, DEFAULT_GROUP) for name in sorted(set(timers) - named))]


def _check_names(what: str, names) -> None:
    for name in names:
        if not isinstance(name, str) or not name or name.strip() != name:
            raise ValueError(f"TrialData.{what}: name {name!r} is empty or has "
                             "leading or trailing blanks")
