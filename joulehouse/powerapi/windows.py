"""The window table (``powerapi_window_energy``) kept per sensor, and which partition holds
which sensor.

A window may straddle files, and a sensor's windows depend on every report of the sensor
(its median tick, taken over all of them, is the tick of a first report and of one after
a gap: ``joulehouse/powerapi/energy.py``), but on no other sensor's. So a run over some
partitions recomputes the sensors their reports hold, now or before the run, from the
stored frames of every registered partition holding them, and replaces those sensors' rows
in one commit (a sensor no longer given loses its rows); cost: the touched sensors'
reports, whatever other sensors are stored (issue 28). Which partition holds which sensor
is the table ``SENSORS_TABLE`` (``partition``, ``sensor``), kept per partition.

Both tables are kept per entry (``joulehouse/entry_table.py``). A refresh without touched
partitions, or before the sensors table exists (a warehouse written before), rebuilds
both from every stored registered partition. Either way the window table equals
:func:`energy.window_energy` over every stored registered partition's frames together:
a report stored by two partitions counts once there and here (both read every partition
holding its sensor).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pandas as pd

from joulehouse import entry_sync, entry_table
from joulehouse.powerapi.energy import window_energy
from joulehouse.powerapi.stream import FRAME_SCHEMAS, FRAMES_TABLE, ReportStore
from joulehouse.validation import validate
from joulehouse.warehouse import Warehouse

WINDOW_TABLE = "powerapi_window_energy"
#: Which stored partition holds reports of which sensor: one row per pair.
SENSORS_TABLE = f"{FRAMES_TABLE}/sensors"
#: The frames the window table is computed from.
FRAMES = ("rapl_energy", "power_reports")


@dataclass(frozen=True)
class Refreshed:
    """What a refresh wrote: the window rows of the ``sensors`` it recomputed (those without
    rows now lost theirs; None: every sensor, the table replaced whole), the partitions
    it read, and the reports given twice (by two partitions) it kept once, per frame."""

    rows: pd.DataFrame
    sensors: list[str] | None
    partitions: int
    given_twice: dict[str, int]


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


def refresh(tables: Warehouse, registered: Collection[str], touched: Collection[str] | None,
            window: str, targets: tuple[str, ...]) -> Refreshed:
    """Recompute the window rows of the sensors of the partitions ``touched`` (None: every
    sensor) from every stored ``registered`` partition holding them, write them and the
    touched partitions' sensors, one commit each (a touched partition no longer
    registered, deleted from Dagster, holds none now: its sensors are recomputed without
    it). A rebuild with no partition stored writes nothing (no sensor recomputed)."""
    store = ReportStore(tables)
    if touched is None or not entry_table.is_entry_table(tables, SENSORS_TABLE):
        keys = [key for key in store.stored_keys() if key in registered]
        if not keys:  # nothing to rebuild from: what is stored stays
            return Refreshed(pd.DataFrame(), [], 0, dict.fromkeys(FRAMES, 0))
        frames = {key: _frames(store, key) for key in keys}
        parts = {name: [frames[key][name] for key in keys] for name in FRAMES}
        return _write(tables, parts, None, _held(frames), keys, window, targets)
    run = [key for key in touched if key in registered and store.progress(key) is not None]
    owners = sorted({*run, *(key for key in touched if key not in registered)})
    frames = {key: _frames(store, key) for key in run}
    held = entry_table.read_keys(tables, SENSORS_TABLE, pd.DataFrame({"partition": owners})) if (
        owners) else pd.DataFrame()
    sensors = sorted({*_sensors(frames), *(held["sensor"] if len(held) else ())})
    holders = entry_table.read_keys(tables, SENSORS_TABLE, pd.DataFrame({"sensor": sensors})) if (
        sensors) else pd.DataFrame()
    # every partition holding them, read together in key order, as a rebuild reads them:
    # where one report time is given twice with other values (both kept), the order
    # decides the ticks
    keys = sorted({*run, *(key for key in (holders["partition"] if len(holders) else ())
                           if key in registered)})
    parts = {name: [store.read(name, keys)] if keys else [] for name in FRAMES}
    return _write(tables, parts, sensors, _held(frames), owners, window, targets, len(keys))


def _frames(store: ReportStore, key: str) -> dict[str, pd.DataFrame]:
    return {name: store.read(name, [key]) for name in FRAMES}


def _sensors(frames: dict[str, dict[str, pd.DataFrame]]) -> set[str]:
    return {str(sensor) for parts in frames.values() for frame in parts.values() if len(frame)
            for sensor in frame["sensor"].unique()}


def _held(frames: dict[str, dict[str, pd.DataFrame]]) -> pd.DataFrame:
    """The sensors each partition of ``frames`` (partition -> frame name -> frame) holds."""
    return pd.DataFrame([(key, sensor) for key in sorted(frames)
                         for sensor in sorted(_sensors({key: frames[key]}))],
                        columns=["partition", "sensor"], dtype=object)


def _write(tables: Warehouse, parts: dict[str, list[pd.DataFrame]], sensors: list[str] | None,
           held: pd.DataFrame, owners: list[str], window: str, targets: tuple[str, ...],
           read: int | None = None) -> Refreshed:
    """Compute the window rows of ``sensors`` (None: all) from ``parts`` (frame name -> the
    stored frames, in key order), replace them, then make ``held`` the sensors of the
    partitions ``owners`` (None sensors: the tables replaced whole); ``read``: the
    partitions read (default: ``owners``)."""
    together, twice = {}, {}
    for name in FRAMES:
        frames = parts[name]
        if sensors is not None:
            frames = [part[part["sensor"].astype(str).isin(sensors)] for part in frames
                      if len(part)]
        together[name], twice[name] = combined(name, frames)
    rows = window_energy(together["rapl_energy"], together["power_reports"], window, targets)
    entry_table.replace_keys(tables, WINDOW_TABLE, rows,
                             None if sensors is None else pd.DataFrame({"sensor": sensors}))
    entry_sync.compact_if_due(tables, WINDOW_TABLE)
    if owners:
        entry_table.replace_keys(tables, SENSORS_TABLE, held,
                                 None if sensors is None else pd.DataFrame({"partition": owners}))
        entry_sync.compact_if_due(tables, SENSORS_TABLE)
    return Refreshed(rows, sensors, len(owners) if read is None else read, twice)
