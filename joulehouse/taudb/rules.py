"""What TAU's own tools need of a trial beyond TAUdb's DDL, in one place.

ParaProf and PerfExplorer open a trial through PerfDMF's ``DBDataSource.load()``;
every :class:`~joulehouse.taudb.model.TrialData` passes through
:func:`check_trial` and :func:`timer_groups` on its way into TAUdb (the
loader calls both), so a source mapping cannot break these rules unnoticed.
``docs/taudb.md`` ("What TAU's tools need") explains each one.

- Names: timer, callpath frame, metric and user event names are non-empty and
  without leading or trailing blanks (TAU's loader trims them; the reader
  would show a different name); metric names are unique.
- Every (thread, timer entry) has a value for every metric of the trial, and
  no value is NaN: TAUdb has no missing value, TAU's reader would read a 0
  and average it into its MEAN.
- calls and subroutines are finite and >= 0; an entry with 0 calls is not
  written at all (TAU's rule), so TAU's reader does not show it.
- Every timer has at least one group (:func:`timer_groups`): the reader builds
  its functions from the ``interval_event`` view, which inner-joins
  ``timer_group``, so the values of a timer without a group arrive for a
  function it never created (NullPointerException in
  ``fastGetIntervalEventData``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from joulehouse.taudb.model import CALLPATH_SEPARATOR, TrialData

#: The group TAU itself gives a timer that states none (``TAU_DEFAULT``).
DEFAULT_GROUP = "TAU_DEFAULT"


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
    values = trial.timer_values[["inclusive", "exclusive"]].to_numpy(dtype="float64")
    if np.isnan(values).any():
        row = trial.timer_values.iloc[int(np.argmax(np.isnan(values).any(axis=1)))]
        raise ValueError(f"TrialData.timer_values: NaN for {row['name']!r}, metric "
                         f"{row['metric']!r} (TAUdb has no missing values)")
    unknown = ~trial.timer_values["metric"].isin(metrics)
    if unknown.any():
        raise ValueError(f"TrialData.timer_values: metric {trial.timer_values['metric'][unknown].iloc[0]!r} "
                         f"is not in TrialData.metrics {trial.metrics}")
    expected = len(trial.timers) * len(trial.metrics)
    if len(trial.timer_values) != expected:
        keys = ["node_rank", "context_rank", "thread_rank", "name"]
        have = trial.timer_values.groupby(keys).size()
        entries = pd.MultiIndex.from_frame(trial.timers[keys])
        count = have.reindex(entries, fill_value=0)
        short = count[count != len(trial.metrics)]
        if len(short):
            entry, found = short.index[0], int(short.iloc[0])
            raise ValueError(f"TrialData.timer_values: {found} values for {entry[-1]!r} on "
                             f"thread {tuple(int(r) for r in entry[:3])}, one per metric "
                             f"({len(trial.metrics)}) needed")


def timer_groups(entries: pd.DataFrame, timers: pd.Index) -> pd.DataFrame:
    """``(name, group_name)`` rows, at least one for every name in ``timers`` (flat names).

    A timer's groups are the ``A|B`` groups of its flat entries (TAU's loader);
    a timer that has none there takes those of the callpath entries ending in
    it; one without any group at all gets :data:`DEFAULT_GROUP`, as in TAU.
    """
    named = entries[["name", "group_names"]].drop_duplicates()
    named = named.assign(timer=named["name"].str.rsplit(CALLPATH_SEPARATOR, n=1).str[-1].str.strip(),
                         flat=~named["name"].str.contains(CALLPATH_SEPARATOR, regex=False))
    groups = named.assign(group_name=named["group_names"].fillna("").str.split("|")).explode(
        "group_name")
    groups["group_name"] = groups["group_name"].str.strip()
    groups = groups[groups["group_name"] != ""]
    flat = groups[groups["flat"]]
    from_paths = groups[~groups["flat"] & ~groups["timer"].isin(flat["timer"])]
    stated = pd.concat([flat, from_paths])[["timer", "group_name"]].drop_duplicates()
    missing = timers.difference(stated["timer"])
    default = pd.DataFrame({"timer": missing, "group_name": DEFAULT_GROUP})
    return pd.concat([stated, default], ignore_index=True).rename(columns={"timer": "name"})


def _check_names(what: str, names: pd.Series) -> None:
    text = names.astype("object")
    bad = text.isna() | (text.fillna("").str.strip() != text.fillna("")) | (text.fillna("") == "")
    if bad.any():
        raise ValueError(f"TrialData.{what}: name {text[bad].iloc[0]!r} is empty or has "
                         "leading or trailing blanks")
