"""The sensor-days whose TAUdb trial may have changed since the trials were last loaded,
read alone (issue 28: a landing costs what changed, not what is stored).

``powerapi_trials`` (``assets/taudb.py``) keeps one trial per sensor and UTC day of the
window table ``powerapi_window_energy``, with the power reports of every stored entry
still landed (``docs/taudb-mapping.md``). A sensor-day's trial depends on its window rows
and its power reports alone (:meth:`SensorDay.fingerprint`), so only the sensor-days where
either changed are read. As the accounting does (``joulehouse/changed.py``), a
hidden state, written after the loads, records what they were read from:

- ``inputs`` (``changed.State``): a digest of what the trials are (the window setting)
  and where (the window table's location, their source keys' prefix, and the TAUdb: its
  URL, password masked, and schema); the window table's Delta data files (a sensor-day
  changed where its rows in the files gone since differ from those in the files new since:
  ``changed.delta_changes`` per sensor, then compared per day, so a refresh that rewrote a
  sensor's decade changes the days whose rows differ);
  and the progress file version (size:mtime) of each entry still landed (an entry changed
  where it is new, gone, i.e. removed from its folder or no longer stored, or rewritten);
- ``PIECES_TABLE`` (Delta, kept per entry): the sensor-days each counted piece's power
  reports hold (``entry``, ``piece``, ``position``: its index in the entry, ``sensor``,
  ``day``). A changed entry's pieces added since are read (sensor and time only) for
  theirs; its pieces no longer counted (a new generation, the entry removed) give theirs
  from the index;
- ``days`` (``name``, ``trial_id``): every sensor-day of the window table and its trial,
  what the step's metadata lists (one row per sensor-day, names and ids only);
- ``pending`` (``changed.Pending``: the sensor-days, keyed ``("powerapi", name)``, or
  ``whole``), written before the first load and removed after the state: a run stopped
  in between leaves trials the state does not account for, whose inputs may go back
  meanwhile to those it consumed; the next run reads those days again too.

A changed sensor-day is read alone: its windows by a predicate on sensor and
``window_start`` (files and row groups pruned by their statistics), its power reports from
the pieces the index names for it, in entry then piece order, as the whole read orders
them, so its rows and fingerprint are those of a whole read and an unchanged day is not
reloaded. A sensor-day whose windows left the table (its file rotated away, and its sensor
recomputed) is not loaded, and its trial stays in TAUdb, as with a whole read; it leaves
``days``.

Everything is read (:attr:`TrialDays.whole` says why) without a state or with one that
cannot be read, when the window setting, the TAUdb or the window table's location
changed, when the window table is not kept per entry (or has no version yet), when a window
data file consumed is gone from storage, or after a whole read stopped before its state.
Delete ``STATE_TABLE`` to read everything again where the digest cannot tell: after trials
were deleted from TAUdb by hand or the database restored at its URL (a day not read is not
looked up), or after stored frames were deleted by hand (an entry stored again reuses its
piece keys, which the index takes as read).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, replace

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from joulehouse import changed, entry_sync, entry_table
from joulehouse.digest import digest_pairs
from joulehouse.powerapi.stream import FRAMES_TABLE, ReportStore
from joulehouse.powerapi.windows import WINDOW_TABLE, combined
from joulehouse.taudb.connect import masked_url
from joulehouse.warehouse import Warehouse, partition_key

#: What the trials were read from (hidden: ``warehouse.is_hidden``); partitions ``inputs``,
#: ``days`` and ``pending`` (see the module).
STATE_TABLE = "_powerapi_trials_state"
#: Which sensor-days each counted piece's power reports hold (hidden, kept per entry).
PIECES_TABLE = "_powerapi_trial_pieces"
PROGRESS_TABLE = f"{FRAMES_TABLE}/progress"
POWER_TABLE = f"{FRAMES_TABLE}/power_reports"
INPUTS, DAYS = "inputs", "days"
#: The layout of the state: another one reads everything once.
LAYOUT = "1"
#: ``changed.Pending``'s key of a sensor-day: (this, its name).
SOURCE = "powerapi"
PIECE_COLUMNS = ["entry", "piece", "position", "sensor", "day"]
_NS = pd.Timedelta(1, "ns")


def _digest(frame: pd.DataFrame) -> str:
    """A digest of ``frame``'s values, row by row in order (not of its index)."""
    return digest_pairs({"rows": pd.util.hash_pandas_object(frame, index=False)
                         .to_numpy().tobytes().hex()})


