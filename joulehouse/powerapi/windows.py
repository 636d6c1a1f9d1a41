"""The window table (``powerapi_window_energy``) kept per sensor, and which partition holds
which sensor.

A window may straddle files, and a sensor's windows depend on every report of the sensor
(its median tick, taken over all of them, is the tick of a first report and of one after
a gap: ``joulehouse/powerapi/energy.py``), but on no other sensor's. So a run over some
partitions recomputes the sensors their reports hold, now or before the run, from the
stored frames of every registered partition holding them, and replaces those sensors' rows
in one commit (a sensor no longer given loses its rows); cost: the touched sensors'
reports, whatever other sensors are stored (issue 28). Which partition holds which sensor
is the table ``SENSORS_TABLE`` (``partition``, ``sensor``), kept per partition; it never
lacks a holder, whatever commit of a refresh a stop prevents (it may hold a pair too many
until the partition's next run or a rebuild, which costs a read and changes no row):
:func:`refresh` adds a run's new pairs before it writes the rows, :func:`settle` drops its
old ones after the rows and their facts.

A sensor that one registered partition alone holds is not computed again where that
partition's own energy (``joulehouse/powerapi/report_energy.py``) was computed from the
frames read now, with the same window and targets: its rows are taken from there, the same
rows (``window_energy`` computes each sensor from its own reports alone), so a landing of
new sensors costs a read of what its entries stored, not a second computation.

Both tables are kept per entry (``joulehouse/entry_table.py``). A refresh without touched
partitions, or before the sensors table exists (a warehouse written before), rebuilds
both from every stored registered partition. The window table equals
:func:`energy.window_energy` over every stored registered partition's frames together,
sensor by sensor as of the sensor's last recompute: a report stored by two partitions
counts once there and here (both read every partition holding its sensor); a partition
that stopped being registered (its file removed) still counts in its sensors' rows until
one of them is recomputed (a run over a partition holding it) or every sensor is (a run
without partitions).

A *partition* here is a landed entry (``<landing name>/<entry name>``: a Dagster partition
of its own before the days, ``assets/powerapi.py``; the sensors table's column keeps the
name), and the *registered* ones are the stored entries still current (still in their
landing folder: ``assets.powerapi.stored_keys``).
"""

from __future__ import annotations

from collections.abc import Collection, Container
from dataclasses import dataclass, field

import pandas as pd

from joulehouse import entry_sync, entry_table
from joulehouse.powerapi import report_energy
from joulehouse.powerapi.energy import window_energy, window_rows
from joulehouse.powerapi.stream import FRAME_SCHEMAS, FRAMES_TABLE, Progress, ReportStore
from joulehouse.validation import validate
from joulehouse.warehouse import Warehouse

WINDOW_TABLE = "powerapi_window_energy"
#: Which stored partition holds reports of which sensor: one row per pair.
SENSORS_TABLE = f"{FRAMES_TABLE}/sensors"
#: The frames the window table is computed from.
FRAMES = ("rapl_energy", "power_reports")


#: Pairs of the sensors table: (partition, sensor).
Pairs = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Refreshed:
    """What a refresh wrote: the window rows of the ``sensors`` it recomputed (those without
    rows now lost theirs; None: every sensor, the table replaced whole), the partitions
    it read, and the reports given twice (by two partitions) it kept once, per frame; and
    for :func:`settle`, the sensors table's pairs of the partitions ``owners`` (those it
    holds for them now, and the exact ones)."""

    rows: pd.DataFrame
    sensors: list[str] | None
    partitions: int
    given_twice: dict[str, int]
    owners: list[str] = field(default_factory=list)
    stored: Pairs = frozenset()
    exact: Pairs = frozenset()


def combined(name: str, frames: list[pd.DataFrame]) -> tuple[pd.DataFrame | None, int]:
    """The stored frames ``name`` of several partitions as one (None when it has no rows),
    validated, and how many rows were given twice: the same report stored by two
    partitions is kept once; a report given twice with different values stays, and the
    schema's uniqueness check refuses it."""
    frames = [frame for frame in frames if len(frame)]
    if not frames:
        return None, 0
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    once = frame.drop_duplicates(ignore_index=True)
    return validate(FRAME_SCHEMAS[name], once, f"{FRAMES_TABLE}/{name}"), len(frame) - len(once)


