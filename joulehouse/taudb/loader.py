"""Load a :class:`TrialData` into TAUdb with exactly the rows TAU's loader writes.

:func:`derive_rows` computes every row from the frames (numpy arrays and
plain Python, no database); :func:`load_trial` allocates the ids and writes
them in one transaction, through the database's bulk-write primitive (COPY
on PostgreSQL, ``executemany`` on SQLite). Many small trials load faster
together: :func:`prepare_trial` derives and checks each (its input errors
its own) into columns, :func:`load_prepared` stacks their columns and writes
them all in one transaction, one frame and one bulk write per table.

TAU's rules (checked against the rows its loader wrote, see
``tests/taudb/test_golden.py``):

- Threads: the real threads, ``thread_index = node * C * T + context * T +
  thread`` (C, T: largest context and thread rank + 1), then the derived
  threads -1..-7, which carry their code in every rank column.
- Statistics per timer entry, over the real threads that have the entry:
  -2 TOTAL (sum), -1 MEAN (sum / those threads), -6 MEAN (sum / all threads),
  -3 / -7 population standard deviation likewise (-3 is 0 for one thread),
  -4 MIN, -5 MAX. Sums run in thread order and the deviation is TAU's
  ``sqrt(|sum_sq / n - mean^2|)``, so the values match TAU's to the last bits.
- ``timer_call_data`` only where calls > 0 (before calls are truncated to
  INT), so most STDDEV rows are absent; one ``timer_value`` per call data
  row and metric; ``sum_exclusive_squared`` NULL. A derived thread's calls
  and subroutines above INT32_MAX are clamped to it (TAU's Java loader
  stores ``(int)`` of the double, which saturates); a real thread's are an
  error naming the timer and the thread.
- Percents, with M the largest inclusive value of a thread and S the sum of
  M over the real threads (per metric): real thread ``value / (M / 100)``;
  TOTAL ``value / (S / 100)``; both MEANs: inclusive ``TOTAL inclusive /
  (S / 100)``, exclusive ``MEAN(-1) exclusive / (S / 100 / n)``; MIN and MAX
  ``value / (S / 100 / n)``; both STDDEVs: inclusive ``value / MEAN(-1)
  inclusive * 100``, exclusive ``value / MEAN(-1) exclusive`` (no * 100, as
  TAU does). A zero divider gives 0, except for STDDEV (IEEE, as Java).
- ``timer`` holds flat names only, with TAU's source location parsed from
  ``name [{file} {line,col}-{line,col}]`` (0 when unknown); groups from flat
  entries. :mod:`joulehouse.taudb.rules` first checks what TAU's reader
  needs, derives a callpath leaf's missing flat entries and gives every timer
  a group. ``timer_callpath``: one row per entry and per missing
  intermediate path, parent = the path without its last frame.
- ``counter_value`` for real threads only; ``standard_deviation`` holds the
  raw SumSqr.
- Metadata: an attribute present on the first thread with that same value on
  every thread that has it is primary; the others are secondary, one row per
  thread (random UUID ids). ``trial_metadata``, TAU's ``File Type Index`` /
  ``File Type Name`` (from data_source) and :data:`SOURCE_KEY` /
  :data:`FINGERPRINT` are primary and replace thread attributes of that name.

One transaction: it first deletes the trials loaded from the same
``source_key`` (replace), so a failure anywhere leaves the database as it was.
As a PostgreSQL superuser the per-row foreign-key checks are skipped while
the rows are written (they only reference rows of the same transaction).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pandas as pd

from joulehouse.errors import InputError
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.model import CALLPATH_SEPARATOR, THREAD_COLUMNS, TrialData
from joulehouse.taudb.rules import (
    check_trial,
    group_pairs,
    row_keys,
    thread_ranks,
    with_flat_entries,
)
from joulehouse.taudb.schema import ensure_indexes, ensure_schema, schema_present

#: Primary-metadata names under which a trial records where it came from.
SOURCE_KEY = "joulehouse.source_key"
FINGERPRINT = "joulehouse.fingerprint"

#: TAU's ``File Type Name`` per data_source (its DataSource file types 0 and 1); others "Other".
FILE_TYPE_NAMES = {0: "ParaProf Packed Profile", 1: "TAU profiles"}

#: Derived thread codes in the order they are written.
DERIVED = np.array([-1, -2, -3, -4, -5, -6, -7])
INT32_MAX = 2**31 - 1

# "name [{file} {line,col}-{line,col}]", "[{file} {line,col}]", "[{file} {line}]", "[{file}]"
_SOURCE = re.compile(
    r"^(?P<short>.*?)\s*\[\{(?P<file>[^}]*)\}"
    r"(?:\s*\{(?P<line>\d+)(?:,(?P<col>\d+))?\}(?:-\{(?P<line_end>\d+),(?P<col_end>\d+)\})?)?"
)
# TAU parameter profiles: "name [ <x> = <4>, <y> = <10> ]"
_PARAMETER = re.compile(r"<([^<>]*)> = <([^<>]*)>")

#: Tables in write order (parents before children), with the columns written; the largest,
#: timer_value, comes last so that it is computed while the others are written.
COLUMNS = {
    "trial": ["id", "name", "data_source", "node_count", "contexts_per_node",
              "threads_per_context", "total_threads"],
    "metric": ["id", "trial", "name", "derived"],
    "thread": ["id", "trial", "node_rank", "context_rank", "thread_rank", "thread_index"],
    "timer": ["id", "trial", "name", "short_name", "source_file", "line_number",
              "line_number_end", "column_number", "column_number_end"],
    "timer_group": ["timer", "group_name"],
    "timer_parameter": ["timer", "parameter_name", "parameter_value"],
    "timer_callpath": ["id", "timer", "parent"],
    "counter": ["id", "trial", "name"],
    "counter_value": ["counter", "thread", "sample_count", "maximum_value", "minimum_value",
                      "mean_value", "standard_deviation"],
    "primary_metadata": ["trial", "name", "value"],
    "secondary_metadata": ["id", "trial", "thread", "name", "value", "is_array"],
    "timer_call_data": ["id", "timer_callpath", "thread", "calls", "subroutines"],
    "timer_value": ["timer_call_data", "metric", "inclusive_value", "exclusive_value",
                    "inclusive_percent", "exclusive_percent"],
}

#: Tables whose ``id`` comes from a sequence (secondary_metadata ids are UUIDs).
ALLOCATED = ["trial", "metric", "thread", "timer", "timer_callpath", "timer_call_data", "counter"]

#: Foreign-key columns: which table's local row numbers they hold.
REFERENCES = {
    "trial": "trial", "thread": "thread", "metric": "metric", "timer": "timer",
    "parent": "timer_callpath", "timer_callpath": "timer_callpath",
    "timer_call_data": "timer_call_data", "counter": "counter",
}


#: One table's rows as columns (name -> one numpy array each, all of one length), in
#: :data:`COLUMNS` order: how the rows are derived and written, with no frame per trial.
Columns: TypeAlias = dict[str, np.ndarray]

#: Every row of one trial, by table; ``id`` and foreign-key columns hold local row
#: numbers (0-based positions in the referenced table, -1 for NULL) until
#: :func:`load_trial` maps them to allocated ids.
TrialRows: TypeAlias = dict[str, pd.DataFrame]


def derive_rows(trial: TrialData) -> TrialRows:
    """All TAUdb rows of ``trial``, as TAU's loader would write them."""
    tables, timer_values = _derive(trial)
    return {name: pd.DataFrame(columns) for name, columns in
            {**tables, "timer_value": timer_values()}.items()}


