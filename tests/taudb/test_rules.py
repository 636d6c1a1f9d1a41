"""The rules TAU's tools need beyond the DDL (joulehouse.taudb.rules), on the small trial."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from small_trial import BAR, FOO, MAIN, PATH, small_trial

from joulehouse.errors import InputError
from joulehouse.taudb.loader import derive_rows
from joulehouse.taudb.rules import (
    DEFAULT_GROUP,
    check_trial,
    row_keys,
    timer_groups,
    with_flat_entries,
)


def _groups(entries: list[tuple[str, str]], timers: list[str]) -> set[tuple[str, str]]:
    frame = pd.DataFrame(entries, columns=["name", "group_names"])
    return set(timer_groups(frame, pd.Index(timers)).itertuples(index=False, name=None))


def test_a_flat_entry_states_its_timers_groups():
    # as TAU's loader: the groups of a callpath entry are not the timer's
    assert _groups([("a", "MPI | TAU_USER"), ("a => b", "X"), ("b", "Y")], ["a", "b"]) == {
        ("a", "MPI"), ("a", "TAU_USER"), ("b", "Y")}


def test_a_callpath_leaf_without_a_flat_entry_gets_one_on_each_thread_that_entered_it():
    # the GPU mapping's shape: "train" and "epoch 0" only as callpath leaves; a recursive path
    ranks = {"node_rank": 0, "context_rank": 0, "thread_rank": 0}
    entries = [("experiment", "TAU_PHASE", 1, 1), ("experiment => train", "TAU_PHASE", 1, 2),
               ("experiment => train => epoch 0", "TAU_PHASE|TAU_CALLPATH|EPOCH", 1, 0),
               ("experiment => train => train", "TAU_PHASE", 2, 0)]
    values = [("experiment", 100.0, 10.0), ("experiment => train", 90.0, 30.0),
              ("experiment => train => epoch 0", 40.0, 40.0),
              ("experiment => train => train", 20.0, 20.0)]
    trial = small_trial(
        metrics=["TIME"],
        timers=pd.DataFrame(entries, columns=["name", "group_names", "calls", "subroutines"]
                            ).assign(**ranks),
        timer_values=pd.DataFrame(values, columns=["name", "inclusive", "exclusive"]).assign(
            metric="TIME", **ranks))

    completed = with_flat_entries(trial)

    added = completed.timers.iloc[len(trial.timers):].set_index("name")
    assert added[["group_names", "calls", "subroutines"]].to_dict("index") == {
        "epoch 0": {"group_names": "TAU_PHASE|EPOCH", "calls": 1, "subroutines": 0},
        # train: the outer call and the recursive one, inclusive from the outer only
        "train": {"group_names": "TAU_PHASE", "calls": 3, "subroutines": 2}}
    values = completed.timer_values.iloc[len(trial.timer_values):].set_index("name")
    assert values[["inclusive", "exclusive"]].to_dict("index") == {
        "epoch 0": {"inclusive": 40.0, "exclusive": 40.0},
        "train": {"inclusive": 90.0, "exclusive": 50.0}}
    check_trial(completed)  # still one value per metric
    assert with_flat_entries(completed) is completed  # nothing left to add


def test_flat_entries_a_trial_states_are_kept():
    trial = small_trial()  # bar has its flat entry on thread 0, the only one entering it
    assert with_flat_entries(trial) is trial


def test_a_timer_without_any_group_gets_taus_default():
    assert _groups([("a", ""), ("a => b", None)], ["a", "b"]) == {
        ("a", DEFAULT_GROUP), ("b", DEFAULT_GROUP)}


def test_every_timer_row_of_a_load_has_a_group():
    rows = derive_rows(small_trial())
    assert set(rows["timer_group"]["timer"]) == set(rows["timer"]["id"])
    named = dict(zip(rows["timer"]["id"], rows["timer"]["name"]))
    assert {(named[t], g) for t, g in rows["timer_group"].itertuples(index=False)} == {
        (BAR, DEFAULT_GROUP), (FOO, "MPI"), (FOO, "TAU_USER"), (MAIN, "TAU_DEFAULT")}


def _without_value(trial):
    trial.timer_values = trial.timer_values[
        ~((trial.timer_values["name"] == PATH) & (trial.timer_values["metric"] == "TIME"))]
    return trial


def _value_twice(trial):
    # as many values as needed, but TIME of PATH twice and its PAPI_TOT_CYC missing
    values = trial.timer_values
    papi = (values["name"] == PATH) & (values["metric"] == "PAPI_TOT_CYC")
    values.loc[papi, "metric"] = "TIME"
    return trial


def _nan_value(trial):
    trial.timer_values.loc[3, "inclusive"] = np.nan
    return trial


def _set(**changes):
    def change(trial):
        for name, value in changes.items():
            setattr(trial, name, value)
        return trial
    return change


def _column(frame_name, column, row, value):
    def change(trial):
        frame = getattr(trial, frame_name)
        if isinstance(value, float):
            frame[column] = frame[column].astype("float64")
        frame.loc[row, column] = value
        return trial
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_without_value, r"1 values for 'main .* thread \(0, 0, 0\), one per metric \(2\) needed"),
    (_value_twice, r"two values for 'main .*=> bar', metric 'TIME' on thread \(0, 0, 0\)"),
    (_nan_value, r"NaN for 'main .*=> bar', metric 'TIME'"),
    (_set(metrics=["TIME", "PAPI_TOT_CYC", "TIME"]), "names a metric twice"),
    (_set(metrics=["TIME", " PAPI_TOT_CYC"]), r"metrics: name ' PAPI_TOT_CYC'"),
    (_column("timers", "name", 2, "bar "), r"callpath frame\): name 'bar '"),
    (_column("timers", "name", 3, f"{MAIN} =>  => {BAR}"), r"callpath frame\): name ''"),
    (_column("counters", "name", 0, ""), r"counters: name ''"),
    (_column("timers", "calls", 1, -1.0), r"calls -1.0 of 'foo"),
    (_column("timers", "subroutines", 1, np.inf), r"subroutines inf of 'foo"),
    (_column("counters", "mean", 1, np.nan), r"counters: NaN mean of 'Message size'"),
    (_column("counters", "sum_squares", 2, np.nan), r"counters: NaN sum_squares of 'Heap : main'"),
])
def test_a_trial_tau_could_not_read_as_written_is_refused(change, message):
    trial = change(small_trial())
    with pytest.raises(ValueError, match=message):
        check_trial(trial)
    with pytest.raises(InputError, match="small"):  # the loader names the source key
        derive_rows(trial)


def test_the_small_trial_follows_every_rule():
    check_trial(small_trial())


@pytest.mark.parametrize("scale", [1, 2**40])
def test_row_keys_number_equal_rows_alike_whether_they_fit_one_integer_or_not(scale):
    """Narrow ranges: each row as one int64; ranges too wide for that (2**40 x ...):
    rows compared whole. The same keys, dense, in the rows' lexicographic order."""
    rows = np.array([[0, 5, 1], [3, 0, 0], [0, 5, 1], [3, 0, 2], [-1, 7, 0]]) * scale
    assert row_keys(rows).tolist() == [1, 2, 1, 3, 0]
    assert row_keys(np.zeros((0, 3), dtype="int64")).tolist() == []