def refresh(tables: Warehouse, registered: Container[str], touched: Collection[str] | None,
            window: str, targets: tuple[str, ...]) -> Refreshed:
    """Recompute the window rows of the sensors of the partitions ``touched`` (None: every
    sensor) from every stored ``registered`` partition holding them and write them, one commit
    (a touched partition no longer registered, its file removed, holds none now: its
    sensors are recomputed without it). Before it, where the touched partitions hold a
    sensor the sensors table lacks, one commit makes it hold their pairs before and after
    the run (their union); :func:`settle` makes it exact once the rows and facts are
    written. So the table never lacks a holder of a sensor, whatever commit of these a stop
    prevents: a later run over a partition sharing it reads every partition holding it (a
    partition holding it no more gives no rows of it). A rebuild with no partition stored
    and registered (every file removed) empties both tables, where they exist."""
    store = ReportStore(tables)
    if touched is None or not entry_table.is_entry_table(tables, SENSORS_TABLE):
        keys = [key for key in store.stored_keys() if key in registered]
        progress = {key: store.progress(key) for key in keys}
        frames = {key: _frames(store, key, progress) for key in keys}
        parts = {name: [frames[key][name] for key in keys] for name in FRAMES}
        stored = entry_table.read(tables, SENSORS_TABLE) if entry_table.is_entry_table(
            tables, SENSORS_TABLE) else pd.DataFrame()
        exact = _held(frames)
        # a run without partitions is the reference and the repair: every sensor computed
        # from the frames; the first run over partitions may take entries' own energy
        reused = None if touched is None else _reused(tables, progress, exact, exact, window,
                                                      targets)
        return _write(tables, parts, None, _pairs(stored), exact, keys, window, targets,
                      reused=reused)
    progress = {key: store.progress(key) for key in touched if key in registered}
    progress = {key: read for key, read in progress.items() if read is not None}
    run = [key for key in touched if key in progress]
    owners = sorted({*run, *(key for key in touched if key not in registered)})
    frames = {key: _frames(store, key, progress) for key in run}
    held = entry_table.read_keys(tables, SENSORS_TABLE, pd.DataFrame({"partition": owners})) if (
        owners) else pd.DataFrame()
    sensors = sorted({*_sensors(frames), *(held["sensor"] if len(held) else ())})
    holders = entry_table.read_keys(tables, SENSORS_TABLE, pd.DataFrame({"sensor": sensors})) if (
        sensors) else pd.DataFrame()
    # every partition holding them, in key order, as a rebuild reads them: where one report
    # time is given twice with other values (both kept), the order decides the ticks
    exact = _held(frames)
    holding = {(key, sensor) for key, sensor in _pairs(holders) if key in registered} | exact
    keys = sorted({*run, *(key for key, _ in holding)})
    frames.update({key: _frames(store, key) for key in keys if key not in frames})
    parts = {name: [frames[key][name] for key in keys] for name in FRAMES}
    reused = _reused(tables, progress, holding, exact, window, targets)
    return _write(tables, parts, sensors, _pairs(held), exact, owners, window, targets,
                  len(keys), reused)


def _reused(tables: Warehouse, progress: dict[str, Progress], holding: Pairs, exact: Pairs,
            window: str, targets: tuple[str, ...]) -> pd.DataFrame:
    """The window rows of the sensors that one partition alone holds (``holding``: every
    holder's pairs) where the run's read of it (``exact``, ``progress``) is what its own
    energy was computed from (``report_energy.current``): those rows, row for row, as
    ``window_energy`` computes them; no rows, no columns: none."""
    holders: dict[str, set[str]] = {}
    for key, sensor in holding:
        holders.setdefault(sensor, set()).add(key)
    alone = {sensor: key for sensor, keys in holders.items() if len(keys) == 1
             for key in keys if (key, sensor) in exact}
    fresh, rows = report_energy.current(tables, progress, sorted(set(alone.values())), window,
                                        targets)
    current = set(fresh)
    reused = [sensor for sensor, key in alone.items() if key in current]
    return rows[rows["sensor"].isin(reused)] if len(rows) else rows