def load_trial(db: TaudbDatabase, trial: TrialData) -> int:
    """Write ``trial`` in one transaction, replacing the trials of its source_key; its id.

    timer_value rows are computed while the other tables are being written
    (:meth:`TaudbDatabase.bulk_writer`); every input error is raised before.
    """
    return load_prepared(db, [prepare_trial(trial)])[0]


@dataclass(frozen=True)
class PreparedTrial:
    """A trial whose rows are derived and checked (:func:`prepare_trial`): what is left
    to do is writing them (:func:`load_prepared`), which raises no input error."""

    trial: TrialData
    tables: dict[str, Columns]
    timer_values: Callable[[], Columns]


def prepare_trial(trial: TrialData) -> PreparedTrial:
    """``trial``'s rows, derived and checked; InputError naming its source key when it
    breaks a rule."""
    return PreparedTrial(trial, *_derive(trial))


def load_prepared(db: TaudbDatabase, prepared: list[PreparedTrial]) -> list[int]:
    """Write the ``prepared`` trials in ONE transaction, each replacing the trials of its
    source key (given once each); their ids, in order. All or nothing: an error leaves the
    database as it was. Ids are allocated in order, so they are those that loading the
    trials one by one would give; each table's rows of all the trials are stacked into one
    frame and written at once, so many small trials cost one transaction, one frame and
    one bulk write per table."""
    keys = [one.trial.source_key for one in prepared]
    if len(set(keys)) < len(keys):
        raise ValueError("one source key twice in one load: its trials would both stay")
    if not prepared:
        return []
    ensure_schema(db)
    with db.transaction() as cursor:
        db.lock_sources(cursor, keys)
        for source in sorted({one.trial.data_source for one in prepared}):
            cursor.execute(db.sql("SELECT count(*) FROM data_source WHERE id = ?"), (source,))
            if cursor.fetchone()[0] == 0:
                raise ValueError(f"data_source {source} is not in TAUdb's data_source table")
        for key in keys:
            for old in _trials_with_source_key(db, cursor, key):
                _delete(db, cursor, old)
        # every reference below points at a row of this transaction (or data_source, checked)
        db.skip_reference_checks(cursor)
        counts = {table: np.array([_length(one.tables[table]) for one in prepared])
                  for table in ALLOCATED}
        allocated = db.allocate_ids(cursor, {table: int(count.sum())
                                             for table, count in counts.items()})
        # trial i's rows of a table start at first[table][i] of its allocated ids
        first = {table: np.concatenate([[0], np.cumsum(count)[:-1]])
                 for table, count in counts.items()}
        with db.bulk_writer(cursor) as write:
            for table in prepared[0].tables:
                write(table, _with_ids(table, [one.tables[table] for one in prepared],
                                       allocated, first))
            write("timer_value", _with_ids("timer_value",
                                           [one.timer_values() for one in prepared],
                                           allocated, first))
        return [int(allocated["trial"][start]) for start in first["trial"]]


