"""Golden TAUdb rows: export a loaded trial in the shape of the golden CSVs, and compare.

The golden folders (``peer-data/tau/taudb-golden/trial*/``) hold the rows that
TAU's own loader wrote, exported with SQL. :func:`export_trial` runs the same
exports against a Joulehouse-loaded trial (SQLite or PostgreSQL);
:func:`compare` checks them row for row: ids and secondary-metadata UUIDs are
not compared (they are not in the CSVs), floats to 1e-9 relative, and the
primary metadata that Joulehouse adds (:data:`SOURCE_KEY`,
:data:`FINGERPRINT`) is left out by name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import FINGERPRINT, SOURCE_KEY
from joulehouse.taudb.model import THREAD_COLUMNS, TrialData

#: Golden folder -> the profile set it was loaded from (under peer-data/tau/profiles/).
GOLDEN_SETS = {
    "trial1_hatchet_cpi_callpath": "hatchet_tau_cpi_mpi_callpath",
    "trial2_tau2_xmain_mpi8_userevents": "tau2_xmain_mpi8_userevents",
    "trial4_tau2_taudbc_openmp_2threads": "tau2_taudbc_openmp_2threads",
    "trial6_LoadImbalance_2.ppk": "tau2_ppk_examples/LoadImbalance_2.ppk",
    "trial7_DrawGraph_2.ppk": "tau2_ppk_examples/DrawGraph_2.ppk",
    "trial9_wrf-callpath.ppk": "tau2_ppk_examples/wrf-callpath.ppk",
    "trial10_wrf16_text": "tau2_wrf16_callpath_text_exported",
    "trial11_tau2_reader2_mpi4": "tau2_reader2_mpi4",
    "trial12_tau2_wrap_mpi2": "tau2_wrap_mpi2",
}

#: The metadata TAU's loader took from its command line for trial1 (``-a hatchet -x cpi``).
COMMAND_LINE_METADATA = {"trial1_hatchet_cpi_callpath": {"Application": "hatchet",
                                                         "Experiment": "cpi"}}

_RANKS = "h.node_rank, h.context_rank, h.thread_rank, h.thread_index"
_CALLPATH_NAMES = """
WITH RECURSIVE cp (id, name) AS (
  SELECT tc.id, CAST(t.name AS TEXT) FROM timer_callpath tc JOIN timer t ON tc.timer = t.id
  WHERE t.trial = ? AND tc.parent IS NULL
  UNION ALL
  SELECT d.id, cp.name || ' => ' || t.name FROM timer_callpath d
  JOIN cp ON d.parent = cp.id JOIN timer t ON d.timer = t.id)
"""

#: file -> (export query with one ``?`` per trial id, integer columns, float columns)
EXPORTS = {
    "trial.csv": (
        ("SELECT id, name, data_source, node_count, contexts_per_node, threads_per_context, "
        "total_threads FROM trial WHERE id = ?"),
        ["data_source", "node_count", "contexts_per_node", "threads_per_context",
         "total_threads"], []),
    "threads.csv": (
        ("SELECT node_rank, context_rank, thread_rank, thread_index FROM thread h "
        "WHERE trial = ?"), ["node_rank", "context_rank", "thread_rank", "thread_index"], []),
    "timer_values.csv": (
        _CALLPATH_NAMES + f"SELECT cp.name, {_RANKS}, m.name, d.calls, d.subroutines, "
        "v.inclusive_value, v.exclusive_value, v.inclusive_percent, v.exclusive_percent, "
        "v.sum_exclusive_squared FROM timer_value v "
        "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN cp ON d.timer_callpath = cp.id "
        "JOIN thread h ON d.thread = h.id JOIN metric m ON v.metric = m.id WHERE h.trial = ?",
        ["node_rank", "context_rank", "thread_rank", "thread_index", "calls", "subroutines"],
        ["inclusive_value", "exclusive_value", "inclusive_percent", "exclusive_percent",
         "sum_exclusive_squared"]),
    "counter_values.csv": (
        (f"SELECT c.name, {_RANKS}, v.sample_count, v.maximum_value, v.minimum_value, "
        "v.mean_value, v.standard_deviation FROM counter_value v "
        "JOIN counter c ON v.counter = c.id JOIN thread h ON v.thread = h.id WHERE c.trial = ?"),
        ["node_rank", "context_rank", "thread_rank", "thread_index", "sample_count"],
        ["maximum_value", "minimum_value", "mean_value", "standard_deviation_column_holds_sumsqr"]),
    "primary_metadata.csv": (
        "SELECT name, value FROM primary_metadata WHERE trial = ?", [], []),
    "secondary_metadata.csv": (
        ("SELECT s.name, s.value, h.node_rank, h.context_rank, h.thread_rank, s.parent, "
        "s.timer_callpath, s.time_range, CASE WHEN s.is_array THEN 't' ELSE 'f' END "
        "FROM secondary_metadata s LEFT JOIN thread h ON s.thread = h.id WHERE s.trial = ?"),
        ["node_rank", "context_rank", "thread_rank"], []),
}

#: The header of each golden CSV.
COLUMNS = {
    "trial.csv": ["id", "name", "data_source", "node_count", "contexts_per_node",
                  "threads_per_context", "total_threads"],
    "threads.csv": ["node_rank", "context_rank", "thread_rank", "thread_index"],
    "timer_values.csv": ["timer_callpath_name", "node_rank", "context_rank", "thread_rank",
                         "thread_index", "metric", "calls", "subroutines", "inclusive_value",
                         "exclusive_value", "inclusive_percent", "exclusive_percent",
                         "sum_exclusive_squared"],
    "counter_values.csv": ["name", "node_rank", "context_rank", "thread_rank", "thread_index",
                           "sample_count", "maximum_value", "minimum_value", "mean_value",
                           "standard_deviation_column_holds_sumsqr"],
    "primary_metadata.csv": ["name", "value"],
    "secondary_metadata.csv": ["name", "value", "node_rank", "context_rank", "thread_rank",
                               "parent", "timer_callpath", "time_range", "is_array"],
}

#: Columns not compared: the ids that depend on load order.
NOT_COMPARED = {"trial.csv": ["id"]}
#: Primary metadata added by Joulehouse, not by TAU.
ADDED_METADATA = [SOURCE_KEY, FINGERPRINT]


def read_golden(folder: Path) -> dict[str, pd.DataFrame]:
    """The golden CSVs of one folder, typed like :func:`export_trial`'s frames."""
    frames = {}
    for file, (_, ints, floats) in EXPORTS.items():
        frame = pd.read_csv(folder / file, dtype=str, keep_default_na=False)
        frames[file] = _typed(frame, ints, floats)
    return frames