@dataclass(frozen=True)
class SensorDay:
    """One trial's inputs: its name ``<sensor>/<YYYY-MM-DD>``, its window rows and its power
    reports (None: none)."""

    name: str
    windows: pd.DataFrame
    power: pd.DataFrame | None

    def fingerprint(self, window: str) -> str:
        """A digest of the ``window`` setting and the rows' values, in order."""
        return digest_pairs({"window": window, "windows": _digest(self.windows),
                             "power": "" if self.power is None else _digest(self.power)})


def sensor_days(table: pd.DataFrame, power: pd.DataFrame | None) -> list[SensorDay]:
    """Per sensor and UTC day of the window table ``table``, in name order, split as
    :func:`joulehouse.taudb.mapping.powerapi.session_trials` splits them: a window by the
    day of its start (windows divide a day), a power report by the day of the tick it ends
    (a report stamped 00:00:00 belongs to the day before)."""
    days = table["window_start"].dt.floor("D")
    reports = {} if power is None else dict(tuple(power.groupby(
        [power["sensor"], (power["timestamp"] - _NS).dt.floor("D")], sort=False)))
    return [SensorDay(f"{sensor}/{day:%Y-%m-%d}", rows, reports.get((sensor, day)))
            for (sensor, day), rows in table.groupby([table["sensor"], days], sort=True)]


def _window_names(rows: pd.DataFrame) -> pd.Series:
    return rows["sensor"].astype(str) + "/" + rows["window_start"].dt.strftime("%Y-%m-%d")


def _power_names(rows: pd.DataFrame) -> pd.Series:
    return rows["sensor"].astype(str) + "/" + (rows["timestamp"] - _NS).dt.strftime("%Y-%m-%d")


@dataclass(frozen=True)
class TrialDays:
    """The sensor-days to (re)load, and what to record once they are loaded.

    ``whole``: why every sensor-day was read ('' when only the changed ones were); ``days``:
    those read, in name order; ``ids``: the trial ids of the sensor-days not read
    (unchanged since the last load); ``read``: every sensor-day read or found changed
    (``pending`` while the run loads them); ``pieces``: the index rows of ``entries``
    now (None: of every entry, replacing the index whole); ``state``: the inputs read."""

    whole: str
    days: list[SensorDay]
    ids: dict[str, int]
    read: frozenset[str]
    pieces: pd.DataFrame
    entries: list[str] | None
    state: changed.State

    def begin(self, tables: Warehouse) -> None:
        """Record, before the first load, what this run rewrites (``pending``)."""
        changed.Pending(whole=bool(self.whole),
                        keys=frozenset((SOURCE, name) for name in self.read)).write(
            tables, STATE_TABLE)

    def commit(self, tables: Warehouse, ids: dict[str, int]) -> None:
        """Record, after the loads, the trials' inputs and ``ids`` (every sensor-day of the
        window table -> its trial): the index, ``days``, ``inputs``, then ``pending``
        removed."""
        entry_table.replace_keys(tables, PIECES_TABLE, self.pieces, None if (
            self.entries is None) else pd.DataFrame({"entry": self.entries}))
        entry_sync.compact_if_due(tables, PIECES_TABLE)
        tables.write_partition(STATE_TABLE, DAYS, pd.DataFrame(
            {"name": pd.Series(list(ids), dtype=object),
             "trial_id": pd.Series(list(ids.values()), dtype="int64")}))
        self.state.write(tables, STATE_TABLE)
        changed.Pending.clear(tables, STATE_TABLE)


def trial_days(tables: Warehouse, landed: Container[str], window: str, taudb_url: str,
               taudb_schema: str | None) -> TrialDays:
    """The sensor-days whose trial may have changed since the last :meth:`TrialDays.commit`
    (every one when there is none, see the module), with the power reports of the stored
    entries ``landed`` (``landing.StillLanded``), for the ``window`` setting, loaded into
    the TAUdb at ``taudb_url`` (its ``taudb_schema``; None: the default)."""
    windows = changed.Snapshot.of(tables, WINDOW_TABLE)
    progress = changed.Snapshot.of(tables, PROGRESS_TABLE)
    landed_files = {name for name in progress.files if partition_key(name) in landed}
    progress = replace(progress, files={name: progress.files[name] for name in landed_files},
                       infos={name: progress.infos[name] for name in landed_files})
    state = changed.State.of(digest_pairs({
        "window": window, "layout": LAYOUT, "source": tables.location(WINDOW_TABLE),
        "taudb": masked_url(taudb_url), "schema": taudb_schema or ""}), [windows, progress])
    previous = _previous(tables, state, windows)
    if isinstance(previous, str):
        return _whole(tables, previous, windows, progress, state)
    consumed, ids, pending = previous
    found = changed.delta_changes(tables, windows, set(consumed.files[WINDOW_TABLE]),
                                  ["sensor"])
    if isinstance(found, str):
        return _whole(tables, found, windows, progress, state)
    entries = changed.partition_changes(progress, consumed.files.get(PROGRESS_TABLE, {}))
    held = _entries_pieces(tables, entries, progress)
    old = entry_table.read_keys(tables, PIECES_TABLE, pd.DataFrame({"entry": entries})) if (
        entries) else pd.DataFrame(columns=PIECE_COLUMNS)
    counted = set(held["piece"])
    added = _piece_days(tables, held[~held["piece"].isin(set(old["piece"]))])
    pieces = pd.concat([old[old["piece"].isin(counted)], added], ignore_index=True)
    names = {*_changed_windows(found), *_power_names_of(old[~old["piece"].isin(counted)]),
             *_power_names_of(added), *(name for _, name in pending.keys)}
    return TrialDays("", _read(tables, windows, names, pieces, entries), {
        name: trial for name, trial in ids.items() if name not in names}, frozenset(names),
        pieces, entries, state)


