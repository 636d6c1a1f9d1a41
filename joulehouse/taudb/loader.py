"""Load a :class:`TrialData` into TAUdb with exactly the rows TAU's loader writes.

:func:`derive_rows` computes every row from the frames (vectorised, no
database); :func:`load_trial` allocates the ids and writes them in one
transaction, through the database's bulk-write primitive (COPY on
PostgreSQL, ``executemany`` on SQLite). Many small trials load faster
together: :func:`prepare_trial` derives and checks each (its input errors
its own), :func:`load_prepared` writes them all in one transaction, one bulk
write per table.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pandas as pd

from joulehouse.errors import InputError
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.model import CALLPATH_SEPARATOR, THREAD_COLUMNS, TrialData
from joulehouse.taudb.rules import check_trial, timer_groups, with_flat_entries
from joulehouse.taudb.schema import ensure_lookup_index, ensure_schema, schema_present

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


#: Every row of one trial, by table; ``id`` and foreign-key columns hold local row
#: numbers (0-based positions in the referenced table, -1 for NULL) until
#: :func:`load_trial` maps them to allocated ids.
TrialRows: TypeAlias = dict[str, pd.DataFrame]


def derive_rows(trial: TrialData) -> TrialRows:
    """All TAUdb rows of ``trial``, as TAU's loader would write them."""
    tables, timer_values = _derive(trial)
    return {**tables, "timer_value": timer_values()}


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
    tables: dict[str, pd.DataFrame]
    timer_values: Callable[[], pd.DataFrame]


def prepare_trial(trial: TrialData) -> PreparedTrial:
    """``trial``'s rows, derived and checked; InputError naming its source key when it
    breaks a rule."""
    return PreparedTrial(trial, *_derive(trial))


def load_prepared(db: TaudbDatabase, prepared: list[PreparedTrial]) -> list[int]:
    """Write the ``prepared`` trials in ONE transaction, each replacing the trials of its
    source key (given once each); their ids, in order. All or nothing: an error leaves the
    database as it was. Ids are allocated in order, so they are those that loading the
    trials one by one would give; each table is written once for all of them, so many
    small trials cost one transaction and one bulk write per table."""
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
        counts = [{table: len(one.tables[table]) for table in ALLOCATED} for one in prepared]
        allocated = db.allocate_ids(cursor, {table: sum(c[table] for c in counts)
                                             for table in ALLOCATED})
        ids = [{} for _ in prepared]
        for table in ALLOCATED:
            bounds = np.cumsum([0] + [c[table] for c in counts])
            for position, own in enumerate(ids):
                own[table] = allocated[table][bounds[position]:bounds[position + 1]]
        with db.bulk_writer(cursor) as write:
            for table in prepared[0].tables:
                write(table, _concat([_with_ids(table, one.tables[table], own)
                                      for one, own in zip(prepared, ids, strict=True)]))
            write("timer_value", _concat([_with_ids("timer_value", one.timer_values(), own)
                                          for one, own in zip(prepared, ids, strict=True)]))
        return [int(own["trial"][0]) for own in ids]


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """One frame of the trials' rows of a table (those without rows left out)."""
    frames = [frame for frame in frames if len(frame)] or frames[:1]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


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
    ensure_lookup_index(db)  # on a TAUdb made before Joulehouse had it
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

def _derive(trial: TrialData) -> tuple[dict[str, pd.DataFrame], Callable[[], pd.DataFrame]]:
    """Every table but timer_value (in :data:`COLUMNS` order), and the function that computes
    timer_value: only arithmetic is left to it, every check of the input is done here.

    A trial that breaks a rule raises :class:`InputError` naming its source key,
    so a caller that fails one source at a time (a Dagster partition) can.
    """
    try:
        check_trial(trial)
        tables, timer_values = _derive_unchecked(with_flat_entries(trial))
        for name, frame in tables.items():
            _check_int32(frame)
            _check_text(name, frame)
    except InputError:
        raise
    except ValueError as err:
        raise InputError(trial.source_key, str(err)) from err
    return tables, timer_values


