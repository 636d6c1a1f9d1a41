"""A trial stored in TAUdb, read back as the :class:`TrialData` it was loaded from.

Real threads only (the derived threads are the loader's); timer entries with
their full callpath names; the values of every metric; user events (the
SumSqr from ``counter_value.standard_deviation``, where TAU keeps it); the
secondary metadata per thread and the primary metadata as trial attributes.
With :func:`joulehouse.taudb.ppk.write_ppk` this is how a trial of the
embedded SQLite TAUdb opens in ParaProf, which cannot open SQLite itself
(``docs/taudb.md``). Loading the result again gives the same rows.
"""

from __future__ import annotations

import pandas as pd

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import FINGERPRINT, SOURCE_KEY, trial_attributes
from joulehouse.taudb.model import CALLPATH_SEPARATOR, THREAD_COLUMNS, TrialData
from joulehouse.taudb.schema import require_schema


def callpath_names(db: TaudbDatabase, trial_id: int) -> dict[int, str]:
    """Every timer_callpath id of a trial -> its full name (frames joined by ``" => "``)."""
    rows = db.query("SELECT c.id, c.parent, t.name FROM timer_callpath c "
                    "JOIN timer t ON c.timer = t.id WHERE t.trial = ?", (trial_id,))
    parent = {row[0]: row[1] for row in rows}
    leaf = {row[0]: row[2] for row in rows}
    names: dict[int, str] = {}

    def name(node: int) -> str:
        if node not in names:
            up = parent[node]
            names[node] = leaf[node] if up is None else name(up) + CALLPATH_SEPARATOR + leaf[node]
        return names[node]

    for node in parent:
        name(node)
    return names


def read_stored_trial(db: TaudbDatabase, trial_id: int) -> TrialData:
    """The trial ``trial_id`` of ``db``; KeyError if there is none, TaudbUnavailable if
    ``db`` has no TAUdb schema (nothing is created: open it ``read_only=True``)."""
    require_schema(db)
    found = db.query("SELECT name, data_source FROM trial WHERE id = ?", (trial_id,))
    if not found:
        raise KeyError(f"no trial {trial_id} in TAUdb")
    name, data_source = found[0]
    metrics = [m for (m,) in db.query("SELECT name FROM metric WHERE trial = ? ORDER BY id",
                                      (trial_id,))]
    real = "h.trial = ? AND h.node_rank >= 0"
    threads = pd.DataFrame(db.query(
        f"SELECT node_rank, context_rank, thread_rank FROM thread h WHERE {real} "
        "ORDER BY thread_index", (trial_id,)), columns=THREAD_COLUMNS)
    paths = callpath_names(db, trial_id)
    groups = pd.DataFrame(db.query(
        "SELECT t.name, g.group_name FROM timer_group g JOIN timer t ON g.timer = t.id "
        "WHERE t.trial = ?", (trial_id,)), columns=["name", "group"])
    group_names = groups.groupby("name")["group"].agg(lambda g: "|".join(sorted(g)))
    entries = pd.DataFrame(db.query(
        "SELECT h.node_rank, h.context_rank, h.thread_rank, d.timer_callpath, d.calls, "
        f"d.subroutines, d.id FROM timer_call_data d JOIN thread h ON d.thread = h.id WHERE {real}",
        (trial_id,)), columns=THREAD_COLUMNS + ["callpath", "calls", "subroutines", "call_data"])
    entries["name"] = entries["callpath"].map(paths)
    flat = ~entries["name"].str.contains(CALLPATH_SEPARATOR, regex=False)
    entries["group_names"] = entries["name"].map(group_names).where(flat, "").fillna("")
    values = pd.DataFrame(db.query(
        "SELECT v.timer_call_data, m.name, v.inclusive_value, v.exclusive_value "
        "FROM timer_value v JOIN timer_call_data d ON v.timer_call_data = d.id "
        f"JOIN thread h ON d.thread = h.id JOIN metric m ON v.metric = m.id WHERE {real}",
        (trial_id,)), columns=["call_data", "metric", "inclusive", "exclusive"])
    values = values.merge(entries[THREAD_COLUMNS + ["name", "call_data"]], on="call_data")
    counters = pd.DataFrame(db.query(
        "SELECT h.node_rank, h.context_rank, h.thread_rank, c.name, v.sample_count, "
        "v.maximum_value, v.minimum_value, v.mean_value, v.standard_deviation "
        f"FROM counter_value v JOIN counter c ON v.counter = c.id JOIN thread h "
        f"ON v.thread = h.id WHERE {real}", (trial_id,)),
        columns=THREAD_COLUMNS + ["name", "sample_count", "maximum", "minimum", "mean",
                                  "sum_squares"])
    metadata = pd.DataFrame(db.query(
        "SELECT h.node_rank, h.context_rank, h.thread_rank, s.name, s.value "
        f"FROM secondary_metadata s JOIN thread h ON s.thread = h.id WHERE {real}",
        (trial_id,)), columns=THREAD_COLUMNS + ["name", "value"])
    primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                            (trial_id,)))
    trial = TrialData(
        name=name, data_source=int(data_source), metrics=metrics, threads=threads,
        timers=entries[THREAD_COLUMNS + ["name", "group_names", "calls", "subroutines"]],
        timer_values=values[THREAD_COLUMNS + ["name", "metric", "inclusive", "exclusive"]],
        counters=counters, metadata=metadata,
        source_key=primary.get(SOURCE_KEY, ""), fingerprint=primary.get(FINGERPRINT, ""))
    # the loader's own attributes (file type, source key, fingerprint) it adds again
    added = trial_attributes(trial)
    trial.trial_metadata = {k: v for k, v in primary.items() if k not in added}
    return trial