def _frames(store: ReportStore, key: str, progress: dict[str, Progress] | None = None
            ) -> dict[str, pd.DataFrame]:
    return {name: store.read(name, [key], progress) for name in FRAMES}


def _sensors(frames: dict[str, dict[str, pd.DataFrame]]) -> set[str]:
    return {str(sensor) for parts in frames.values() for frame in parts.values() if len(frame)
            for sensor in frame["sensor"].unique()}


def _held(frames: dict[str, dict[str, pd.DataFrame]]) -> Pairs:
    """The sensors each partition of ``frames`` (partition -> frame name -> frame) holds."""
    return frozenset((key, sensor) for key in frames for sensor in _sensors({key: frames[key]}))


def _pairs(rows: pd.DataFrame) -> Pairs:
    """The pairs of rows of the sensors table."""
    return frozenset(zip(rows["partition"], rows["sensor"])) if len(rows) else frozenset()


def _rows(pairs: Pairs) -> pd.DataFrame:
    """Rows of the sensors table, in order."""
    return pd.DataFrame(sorted(pairs), columns=["partition", "sensor"], dtype=object)


def _write(tables: Warehouse, parts: dict[str, list[pd.DataFrame]], sensors: list[str] | None,
           stored: Pairs, exact: Pairs, owners: list[str], window: str,
           targets: tuple[str, ...], read: int | None = None,
           reused: pd.DataFrame | None = None) -> Refreshed:
    """Compute the window rows of ``sensors`` (None: all) from ``parts`` (frame name -> the
    stored frames, in key order), but for those of the rows ``reused`` (their rows as
    ``window_energy`` gives them: :func:`_reused`); where ``exact`` (the pairs of the
    partitions ``owners``) has one that ``stored`` (theirs in the sensors table; None
    sensors: every row) lacks, make the table hold both; then replace the rows. ``read``:
    the partitions read (default: ``owners``)."""
    together, twice = {}, {}
    for name in FRAMES:
        frames = parts[name]
        if sensors is not None:
            frames = [part[part["sensor"].astype(str).isin(sensors)] for part in frames
                      if len(part)]
        together[name], twice[name] = combined(name, frames)
    if reused is None or not len(reused):
        rows = window_energy(together["rapl_energy"], together["power_reports"], window,
                             targets)
    else:
        rest = [_without(together[name], set(reused["sensor"]))
                for name in ("rapl_energy", "power_reports")]
        computed = [window_energy(*rest, window, targets)] if any(
            frame is not None for frame in rest) else []
        rows = window_rows(pd.concat([*computed, reused], ignore_index=True))
    refreshed = Refreshed(rows, sensors, len(owners) if read is None else read, twice,
                          owners, stored | exact, exact)
    if not exact <= stored:
        _write_pairs(tables, refreshed, refreshed.stored)
    entry_table.replace_keys(tables, WINDOW_TABLE, rows,
                             None if sensors is None else pd.DataFrame({"sensor": sensors}))
    entry_sync.compact_if_due(tables, WINDOW_TABLE)
    return refreshed


def _without(frame: pd.DataFrame | None, sensors: set[str]) -> pd.DataFrame | None:
    """``frame``'s rows of the sensors not in ``sensors`` (None: none)."""
    if frame is None:
        return None
    frame = frame[~frame["sensor"].astype(str).isin(sensors)]
    return frame if len(frame) else None


def settle(tables: Warehouse, refreshed: Refreshed) -> None:
    """Make the sensors table hold exactly the pairs of the partitions ``refreshed`` wrote
    (every pair after a rebuild), once their window rows and facts are written: a
    partition that holds a sensor no more drops it (nothing written where none does)."""
    if refreshed.stored != refreshed.exact:
        _write_pairs(tables, refreshed, refreshed.exact)


def _write_pairs(tables: Warehouse, refreshed: Refreshed, pairs: Pairs) -> None:
    """Make ``pairs`` the sensors table's rows of ``refreshed``'s partitions, one commit."""
    entry_table.replace_keys(tables, SENSORS_TABLE, _rows(pairs), None if (
        refreshed.sensors is None) else pd.DataFrame({"partition": refreshed.owners}))
    entry_sync.compact_if_due(tables, SENSORS_TABLE)