def _length(columns: Columns) -> int:
    return len(next(iter(columns.values())))


def list_trials(db: TaudbDatabase) -> list[dict]:
    """One dict per trial (the trial row, plus source_key and fingerprint or None), by id;
    none where ``db`` has no TAUdb schema (nothing is created: it reads, so it can be
    given a database opened ``read_only=True``)."""
    with db.transaction() as cursor:
        if not schema_present(db, cursor):
            return []
    rows = db.query(
        "SELECT t.id, t.name, t.data_source, t.node_count, t.contexts_per_node, "
        "t.threads_per_context, t.total_threads, k.value, f.value FROM trial t "
        "LEFT JOIN primary_metadata k ON k.trial = t.id AND k.name = ? "
        "LEFT JOIN primary_metadata f ON f.trial = t.id AND f.name = ? ORDER BY t.id",
        (SOURCE_KEY, FINGERPRINT))
    keys = COLUMNS["trial"] + ["source_key", "fingerprint"]
    return [dict(zip(keys, row)) for row in rows]


#: Source keys looked up per statement by :func:`trials_by_source_key` (well under SQLite's
#: 32,766 and PostgreSQL's 65,535 parameters of one statement).
LOOKUP_BATCH = 5000


def source_key_lookup(count: int) -> str:
    """The statement reading (trial, source key, fingerprint) of ``count`` source keys;
    parameters: the fingerprint's name, the source key's name, then the keys. Answered
    through :data:`~joulehouse.taudb.schema.LOOKUP_INDEX` where it exists."""
    return ("SELECT k.trial, k.value, f.value FROM primary_metadata k "
            "LEFT JOIN primary_metadata f ON f.trial = k.trial AND f.name = ? "
            f"WHERE k.name = ? AND k.value IN ({', '.join('?' * count)}) ORDER BY k.trial")


def trials_by_source_key(db: TaudbDatabase, source_keys: Iterable[str],
                         batch: int = LOOKUP_BATCH) -> dict[str, dict]:
    """Source key -> ``{"id", "fingerprint"}`` of its stored trial (the newest, should there
    be several), for those of ``source_keys`` that have one, read from primary metadata
    ``batch`` keys per statement; so a step asks for the trials it may load, not for every
    trial. Nothing where ``db`` has no TAUdb schema (nothing is created)."""
    wanted = sorted(set(source_keys))
    if not wanted:
        return {}
    with db.transaction() as cursor:
        if not schema_present(db, cursor):
            return {}
    ensure_indexes(db)  # on a TAUdb made before Joulehouse had them
    found: dict[str, dict] = {}
    for start in range(0, len(wanted), batch):
        keys = tuple(wanted[start:start + batch])
        rows = db.query(source_key_lookup(len(keys)), (FINGERPRINT, SOURCE_KEY, *keys))
        found |= {key: {"id": trial, "fingerprint": fingerprint}
                  for trial, key, fingerprint in rows}
    return found


def delete_trial(db: TaudbDatabase, trial_id: int) -> bool:
    """Delete one trial and all its rows in one transaction; False if there was none."""
    ensure_schema(db)
    with db.transaction() as cursor:
        cursor.execute(db.sql("SELECT count(*) FROM trial WHERE id = ?"), (trial_id,))
        if cursor.fetchone()[0] == 0:
            return False
        _delete(db, cursor, trial_id)
        return True


# --- deriving the rows -------------------------------------------------------------------------
#
# Arrays and plain Python over the trial's columns, no frame operation per step: a small
# trial (a ClusterCockpit job: one thread, one timer) costs what its rows cost, not a
# fixed pandas overhead per table; a large one is vectorised as before.

def _derive(trial: TrialData) -> tuple[dict[str, Columns], Callable[[], Columns]]:
    """Every table but timer_value (in :data:`COLUMNS` order), and the function that computes
    timer_value: only arithmetic is left to it, every check of the input is done here.

    A trial that breaks a rule raises :class:`InputError` naming its source key,
    so a caller that fails one source at a time (a Dagster partition) can.
    """
    try:
        check_trial(trial)
        tables, timer_values = _derive_unchecked(with_flat_entries(trial))
        for name, columns in tables.items():
            _check_int32(columns)
            _check_text(name, columns)
    except InputError:
        raise
    except ValueError as err:
        raise InputError(trial.source_key, str(err)) from err
    return tables, timer_values