def _derive_unchecked(
    trial: TrialData,
) -> tuple[dict[str, pd.DataFrame], Callable[[], pd.DataFrame]]:
    threads = _threads(trial.threads)
    entries, callpaths, timers = _callgraph(trial.timers)
    call_data, values = _timer_statistics(trial, threads, entries)
    counters, counter_values = _counters(trial, threads)
    primary, secondary = _metadata(trial, threads)
    tables = {
        "trial": _trial_row(trial, threads),
        "metric": pd.DataFrame({"id": np.arange(len(trial.metrics)), "trial": 0,
                                "name": trial.metrics, "derived": False}),
        "thread": threads.assign(trial=0),
        "timer": timers.assign(trial=0),
        "timer_group": _groups(trial.timers, timers),
        "timer_parameter": _parameters(timers),
        "timer_callpath": callpaths,
        "counter": counters.assign(trial=0),
        "counter_value": counter_values,
        "primary_metadata": primary.assign(trial=0),
        "secondary_metadata": secondary.assign(trial=0),
        "timer_call_data": call_data,
    }
    return ({name: _columns(tables[name], cols) for name, cols in COLUMNS.items()
             if name in tables}, lambda: _columns(values(), COLUMNS["timer_value"]))


def _columns(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame[columns]``; ``frame`` itself when it has them in that order."""
    return frame if list(frame.columns) == columns else frame[columns]


def _threads(frame: pd.DataFrame) -> pd.DataFrame:
    """Real threads (sorted) then the derived ones; ``id`` = row number."""
    real = frame[THREAD_COLUMNS].astype("int64").sort_values(THREAD_COLUMNS, ignore_index=True)
    if real.duplicated().any():
        raise ValueError("TrialData.threads lists a thread twice")
    contexts = int(real["context_rank"].max()) + 1 if len(real) else 1
    per_context = int(real["thread_rank"].max()) + 1 if len(real) else 1
    real["thread_index"] = ((real["node_rank"] * contexts + real["context_rank"]) * per_context
                            + real["thread_rank"])
    derived = pd.DataFrame({col: DERIVED for col in THREAD_COLUMNS + ["thread_index"]})
    threads = pd.concat([real, derived], ignore_index=True)
    threads["id"] = np.arange(len(threads))
    return threads


def _thread_numbers(frame: pd.DataFrame, threads: pd.DataFrame, what: str) -> np.ndarray:
    """Local thread numbers of the rows of ``frame`` (real threads only)."""
    real = threads.loc[threads["node_rank"] >= 0, THREAD_COLUMNS].to_numpy(dtype="int64")
    found = _row_positions(real, frame[THREAD_COLUMNS].astype("int64").to_numpy())
    if (found < 0).any():
        row = frame.iloc[int(np.argmax(found < 0))]
        raise ValueError(f"TrialData.{what}: thread {tuple(int(r) for r in row[THREAD_COLUMNS])} "
                         "is not in TrialData.threads")
    return found


def _row_positions(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The position in ``table`` (distinct integer rows) of each row of ``rows``, -1 where
    absent: the rows as one integer key each (mixed radix over the values' ranges) and a
    sorted search, or a MultiIndex lookup where the ranges are too wide for one int64."""
    both = np.concatenate([table, rows])
    if not len(both):
        return np.zeros(0, dtype="int64")
    low = both.min(axis=0)
    span = both.max(axis=0) - low + 1
    if float(np.prod(span.astype("float64"))) >= 2.0**62:
        index = pd.MultiIndex.from_arrays(list(table.T))
        return index.get_indexer(pd.MultiIndex.from_arrays(list(rows.T)))
    weights = np.cumprod(np.concatenate([span[1:], [1]])[::-1])[::-1]
    keys, wanted = (table - low) @ weights, (rows - low) @ weights
    order = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[order], wanted), max(len(keys) - 1, 0))
    hit = keys[order][at] == wanted if len(keys) else np.zeros(len(wanted), bool)
    return np.where(hit, order[at] if len(keys) else 0, -1)