def _previous(tables: Warehouse, state: changed.State, windows: changed.Snapshot
              ) -> tuple[changed.State, dict[str, int], changed.Pending] | str:
    """The state of the last commit, the trial ids and what a stopped run left pending; or
    why everything is read."""
    try:
        consumed = changed.State.read(tables, STATE_TABLE)
        pending = changed.Pending.read(tables, STATE_TABLE)
        days = tables.read_partitions(STATE_TABLE, [DAYS]) if consumed else None
    except (OSError, ValueError, KeyError) as err:
        return f"the state cannot be read ({err})"
    if consumed is None or days is None:
        return "first run: no state"
    if consumed.digest != state.digest:
        return "the window setting, the TAUdb or the window table's location changed"
    if windows.mode != changed.DELTA or consumed.modes.get(WINDOW_TABLE) != changed.DELTA:
        return "the window table is not kept per entry"
    if not entry_table.is_entry_table(tables, PIECES_TABLE):
        return "the pieces' index is missing"
    if pending.whole:
        return "a whole read stopped before its state"
    return consumed, dict(zip(days["name"], days["trial_id"].astype(int))), pending


def _whole(tables: Warehouse, why: str, windows: changed.Snapshot,
           progress: changed.Snapshot, state: changed.State) -> TrialDays:
    """Every sensor-day, as the step read them before it kept a state: the window table
    whole, the power reports of every stored entry still landed."""
    keys = sorted(partition_key(name) for name in progress.files)
    held = _entries_pieces(tables, keys, progress)
    power = combined("power_reports", [tables.read_partitions(POWER_TABLE, held["piece"])]
                     if len(held) else [])[0]
    days = sensor_days(_windows(tables, windows, None), power)
    return TrialDays(why, days, {}, frozenset(day.name for day in days),
                     _piece_days(tables, held), None, state)


def _entries_pieces(tables: Warehouse, entries: list[str], progress: changed.Snapshot
                    ) -> pd.DataFrame:
    """The counted pieces (``entry``, ``piece``, ``position``) of ``entries`` in the order a
    whole read takes them: those stored and still landed (in ``progress``), each its
    generation's pieces."""
    store = ReportStore(tables)
    landed = {partition_key(name) for name in progress.files}
    rows = [(entry, piece, position) for entry in sorted(entries) if entry in landed
            for position, piece in enumerate(store.progress(entry).piece_keys(entry))]
    return pd.DataFrame(rows, columns=PIECE_COLUMNS[:3]).astype({"position": "int64"})


def _piece_days(tables: Warehouse, pieces: pd.DataFrame) -> pd.DataFrame:
    """The index rows of ``pieces`` (``entry``, ``piece``, ``position``): one per sensor-day
    their power reports hold, from their ``sensor`` and ``timestamp`` columns alone; a piece
    without power reports (an HWPC file's) has one row without sensor and day, so that it
    is not read again."""
    parts = []
    for piece in pieces.itertuples(index=False):
        path = tables.partition_path(POWER_TABLE, piece.piece)
        names = pq.read_schema(path, filesystem=tables.filesystem).names
        power = pq.read_table(path, columns=["sensor", "timestamp"],
                              filesystem=tables.filesystem).to_pandas() if (
            {"sensor", "timestamp"} <= set(names)) else pd.DataFrame()
        days = (_power_names(power).drop_duplicates().str.rpartition("/") if len(power)
                else pd.DataFrame({0: [None], 2: [None]}))
        parts.append(pd.DataFrame({"entry": piece.entry, "piece": piece.piece,
                                   "position": piece.position, "sensor": days[0].to_numpy(),
                                   "day": days[2].to_numpy()}))
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=PIECE_COLUMNS)
    return rows.astype({"entry": object, "piece": object, "position": "int64",
                        "sensor": object, "day": object})