def _derive_unchecked(trial: TrialData) -> tuple[dict[str, Columns], Callable[[], Columns]]:
    threads, real = _threads(trial.threads)
    entries, callpaths, timers = _callgraph(trial.timers["name"].tolist())
    call_data, values = _timer_statistics(trial, real, entries)
    counters, counter_values = _counters(trial, real)
    primary, secondary = _metadata(trial, real)
    names = timers["name"].tolist()
    tables = {
        "trial": _trial_row(trial, real),
        "metric": {"id": np.arange(len(trial.metrics)), "trial": _zeros(len(trial.metrics)),
                   "name": np.array(trial.metrics, dtype=object),
                   "derived": np.zeros(len(trial.metrics), dtype=bool)},
        "thread": threads,
        "timer": timers,
        "timer_group": _groups(trial.timers, names),
        "timer_parameter": _parameters(names),
        "timer_callpath": callpaths,
        "counter": counters,
        "counter_value": counter_values,
        "primary_metadata": primary,
        "secondary_metadata": secondary,
        "timer_call_data": call_data,
    }
    return ({name: _in_order(name, tables[name]) for name in COLUMNS if name in tables},
            lambda: _in_order("timer_value", values()))


def _in_order(table: str, columns: dict[str, np.ndarray]) -> Columns:
    """``columns`` with the table's :data:`COLUMNS`, in that order; ``trial`` (the trial's
    local row number) added where the table has it."""
    if "trial" in COLUMNS[table] and "trial" not in columns and table != "trial":
        columns = {**columns, "trial": _zeros(_length(columns))}
    return {column: columns[column] for column in COLUMNS[table]}


def _zeros(length: int) -> np.ndarray:
    return np.zeros(length, dtype="int64")


def _threads(frame: pd.DataFrame) -> tuple[Columns, np.ndarray]:
    """thread rows: real threads (sorted) then the derived ones, ``id`` = row number; and
    the real threads' ranks, (threads, 3) in that order."""
    real = thread_ranks(frame)
    if not len(real):
        raise ValueError("TrialData.threads lists no thread")
    real = real[np.lexsort(real.T[::-1])]
    if (real[1:] == real[:-1]).all(axis=1).any():
        raise ValueError("TrialData.threads lists a thread twice")
    contexts = int(real[:, 1].max()) + 1 if len(real) else 1
    per_context = int(real[:, 2].max()) + 1 if len(real) else 1
    index = (real[:, 0] * contexts + real[:, 1]) * per_context + real[:, 2]
    columns = {column: np.concatenate([real[:, position], DERIVED])
               for position, column in enumerate(THREAD_COLUMNS)}
    columns["thread_index"] = np.concatenate([index, DERIVED])
    columns["id"] = np.arange(len(real) + len(DERIVED))
    return columns, real


def _thread_numbers(ranks: np.ndarray, real: np.ndarray, what: str) -> np.ndarray:
    """Local thread numbers of the thread ranks ``ranks`` of TrialData's frame ``what``
    (``real``: the real threads' ranks)."""
    found = _row_positions(real, ranks)
    if (found < 0).any():
        rank = tuple(int(r) for r in ranks[int(np.argmax(found < 0))])
        raise ValueError(f"TrialData.{what}: thread {rank} is not in TrialData.threads")
    return found