def _callgraph(timers: pd.DataFrame) -> tuple[pd.Index, pd.DataFrame, pd.DataFrame]:
    """Entries (sorted names), the callpath rows, and the flat timer rows.

    Every prefix of a callpath is a callpath node (created when missing);
    ``entries`` maps an entry name to its callpath row number.
    """
    names = pd.Index(timers["name"].unique()).sort_values()
    nodes: dict[str, tuple[str, str | None]] = {}  # path -> (leaf, parent path)
    for name in names:
        frames = name.split(CALLPATH_SEPARATOR)
        for depth in range(len(frames)):
            path = CALLPATH_SEPARATOR.join(frames[: depth + 1])
            if path not in nodes:
                parent = CALLPATH_SEPARATOR.join(frames[:depth]) if depth else None
                nodes[path] = (frames[depth].strip(), parent)
    # parents before children: SQLite checks each row's parent when it is inserted
    paths = sorted(nodes, key=lambda p: (p.count(CALLPATH_SEPARATOR), p))
    path_number = {path: i for i, path in enumerate(paths)}
    flat = pd.Index(sorted({leaf for leaf, _ in nodes.values()}))
    callpaths = pd.DataFrame({
        "id": np.arange(len(paths)),
        "timer": flat.get_indexer([nodes[p][0] for p in paths]),
        "parent": [path_number[nodes[p][1]] if nodes[p][1] is not None else -1 for p in paths],
    })
    entries = pd.Series([path_number[n] for n in names], index=names, dtype="int64")
    return entries, callpaths, _timer_rows(flat)


def _timer_rows(flat: pd.Index) -> pd.DataFrame:
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
    return pd.DataFrame({
        "id": np.arange(len(flat)),
        "name": np.array(list(flat), dtype=object),
        "short_name": np.array(columns[0], dtype=object),
        "source_file": np.array(columns[1], dtype=object),
        **{name: np.array(values, dtype="int64") for name, values in zip(
            ("line_number", "line_number_end", "column_number", "column_number_end"),
            columns[2:], strict=True)}})


def _groups(entries: pd.DataFrame, timers: pd.DataFrame) -> pd.DataFrame:
    """timer_group rows: at least one group per timer (:func:`rules.timer_groups`)."""
    groups = timer_groups(entries, pd.Index(timers["name"]))
    timer = pd.Index(timers["name"]).get_indexer(groups["name"])
    return pd.DataFrame({"timer": timer, "group_name": groups["group_name"].to_numpy()})


def _parameters(timers: pd.DataFrame) -> pd.DataFrame:
    """timer_parameter rows of parameter-profile names (``[ <x> = <4> ]``)."""
    names = timers["name"]
    found = names[names.str.contains("[ <", regex=False)].str.extractall(_PARAMETER)
    timer = found.index.get_level_values(0).to_numpy()
    return pd.DataFrame({"timer": timers["id"].to_numpy()[timer] if len(timer) else timer,
                         "parameter_name": found[0].str.strip().to_numpy(),
                         "parameter_value": found[1].str.strip().to_numpy()})


def _timer_statistics(trial: TrialData, threads: pd.DataFrame, entries: pd.Series
                      ) -> tuple[pd.DataFrame, Callable[[], pd.DataFrame]]:
    """timer_call_data rows of the real and the derived threads, and the function that
    computes their timer_value rows (one per call data row and metric)."""
    n_threads = int((threads["node_rank"] >= 0).sum())
    n_metrics = len(trial.metrics)
    # one row per (entry, thread) that has the entry, in entry then thread order
    present = pd.DataFrame({
        "entry": entries.index.get_indexer(trial.timers["name"]),
        "thread": _thread_numbers(trial.timers, threads, "timers"),
        "calls": trial.timers["calls"].to_numpy(dtype="float64"),
        "subroutines": trial.timers["subroutines"].to_numpy(dtype="float64"),
    })
    if present.duplicated(["entry", "thread"]).any():
        raise ValueError("TrialData.timers lists a timer twice for one thread")
    present = present.sort_values(["entry", "thread"], ignore_index=True)
    incl, excl = _values_of(trial, threads, entries, present)  # (rows, metrics)
    stats = _Statistics(present["entry"].to_numpy(), len(entries), n_threads)
    real_calls = present[["entry", "thread", "calls", "subroutines"]]
    calls = pd.concat([real_calls, stats.derive_calls(present[["calls", "subroutines"]].to_numpy())],
                      ignore_index=True)
    _check_real_calls(present, entries, threads)
    keep = (calls["calls"] > 0).to_numpy()
    call_data = pd.DataFrame({
        "id": np.arange(int(keep.sum())),
        "timer_callpath": entries.to_numpy()[calls["entry"].to_numpy()[keep]],
        "thread": calls["thread"].to_numpy()[keep],
        # a derived thread's calls (TOTAL of many threads) are clamped to INT, as TAU's
        # (int) cast of a double does when it loads them
        "calls": _as_int(calls["calls"].to_numpy()[keep]),
        "subroutines": _as_int(calls["subroutines"].to_numpy()[keep]),
    })

    def values() -> pd.DataFrame:
        # per-thread largest inclusive value M, and S = sum of M in thread order (per metric)
        thread = present["thread"].to_numpy()
        largest = np.zeros((n_threads, n_metrics))
        np.maximum.at(largest, thread, incl)
        total_largest = np.zeros(n_metrics)
        for row in largest:  # sequential, as TAU sums
            total_largest += row
        thread_divider = largest[thread] / 100.0
        real = (incl, excl, _percent(incl, thread_divider), _percent(excl, thread_divider))
        derived = stats.derive_values(incl, excl, total_largest / 100.0)
        inclusive, exclusive, incl_pct, excl_pct = (
            np.concatenate([r, d])[keep].ravel() for r, d in zip(real, derived))
        return pd.DataFrame({
            "timer_call_data": np.repeat(call_data["id"].to_numpy(), n_metrics),
            "metric": np.tile(np.arange(n_metrics), len(call_data)),
            "inclusive_value": inclusive, "exclusive_value": exclusive,
            "inclusive_percent": incl_pct, "exclusive_percent": excl_pct,
        })

    return call_data, values