def _power_names_of(pieces: pd.DataFrame) -> set[str]:
    """The sensor-days of index rows (none for a piece without power reports)."""
    held = pieces[pieces["sensor"].notna().to_numpy()]
    return set(held["sensor"].astype(str) + "/" + held["day"].astype(str))


def _changed_windows(found: changed.Changed) -> set[str]:
    """The sensor-days whose window rows differ between the files gone and the new ones."""
    if found.keys.empty:  # no sensor's rows differ (none read: frames without the columns)
        return set()
    before, after = (entry_sync.signatures(rows.assign(_name=_window_names(rows)),
                                           list(rows.columns), "_name")
                     for rows in (found.before, found.after))
    names = before.index.union(after.index)
    differ = (before.reindex(names) != after.reindex(names)).any(axis=1)
    return set(names[differ.to_numpy()])


def _windows(tables: Warehouse, snapshot: changed.Snapshot, where: ds.Expression | None
             ) -> pd.DataFrame:
    """The window table's rows that ``where`` keeps (None: all) as ``snapshot`` (the one
    the state records) found them: its files when the table is kept per entry, though the
    PowerAPI step, which runs beside this one, committed since (a day changed and changed
    back in between would otherwise be loaded from rows no state names); else the whole
    table as it is (``where`` is None there: days are read alone only from a table kept
    per entry, ``_previous``)."""
    if snapshot.mode == changed.DELTA:
        return entry_table.read_where(tables, WINDOW_TABLE, where,
                                      list(snapshot.infos.values()))
    return tables.read_table(WINDOW_TABLE)


def _read(tables: Warehouse, windows: changed.Snapshot, names: set[str],
          pieces: pd.DataFrame, entries: list[str]) -> list[SensorDay]:
    """The sensor-days ``names`` that have windows (in ``windows``, the state's snapshot),
    each with its power reports: those of the index's pieces holding it (``pieces``: the
    rows of ``entries`` now). Both are read by a predicate on sensor and time, per sensor
    from the first day wanted to the last."""
    if not names:
        return []
    wanted = pd.Series(sorted(names)).str.rpartition("/")
    bounds = pd.DataFrame({"sensor": wanted[0], "day": pd.to_datetime(wanted[2], utc=True)}
                          ).groupby("sensor")["day"].agg(["min", "max"])
    start = ds.field("window_start")
    table = _windows(tables, windows, _per_sensor(
        bounds, lambda first, end: (start >= first) & (start < end)))
    table = table[_window_names(table).isin(names).to_numpy()] if len(table) else table
    if table.empty:
        return []
    stored = entry_table.read_where(tables, PIECES_TABLE, ds.field("sensor").isin(
        pa.array(sorted(set(wanted[0])), pa.string())) & ds.field("day").isin(
        pa.array(sorted(set(wanted[2])), pa.string())))
    holders = pd.concat([stored[~stored["entry"].isin(set(entries))], pieces],
                        ignore_index=True) if len(stored) else pieces
    holders = holders[holders["sensor"].astype(str).add("/").add(
        holders["day"].astype(str)).isin(names).to_numpy()]
    ordered = holders.drop_duplicates("piece").sort_values(["entry", "position"])["piece"]
    tick = ds.field("timestamp")  # a report counts for the day of the tick it ends
    power = _power_reports(tables, ordered, _per_sensor(
        bounds, lambda first, end: (tick > first) & (tick <= end)))
    return sensor_days(table, combined("power_reports", [
        rows[_power_names(rows).isin(names).to_numpy()] for rows in power if len(rows)])[0])


def _per_sensor(bounds: pd.DataFrame, term: Callable[[pa.Scalar, pa.Scalar], ds.Expression]
                ) -> ds.Expression:
    """Rows of a sensor of ``bounds`` (its first and last day wanted, ``min`` and ``max``)
    that ``term(the first day's start, the last day's end)`` keeps."""
    terms = [(ds.field("sensor") == sensor) & term(_utc(first), _utc(last + pd.Timedelta(days=1)))
             for sensor, (first, last) in bounds.iterrows()]
    return functools.reduce(operator.or_, terms)


def _power_reports(tables: Warehouse, pieces: Iterable[str], where: ds.Expression
                   ) -> list[pd.DataFrame]:
    """The power reports of each of ``pieces`` that ``where`` keeps, in row order (only the
    row groups whose statistics may hold some are read), each with its stored dtypes."""
    return [pq.read_table(tables.partition_path(POWER_TABLE, piece), filters=where,
                          filesystem=tables.filesystem).to_pandas() for piece in pieces]


def _utc(day: pd.Timestamp) -> pa.Scalar:
    """A UTC time as a scalar of the window table's time columns."""
    return pa.scalar(day.to_pydatetime(), pa.timestamp("us", "UTC"))