def _row_positions(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The position in ``table`` (distinct integer rows) of each row of ``rows``, -1 where
    absent: the rows as one key each (:func:`rules.row_keys` over both) and a sorted search."""
    keys = row_keys(np.concatenate([table, rows]))
    keys, wanted = keys[:len(table)], keys[len(table):]
    order = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[order], wanted), max(len(keys) - 1, 0))
    hit = keys[order][at] == wanted if len(keys) else np.zeros(len(wanted), bool)
    return np.where(hit, order[at] if len(keys) else 0, -1)


@dataclass(frozen=True)
class _Entries:
    """The trial's timer entries (flat or callpath names, sorted): ``position`` name ->
    entry number, ``names`` by entry number, ``path`` entry number -> callpath row."""

    position: dict[str, int]
    names: list[str]
    path: np.ndarray

    def numbers(self, names: list[str]) -> np.ndarray:
        """Entry numbers of ``names``, -1 for a name that is no entry."""
        return np.array([self.position.get(name, -1) for name in names], dtype="int64")


def _callgraph(names: list[str]) -> tuple[_Entries, Columns, dict[str, np.ndarray]]:
    """Entries (sorted names), the callpath rows, and the flat timer rows.

    Every prefix of a callpath is a callpath node (created when missing).
    """
    entry_names = sorted(set(names))
    nodes: dict[str, tuple[str, str | None]] = {}  # path -> (leaf, parent path)
    for name in entry_names:
        frames = name.split(CALLPATH_SEPARATOR)
        for depth in range(len(frames)):
            path = CALLPATH_SEPARATOR.join(frames[: depth + 1])
            if path not in nodes:
                parent = CALLPATH_SEPARATOR.join(frames[:depth]) if depth else None
                nodes[path] = (frames[depth].strip(), parent)
    # parents before children: SQLite checks each row's parent when it is inserted
    paths = sorted(nodes, key=lambda p: (p.count(CALLPATH_SEPARATOR), p))
    path_number = {path: i for i, path in enumerate(paths)}
    flat = sorted({leaf for leaf, _ in nodes.values()})
    timer_number = {name: i for i, name in enumerate(flat)}
    callpaths = {
        "id": np.arange(len(paths)),
        "timer": np.array([timer_number[nodes[p][0]] for p in paths], dtype="int64"),
        "parent": np.array([path_number[nodes[p][1]] if nodes[p][1] is not None else -1
                            for p in paths], dtype="int64"),
    }
    entries = _Entries({name: i for i, name in enumerate(entry_names)}, entry_names,
                       np.array([path_number[n] for n in entry_names], dtype="int64"))
    return entries, callpaths, _timer_rows(flat)


def _timer_rows(flat: list[str]) -> Columns:
    """Timer rows with TAU's short name and source location (lines 0 when unknown)."""
    rows = []
    for name in flat:
        found = _SOURCE.match(name)
        if found is None:
            rows.append((name, None, 0, 0, 0, 0))
            continue
        line, col, line_end, col_end = (int(found[key]) if found[key] is not None else None
                                        for key in ("line", "col", "line_end", "col_end"))
        # one "{line}" or "{line,col}" is both the start and the end line, as TAU reads it
        rows.append((found["short"], found["file"].rsplit("/", 1)[-1], line or 0,
                     line_end if line_end is not None else line or 0, col or 0, col_end or 0))
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    return {
        "id": np.arange(len(flat)),
        "name": _objects(flat),
        "short_name": _objects(columns[0]),
        "source_file": _objects(columns[1]),
        **{name: np.array(values, dtype="int64") for name, values in zip(
            ("line_number", "line_number_end", "column_number", "column_number_end"),
            columns[2:], strict=True)}}


def _objects(values) -> np.ndarray:
    """A 1-d object array of ``values`` (strings, None)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _groups(entries: pd.DataFrame, names: list[str]) -> Columns:
    """timer_group rows: at least one group per timer (:func:`rules.group_pairs`); ``names``:
    the timers' names, by timer row number."""
    number = {name: i for i, name in enumerate(names)}
    pairs = group_pairs(entries["name"].tolist(), entries["group_names"].tolist(), names)
    return {"timer": np.array([number[name] for name, _ in pairs], dtype="int64"),
            "group_name": _objects([group for _, group in pairs])}


def _parameters(names: list[str]) -> Columns:
    """timer_parameter rows of parameter-profile names (``[ <x> = <4> ]``); ``names``: the
    timers' names, by timer row number."""
    rows = [(timer, parameter.strip(), value.strip())
            for timer, name in enumerate(names) if "[ <" in name
            for parameter, value in _PARAMETER.findall(name)]
    columns = list(zip(*rows, strict=True)) if rows else [()] * 3
    return {"timer": np.array(columns[0], dtype="int64"),
            "parameter_name": _objects(columns[1]), "parameter_value": _objects(columns[2])}


def _timer_statistics(trial: TrialData, real: np.ndarray, entries: _Entries
                      ) -> tuple[Columns, Callable[[], Columns]]:
    """timer_call_data rows of the real and the derived threads, and the function that
    computes their timer_value rows (one per call data row and metric)."""
    n_threads = len(real)
    n_metrics = len(trial.metrics)
    # one row per (entry, thread) that has the entry, in entry then thread order
    entry = entries.numbers(trial.timers["name"].tolist())
    thread = _thread_numbers(thread_ranks(trial.timers), real, "timers")
    order = np.lexsort((thread, entry))
    entry, thread = entry[order], thread[order]
    if ((entry[1:] == entry[:-1]) & (thread[1:] == thread[:-1])).any():
        raise ValueError("TrialData.timers lists a timer twice for one thread")
    real_calls = np.column_stack([trial.timers[column].to_numpy(dtype="float64")[order]
                                  for column in ("calls", "subroutines")])
    incl, excl = _values_of(trial, real, entries, entry * n_threads + thread)
    _check_real_calls(real_calls, entry, thread, entries, real)
    stats = _Statistics(entry, len(entries.names), n_threads)
    derived_entry, derived_thread, derived_calls = stats.derive_calls(real_calls)
    calls = np.concatenate([real_calls, derived_calls])
    keep = calls[:, 0] > 0
    call_data = {
        "id": np.arange(int(keep.sum())),
        "timer_callpath": entries.path[np.concatenate([entry, derived_entry])[keep]],
        "thread": np.concatenate([thread, derived_thread])[keep],
        # a derived thread's calls (TOTAL of many threads) are clamped to INT, as TAU's
        # (int) cast of a double does when it loads them
        "calls": _as_int(calls[keep, 0]),
        "subroutines": _as_int(calls[keep, 1]),
    }

    def values() -> Columns:
        # per-thread largest inclusive value M, and S = sum of M in thread order (per metric)
        largest = np.zeros((n_threads, n_metrics))
        np.maximum.at(largest, thread, incl)
        total_largest = np.zeros(n_metrics)
        for row in largest:  # sequential, as TAU sums
            total_largest += row
        thread_divider = largest[thread] / 100.0
        real_values = (incl, excl, _percent(incl, thread_divider),
                       _percent(excl, thread_divider))
        derived = stats.derive_values(incl, excl, total_largest / 100.0)
        inclusive, exclusive, incl_pct, excl_pct = (
            np.concatenate([r, d])[keep].ravel() for r, d in zip(real_values, derived))
        return {
            "timer_call_data": np.repeat(call_data["id"], n_metrics),
            "metric": np.tile(np.arange(n_metrics), len(call_data["id"])),
            "inclusive_value": inclusive, "exclusive_value": exclusive,
            "inclusive_percent": incl_pct, "exclusive_percent": excl_pct,
        }

    return call_data, values


def _values_of(trial: TrialData, real: np.ndarray, entries: _Entries, keys: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive and exclusive values aligned with the (entry, thread) rows of ``keys``
    (``entry * threads + thread``, sorted): (rows, metrics); every one is given
    (:func:`rules.check_trial`), derived flat entries' included."""
    frame = trial.timer_values
    metric_number = {name: i for i, name in enumerate(trial.metrics)}
    metric = np.array([metric_number[name] for name in frame["metric"].tolist()],
                      dtype="int64")  # all known: rules.check_trial
    names = frame["name"].tolist()
    entry = entries.numbers(names)
    thread = _thread_numbers(thread_ranks(frame), real, "timer_values")
    wanted = entry * len(real) + thread
    row = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
    missing = (entry < 0) | (keys[row] != wanted) if len(keys) else np.ones(len(entry), bool)
    if missing.any():
        raise ValueError("TrialData.timer_values: a value for a (thread, timer) that "
                         f"TrialData.timers lacks: {names[int(np.argmax(missing))]!r}")
    incl = np.zeros((len(keys), len(trial.metrics)))
    excl = np.zeros_like(incl)
    incl[row, metric] = frame["inclusive"].to_numpy(dtype="float64")
    excl[row, metric] = frame["exclusive"].to_numpy(dtype="float64")
    return incl, excl


def _percent(value: np.ndarray, divider: np.ndarray) -> np.ndarray:
    """``value / divider``, 0 where the divider is 0 (TAU's guard)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(divider == 0, 0.0, value / np.where(divider == 0, 1.0, divider))


class _Statistics:
    """TAU's derived-thread statistics over the real threads that have an entry.

    Rows arrive sorted by entry then thread; every sum runs in that order.
    """

    def __init__(self, entry: np.ndarray, n_entries: int, n_threads: int):
        self.entry = entry
        self.n_entries = n_entries
        self.n_threads = n_threads
        self.count = np.bincount(entry, minlength=n_entries).astype("float64")

    def _sum(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros((self.n_entries,) + x.shape[1:])
        np.add.at(out, self.entry, x)
        return out

    def _extreme(self, x: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
        """Per-entry minimum or maximum (rows are grouped by entry; every entry has rows)."""
        if len(self.entry) == 0:
            return np.zeros((0,) + x.shape[1:])
        starts = np.flatnonzero(np.r_[True, self.entry[1:] != self.entry[:-1]])
        return ufunc.reduceat(x, starts, axis=0)

    def _moments(self, x: np.ndarray) -> dict[int, np.ndarray]:
        """The seven derived values of ``x`` (rows, columns) per entry, keyed by code."""
        count = self.count.reshape((-1,) + (1,) * (x.ndim - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            some = np.where(count > 0, 1.0 / count, 0.0)
        every = 1.0 / self.n_threads
        total, squares = self._sum(x), self._sum(x * x)
        mean_some, mean_every = total * some, total * every
        std_some = np.where(count > 1, np.sqrt(np.abs(squares * some - mean_some * mean_some)), 0.0)
        std_every = np.sqrt(np.abs(squares * every - mean_every * mean_every))
        return {-1: mean_some, -2: total, -3: std_some, -4: self._extreme(x, np.minimum),
                -5: self._extreme(x, np.maximum), -6: mean_every, -7: std_every}

    def derive_calls(self, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Entry, thread and (calls, subroutines) of the derived threads' call rows, every
        entry per derived thread, numbered after the real ones: n_threads + 0 for -1, ...
        + 6 for -7."""
        c = self._moments(calls)
        return (np.tile(np.arange(self.n_entries), len(DERIVED)),
                np.repeat(self.n_threads + np.arange(len(DERIVED)), self.n_entries),
                np.concatenate([c[int(code)] for code in DERIVED]))

    def derive_values(self, incl: np.ndarray, excl: np.ndarray,
                      divider: np.ndarray) -> tuple[np.ndarray, ...]:
        """Inclusive, exclusive and their percents of the derived threads, rows in
        :meth:`derive_calls` order; ``divider`` is S / 100 per metric."""
        i, e = self._moments(incl), self._moments(excl)
        per_thread = divider / self.n_threads
        values = []
        with np.errstate(divide="ignore", invalid="ignore"):
            for code in DERIVED:
                code = int(code)
                if code in (-1, -2, -6):
                    incl_pct = _percent(i[-2], divider)
                    excl_pct = (_percent(e[-2], divider) if code == -2
                                else _percent(e[-1], per_thread))
                elif code in (-4, -5):
                    incl_pct = _percent(i[code], per_thread)
                    excl_pct = _percent(e[code], per_thread)
                else:  # STDDEV: relative to the MEAN(-1) values, exclusive without * 100
                    incl_pct, excl_pct = i[code] / i[-1] * 100.0, e[code] / e[-1]
                values.append((i[code], e[code], incl_pct, excl_pct))
        return tuple(np.concatenate(parts) for parts in zip(*values))


def _counters(trial: TrialData, real: np.ndarray) -> tuple[Columns, Columns]:
    """counter rows (one per user event name) and counter_value rows (real threads)."""
    frame = trial.counters
    names = frame["name"].tolist()
    distinct = sorted(set(names))
    number = {name: i for i, name in enumerate(distinct)}
    counters = {"id": np.arange(len(distinct)), "name": _objects(distinct)}
    values = {
        "counter": np.array([number[name] for name in names], dtype="int64"),
        "thread": _thread_numbers(thread_ranks(frame), real, "counters"),
        "sample_count": frame["sample_count"].to_numpy(dtype="int64"),
        "maximum_value": frame["maximum"].to_numpy(dtype="float64"),
        "minimum_value": frame["minimum"].to_numpy(dtype="float64"),
        "mean_value": frame["mean"].to_numpy(dtype="float64"),
        "standard_deviation": frame["sum_squares"].to_numpy(dtype="float64"),  # raw SumSqr
    }
    return counters, values


def trial_attributes(trial: TrialData) -> dict[str, str]:
    """The trial-level primary metadata: ``trial_metadata``, then what the loader adds
    (TAU's file type, which replaces the one a file states; source_key; fingerprint)."""
    return {
        **trial.trial_metadata,
        "File Type Index": str(trial.data_source),
        "File Type Name": FILE_TYPE_NAMES.get(trial.data_source, "Other"),
        SOURCE_KEY: trial.source_key,
        FINGERPRINT: trial.fingerprint,
    }


def _metadata(trial: TrialData, real: np.ndarray) -> tuple[Columns, Columns]:
    """Primary (name, value) and secondary (id, thread, name, value, is_array) rows."""
    extra = trial_attributes(trial)
    frame = trial.metadata
    kept = np.array([name not in extra for name in frame["name"].tolist()], dtype=bool)
    thread = _thread_numbers(thread_ranks(frame)[kept], real, "metadata")
    rows = list(zip(thread.tolist(), frame["name"].to_numpy()[kept].tolist(),
                    frame["value"].to_numpy()[kept].tolist()))
    first: dict = {}  # name -> its value on the first thread (its first row there)
    for number, name, value in rows:
        if number == 0 and name not in first:
            first[name] = value
    differs = {name for _, name, value in rows if name not in first or value != first[name]}
    primary = [name for name in first if name not in differs]
    secondary = sorted((row for row in rows if row[1] in differs), key=lambda row: (row[1], row[0]))
    return ({"name": _objects(primary + list(extra)),
             "value": _objects([first[name] for name in primary] + list(extra.values()))},
            {"id": _objects([str(uuid.uuid4()) for _ in secondary]),
             "thread": np.array([row[0] for row in secondary], dtype="int64"),
             "name": _objects([row[1] for row in secondary]),
             "value": _objects([row[2] for row in secondary]),
             "is_array": np.zeros(len(secondary), dtype=bool)})


def _trial_row(trial: TrialData, real: np.ndarray) -> Columns:
    """The trial row: counts as TAU computes them (distinct nodes, largest per-parent counts)."""
    per_context = Counter(map(tuple, real[:, :2].tolist()))
    contexts = Counter(node for node, _ in per_context)
    return {"id": np.zeros(1, dtype="int64"), "name": _objects([trial.name]),
            "data_source": np.array([trial.data_source], dtype="int64"),
            "node_count": np.array([len(contexts)], dtype="int64"),
            "contexts_per_node": np.array([max(contexts.values(), default=0)], dtype="int64"),
            "threads_per_context": np.array([max(per_context.values(), default=0)],
                                            dtype="int64"),
            "total_threads": np.array([len(real)], dtype="int64")}


# --- writing -----------------------------------------------------------------------------------

def _with_ids(table: str, parts: list[Columns], allocated: dict[str, np.ndarray],
              first: dict[str, np.ndarray]) -> pd.DataFrame:
    """One frame of the trials' rows of ``table`` (``parts``, one per trial), local row
    numbers replaced by allocated ids (-1 -> NULL): trial i's local row r of table T has id
    ``allocated[T][first[T][i] + r]``."""
    lengths = [_length(part) for part in parts]
    trial = np.repeat(np.arange(len(parts)), lengths)
    out = {}
    for column in COLUMNS[table]:
        values = parts[0][column] if len(parts) == 1 else np.concatenate(
            [part[column] for part in parts])
        target = table if column == "id" else REFERENCES.get(column)
        if target in allocated:
            local = values.astype("int64")
            values = allocated[target][first[target][trial] + np.maximum(local, 0)]
            if (local < 0).any():
                values = pd.array(values, dtype="Int64")
                values[local < 0] = pd.NA
        out[column] = values
    return pd.DataFrame(out)


def _as_int(counts: np.ndarray) -> np.ndarray:
    """Call counts truncated to integers and clamped to INT32_MAX (Java's ``(int)`` of a double)."""
    return np.minimum(np.trunc(counts), INT32_MAX).astype("int64")


def _check_real_calls(calls: np.ndarray, entry: np.ndarray, thread: np.ndarray,
                      entries: _Entries, real: np.ndarray) -> None:
    """Raise, naming the timer and the thread, on a real thread's calls or subroutines
    (``calls``: rows of (calls, subroutines)) that do not fit TAUdb's INT columns (only the
    derived threads' are clamped)."""
    for position, column in enumerate(("calls", "subroutines")):
        over = calls[:, position] > INT32_MAX
        if over.any():
            row = int(np.argmax(over))
            rank = tuple(int(r) for r in real[thread[row]])
            raise ValueError(f"timer {entries.names[entry[row]]!r}, thread {rank} "
                             f"(node, context, thread): {column} {calls[row, position]:.0f} "
                             "does not fit an INT column")


def _check_int32(columns: Columns) -> None:
    """Raise on integers that do not fit TAUdb's INT columns."""
    for column, values in columns.items():
        if values.dtype.kind in "iu" and len(values):
            low, high = int(values.min()), int(values.max())
            if low < -INT32_MAX - 1 or high > INT32_MAX:
                wide = low if low < -INT32_MAX - 1 else high
                raise ValueError(f"{column}: {wide} does not fit an INT column")


def _check_text(table: str, columns: Columns) -> None:
    """Raise on text a database cannot store: a NUL character (PostgreSQL's text has none)
    or a lone surrogate (no UTF-8), so that the trial fails alone, by its source key,
    rather than the whole load at the database."""
    for column, values in columns.items():
        if values.dtype == object:
            texts = [value for value in values.tolist() if isinstance(value, str)]
            if _storable("".join(texts)):
                continue
            bad = next(value for value in texts if not _storable(value))
            raise ValueError(f"{table}.{column}: {bad!r} holds a NUL character or a lone "
                             "surrogate, which TAUdb's text columns cannot store")


def _storable(text: str) -> bool:
    """Whether ``text`` has no NUL character and encodes as UTF-8."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _trials_with_source_key(db: TaudbDatabase, cursor, source_key: str) -> list[int]:
    cursor.execute(db.sql("SELECT trial FROM primary_metadata WHERE name = ? AND value = ?"),
                   (SOURCE_KEY, source_key))
    return sorted({row[0] for row in cursor.fetchall()})


_DELETES = [
    ("DELETE FROM timer_value WHERE timer_call_data IN (SELECT d.id FROM timer_call_data d "
     "JOIN thread h ON d.thread = h.id WHERE h.trial = ?)"),
    "DELETE FROM counter_value WHERE thread IN (SELECT id FROM thread WHERE trial = ?)",
    "DELETE FROM timer_call_data WHERE thread IN (SELECT id FROM thread WHERE trial = ?)",
    "DELETE FROM secondary_metadata WHERE trial = ?",
    "DELETE FROM timer_callpath WHERE timer IN (SELECT id FROM timer WHERE trial = ?)",
    "DELETE FROM timer_group WHERE timer IN (SELECT id FROM timer WHERE trial = ?)",
    "DELETE FROM timer_parameter WHERE timer IN (SELECT id FROM timer WHERE trial = ?)",
    "DELETE FROM timer WHERE trial = ?",
    "DELETE FROM counter WHERE trial = ?",
    "DELETE FROM primary_metadata WHERE trial = ?",
    "DELETE FROM thread WHERE trial = ?",
    "DELETE FROM metric WHERE trial = ?",
    "DELETE FROM trial WHERE id = ?",
]


def _delete(db: TaudbDatabase, cursor, trial_id: int) -> None:
    """Delete every row of one trial, children first (inside the caller's transaction)."""
    for statement in _DELETES:
        cursor.execute(db.sql(statement), (trial_id,))