def export_trial(db: TaudbDatabase, trial_id: int) -> dict[str, pd.DataFrame]:
    """A loaded trial's rows, one frame per golden CSV, same columns."""
    frames = {}
    for file, (query, ints, floats) in EXPORTS.items():
        rows = db.query(query, (trial_id,) * query.count("?"))
        frame = pd.DataFrame(rows, columns=COLUMNS[file], dtype=object)
        frame = frame.map(lambda v: "" if v is None else str(v))
        frames[file] = _typed(frame, ints, floats)
    return frames


def _typed(frame: pd.DataFrame, ints: list[str], floats: list[str]) -> pd.DataFrame:
    frame = frame.copy()
    for column in ints:
        frame[column] = frame[column].astype("int64")
    for column in floats:
        frame[column] = frame[column].where(frame[column] != "", "nan").astype("float64")
    return frame


def compare(expected: dict[str, pd.DataFrame], actual: dict[str, pd.DataFrame]) -> list[str]:
    """Differences between golden and loaded rows, as readable lines (empty: equal)."""
    problems = []
    for file, (_, _, floats) in EXPORTS.items():
        want, got = expected[file], actual[file]
        if file == "primary_metadata.csv":
            got = got[~got["name"].isin(ADDED_METADATA)]
        dropped = NOT_COMPARED.get(file, [])
        want, got = want.drop(columns=dropped), got.drop(columns=dropped)
        keys = [c for c in want.columns if c not in floats]
        want = want.sort_values(keys, ignore_index=True)
        got = got.sort_values(keys, ignore_index=True)
        if len(want) != len(got) or not want[keys].equals(got[keys]):
            merged = want[keys].merge(got[keys], how="outer", indicator=True)
            only = merged[merged["_merge"] != "both"].head(5).to_dict("records")
            problems.append(f"{file}: {len(want)} golden rows, {len(got)} loaded; "
                            f"first differing rows: {only}")
            continue
        for column in floats:
            a, b = want[column].to_numpy(), got[column].to_numpy()
            close = np.isclose(a, b, rtol=1e-9, atol=0.0, equal_nan=True)
            if not close.all():
                bad = np.flatnonzero(~close)[:3]
                problems.append(f"{file}: {column}: {(~close).sum()} values differ, e.g. "
                                + "; ".join(f"{want.loc[i, keys].to_dict()}: golden {a[i]!r}, "
                                            f"loaded {b[i]!r}" for i in bad))
    return problems


def trial_from_golden(folder: Path) -> TrialData:
    """The real-thread rows of a golden folder as a TrialData (no profile reader involved).

    What the golden rows cannot say is left out: timer groups, and entries
    with calls = 0 (TAU wrote no rows for them).
    """
    golden = read_golden(folder)
    values = golden["timer_values.csv"]
    real = values[values["node_rank"] >= 0].rename(columns={
        "timer_callpath_name": "name", "inclusive_value": "inclusive",
        "exclusive_value": "exclusive"})
    threads = golden["threads.csv"]
    threads = threads.loc[threads["node_rank"] >= 0, THREAD_COLUMNS].reset_index(drop=True)
    timers = real.drop_duplicates(THREAD_COLUMNS + ["name"])[
        THREAD_COLUMNS + ["name", "calls", "subroutines"]].assign(group_names="")
    counters = golden["counter_values.csv"].rename(columns={
        "maximum_value": "maximum", "minimum_value": "minimum", "mean_value": "mean",
        "standard_deviation_column_holds_sumsqr": "sum_squares"})
    secondary = golden["secondary_metadata.csv"]
    primary = golden["primary_metadata.csv"]
    everywhere = threads.merge(primary, how="cross")
    trial_row = golden["trial.csv"].iloc[0]
    return TrialData(
        name=trial_row["name"], data_source=int(trial_row["data_source"]),
        metrics=list(dict.fromkeys(values["metric"])), threads=threads,
        timers=timers.reset_index(drop=True),
        timer_values=real[THREAD_COLUMNS + ["name", "metric", "inclusive", "exclusive"]],
        counters=counters[THREAD_COLUMNS + ["name", "sample_count", "maximum", "minimum",
                                            "mean", "sum_squares"]],
        metadata=pd.concat([everywhere, secondary[THREAD_COLUMNS + ["name", "value"]]],
                           ignore_index=True),
        source_key=f"golden:{folder.name}", fingerprint="golden")