def _values_of(trial: TrialData, threads: pd.DataFrame, entries: pd.Series,
               present: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive and exclusive values aligned with ``present`` rows: (rows, metrics); every
    one is given (:func:`rules.check_trial`), derived flat entries' included."""
    frame = trial.timer_values
    metric = pd.Index(trial.metrics).get_indexer(frame["metric"])  # all known: rules.check_trial
    entry = entries.index.get_indexer(frame["name"])
    thread = _thread_numbers(frame, threads, "timer_values")
    n_threads = int((threads["node_rank"] >= 0).sum())
    keys = present["entry"].to_numpy() * n_threads + present["thread"].to_numpy()
    wanted = entry * n_threads + thread
    row = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
    missing = (entry < 0) | (keys[row] != wanted) if len(keys) else np.ones(len(entry), bool)
    if missing.any():
        raise ValueError("TrialData.timer_values: a value for a (thread, timer) that "
                         f"TrialData.timers lacks: {frame['name'].iloc[int(np.argmax(missing))]!r}")
    incl = np.zeros((len(present), len(trial.metrics)))
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

    def derive_calls(self, calls: np.ndarray) -> pd.DataFrame:
        """Call rows (entry, thread, calls, subroutines) of the derived threads, numbered
        after the real ones: n_threads + 0 for -1, ... + 6 for -7."""
        c = self._moments(calls)
        return pd.concat([pd.DataFrame({
            "entry": np.arange(self.n_entries), "thread": self.n_threads + offset,
            "calls": c[int(code)][:, 0], "subroutines": c[int(code)][:, 1]})
            for offset, code in enumerate(DERIVED)], ignore_index=True)

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
                    incl_pct, excl_pct = _percent(i[code], per_thread), _percent(e[code], per_thread)
                else:  # STDDEV: relative to the MEAN(-1) values, exclusive without * 100
                    incl_pct, excl_pct = i[code] / i[-1] * 100.0, e[code] / e[-1]
                values.append((i[code], e[code], incl_pct, excl_pct))
        return tuple(np.concatenate(parts) for parts in zip(*values))


def _counters(trial: TrialData, threads: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """counter rows (one per user event name) and counter_value rows (real threads)."""
    frame = trial.counters
    names = pd.Index(frame["name"].unique()).sort_values()
    counters = pd.DataFrame({"id": np.arange(len(names)), "name": names})
    values = pd.DataFrame({
        "counter": names.get_indexer(frame["name"]),
        "thread": _thread_numbers(frame, threads, "counters"),
        "sample_count": frame["sample_count"].to_numpy(dtype="int64"),
        "maximum_value": frame["maximum"].to_numpy(dtype="float64"),
        "minimum_value": frame["minimum"].to_numpy(dtype="float64"),
        "mean_value": frame["mean"].to_numpy(dtype="float64"),
        "standard_deviation": frame["sum_squares"].to_numpy(dtype="float64"),  # raw SumSqr
    })
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


def _metadata(trial: TrialData, threads: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Primary (name, value) and secondary (id, thread, name, value, is_array) rows."""
    extra = trial_attributes(trial)
    frame = trial.metadata[~trial.metadata["name"].isin(list(extra))]
    thread = _thread_numbers(frame, threads, "metadata")
    frame = pd.DataFrame({"thread": thread, "name": frame["name"].to_numpy(),
                          "value": frame["value"].to_numpy()})
    first = frame.loc[frame["thread"] == 0].drop_duplicates("name").set_index("name")["value"]
    same = frame["value"].to_numpy() == first.reindex(frame["name"]).to_numpy()
    differs = pd.Series(~same).groupby(frame["name"].to_numpy()).any()
    primary_names = first.index[~differs.reindex(first.index).to_numpy()]
    primary = pd.concat([
        pd.DataFrame({"name": primary_names, "value": first[primary_names].to_numpy()}),
        pd.DataFrame({"name": list(extra), "value": list(extra.values())}),
    ], ignore_index=True)
    secondary = frame[~frame["name"].isin(primary_names)].sort_values(["name", "thread"])
    secondary = secondary.assign(id=[str(uuid.uuid4()) for _ in range(len(secondary))],
                                 is_array=False)
    return primary, secondary


def _trial_row(trial: TrialData, threads: pd.DataFrame) -> pd.DataFrame:
    """The trial row: counts as TAU computes them (distinct nodes, largest per-parent counts)."""
    real = threads[threads["node_rank"] >= 0]
    contexts = real.groupby("node_rank")["context_rank"].nunique()
    per_context = real.groupby(["node_rank", "context_rank"]).size()
    return pd.DataFrame([{
        "id": 0, "name": trial.name, "data_source": trial.data_source,
        "node_count": real["node_rank"].nunique(),
        "contexts_per_node": int(contexts.max()) if len(real) else 0,
        "threads_per_context": int(per_context.max()) if len(real) else 0,
        "total_threads": len(real),
    }])


# --- writing -----------------------------------------------------------------------------------

def _with_ids(table: str, frame: pd.DataFrame, ids: dict[str, np.ndarray]) -> pd.DataFrame:
    """``frame`` with local row numbers replaced by allocated ids (-1 -> NULL)."""
    out = frame.copy(deep=False)  # columns are replaced, never written in place
    for column in out.columns:
        target = table if column == "id" else REFERENCES.get(column)
        if target not in ids:
            continue
        local = out[column].to_numpy(dtype="int64")
        mapped = ids[target][np.maximum(local, 0)]
        if (local < 0).any():
            out[column] = pd.array(mapped, dtype="Int64")
            out.loc[local < 0, column] = pd.NA
        else:
            out[column] = mapped
    return out


def _as_int(counts: np.ndarray) -> np.ndarray:
    """Call counts truncated to integers and clamped to INT32_MAX (Java's ``(int)`` of a double)."""
    return np.minimum(np.trunc(counts), INT32_MAX).astype("int64")


def _check_real_calls(present: pd.DataFrame, entries: pd.Series, threads: pd.DataFrame) -> None:
    """Raise, naming the timer and the thread, on a real thread's calls or subroutines that
    do not fit TAUdb's INT columns (only the derived threads' are clamped)."""
    for column in ("calls", "subroutines"):
        over = present[column].to_numpy() > INT32_MAX
        if over.any():
            row = present.iloc[int(np.argmax(over))]
            rank = tuple(int(r) for r in threads.loc[int(row["thread"]), THREAD_COLUMNS])
            raise ValueError(f"timer {entries.index[int(row['entry'])]!r}, thread {rank} "
                             f"(node, context, thread): {column} {row[column]:.0f} does not "
                             "fit an INT column")


def _check_int32(frame: pd.DataFrame) -> None:
    """Raise on integers that do not fit TAUdb's INT columns."""
    for column, dtype in frame.dtypes.items():
        if dtype.kind in "iu":  # numpy's integers, and pandas' nullable Int64 (NA dropped)
            values = frame[column]
            values = (values.to_numpy() if isinstance(dtype, np.dtype)
                      else values.dropna().to_numpy(dtype="int64"))
            if len(values) and np.abs(values).max() > INT32_MAX:
                raise ValueError(f"{column}: {np.abs(values).max()} does not fit an INT column")


def _check_text(table: str, frame: pd.DataFrame) -> None:
    """Raise on text a database cannot store: a NUL character (PostgreSQL's text has none)
    or a lone surrogate (no UTF-8), so that the trial fails alone, by its source key,
    rather than the whole load at the database."""
    for column, dtype in frame.dtypes.items():
        if dtype == object or isinstance(dtype, pd.StringDtype):
            values = [value for value in frame[column].dropna() if isinstance(value, str)]
            if _storable("".join(values)):
                continue
            bad = next(value for value in values if not _storable(value))
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
