"""Measured and estimated energy per sensor, target, component and time window.

- measured: RAPL energy of the machine-level target (``all``, or ``system``
  in older hwpc-sensor files: :data:`MACHINE_TARGETS`, a setting; a sensor with
  several counts the first, in setting order), summed over sockets, per domain
  (``pkg`` -> component ``cpu``, ``dram`` -> ``dram``, others by name);
- estimated: each power report's power (W) x its tick (s), per target,
  scope (component) and socket, summed over sockets per window (the summed
  window spans the union of the sockets' covered times, its ``covered_s`` is
  the least covered socket's). SmartWatts' own targets
  ``rapl`` (its view of the measurement) and ``global`` (modelled total) are
  estimates too but are left out of the sum of estimates;
- the sum of the cgroup estimates against the measurement, per window:
  ``relative_error = (estimated_total_j - measured_j) / measured_j``.

Each report is the energy (or power) of the tick ending at its timestamp.
The tick is the time since the series' previous report in time order (reports
may be given in any order); the first report's
tick, and that of a report after a gap longer than ``GAP_TICKS`` ticks, is
the sensor's median tick (a gap is time no report covers). Per-tick
energies become a cumulative energy series read at the window edges by
:func:`joulehouse.integrate.counter_energy` (a tick split by a window edge
is shared in proportion to time). A row's ``[window_start, window_end]`` is
its window clipped to the first tick start and the last tick end inside it
(the start and end of a stream, the edges of a gap), and ``covered_s`` is
the time of it that ticks cover: equal to ``duration_s`` unless a gap lies
strictly inside the window. Windows not covered at all give no row.

``energy_facts`` gets only fully covered rows (``covered_s`` =
``duration_s``), over their clipped interval: a fact claims its whole
interval (``joulehouse/facts.py``), so a mean power sum(energy_j) /
sum(duration_s) over facts is right. A window with a gap inside is left
out of the facts rather than given a shorter duration than its interval or
the interval of a time no report measured; it stays in the window table
with its ``covered_s``, so its energy is not lost, only not claimed as a fact.

What gives no row is said by :func:`left_out` (``joulehouse/leftout.py``): RAPL
energy of a target that is not machine-level or of a sensor's second machine-level
target, and a series whose reports all
carry one timestamp when no tick can be taken from elsewhere (no tick length,
so no duration and no energy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.integrate import counter_energy
from joulehouse.leftout import LeftOut
from joulehouse.powerapi import schemas
from joulehouse.timeutil import epoch_ns_to_utc
from joulehouse.validation import validate

FACTS_SOURCE = "powerapi"
#: Names of the machine-level target, whose RAPL energy is the measurement: ``all``
#: (hwpc-sensor) and ``system`` (older hwpc-sensor, PowerAPI's own CSV test files).
MACHINE_TARGETS = ("all", "system")
#: The setting that replaces MACHINE_TARGETS: names separated by commas.
MACHINE_TARGETS_ENV = "JOULEHOUSE_POWERAPI_MACHINE_TARGETS"
#: A report more than this many median ticks after the previous one follows a gap.
GAP_TICKS = 2.0
#: A row is fully covered when covered_s is within this of duration_s (float sums), s.
FULL_COVER_TOLERANCE_S = 1e-6
#: RAPL domain -> energy_facts component.
COMPONENTS = {"pkg": "cpu", "dram": "dram"}


def not_cgroups(targets: tuple[str, ...] = MACHINE_TARGETS) -> frozenset[str]:
    """SmartWatts targets that are not cgroups, left out of the sum of estimates: ``rapl``,
    ``global`` and the machine-level ``targets``."""
    return frozenset({"rapl", "global", *targets})


def target_names(text: str) -> tuple[str, ...]:
    """The machine-level target names of a setting (``all,system``); ValueError if none."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError(f"no machine-level target name in {text!r} (e.g. all,system)")
    return names


def _ns(times: pd.Series) -> np.ndarray:
    return np.asarray(times.values, dtype="datetime64[ns]").view("int64")


def _median_tick_ns(times_ns: np.ndarray) -> float:
    """Median time between distinct report times, whole ns (NaN for fewer than two)."""
    steps = np.diff(np.unique(times_ns))
    return float(np.round(np.median(steps))) if len(steps) else np.nan


def _windows(times_ns: np.ndarray, energy_j: np.ndarray, tick_ns: float,
             window_ns: int) -> pd.DataFrame:
    """Energy (J) of one series of per-tick energies over each window it covers.

    Returns window_start and window_end (UTC: the window clipped to the first
    tick start and the last tick end inside it), energy_j and covered_s (the
    time of ``[window_start, window_end]`` covered by ticks: less than its
    length only when a gap lies strictly inside the window).
    """
    order = np.argsort(times_ns, kind="stable")
    times_ns, energy_j = times_ns[order], energy_j[order]
    steps = np.diff(times_ns)
    tick = int(tick_ns)
    ticks = np.concatenate(([tick], np.where(steps > GAP_TICKS * tick, tick, steps)))
    starts = times_ns - ticks
    # covered stretches between gaps: [segment_starts[i], segment_ends[i]]
    gap = starts[1:] > times_ns[:-1]
    segment_starts = starts[np.concatenate(([True], gap))]
    segment_ends = times_ns[np.concatenate((gap, [True]))]
    # the series as (time, cumulative J) points; a gap is a flat stretch
    points = np.empty(2 * len(times_ns), dtype="int64")
    points[0::2], points[1::2] = starts, times_ns
    cumulative = np.concatenate(([0.0], np.cumsum(energy_j)))
    values = np.empty(2 * len(times_ns))
    values[0::2], values[1::2] = cumulative[:-1], cumulative[1:]
    covered = np.concatenate(([0.0], np.cumsum(ticks / 1e9)))
    keep = np.concatenate(([True], points[1:] > points[:-1]))  # drop a start equal to the last end
    points, values = points[keep], values[keep]
    cover_values = np.empty(2 * len(times_ns))
    cover_values[0::2], cover_values[1::2] = covered[:-1], covered[1:]
    cover_values = cover_values[keep]
    first = points[0] // window_ns * window_ns
    edges = np.arange(first, int(points[-1]) + window_ns, window_ns, dtype="int64")
    lows, highs = _covered_extent(edges[:-1], edges[1:], segment_starts, segment_ends)
    valid = highs > lows
    lows, highs = lows[valid], highs[valid]
    origin = points[0]
    seconds, lows_s, highs_s = ((x - origin) / 1e9 for x in (points, lows, highs))
    energy = counter_energy(seconds, values, lows_s, highs_s, np.inf).energy_j
    covered_s = counter_energy(seconds, cover_values, lows_s, highs_s, np.inf).energy_j
    return pd.DataFrame({
        "window_start": epoch_ns_to_utc(lows),
        "window_end": epoch_ns_to_utc(highs),
        "energy_j": energy,
        "covered_s": np.minimum(covered_s, (highs - lows) / 1e9),  # no float overshoot
    })


def _covered_extent(lows: np.ndarray, highs: np.ndarray, segment_starts: np.ndarray,
                    segment_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each window ``[low, high]`` clipped to the first covered instant and the last one
    inside it (sorted, disjoint segments); an uncovered window comes back empty (high <= low).
    """
    after = np.searchsorted(segment_ends, lows, side="right")  # first segment ending after low
    clipped_lows = np.maximum(lows, segment_starts[np.minimum(after, len(segment_starts) - 1)])
    before = np.searchsorted(segment_starts, highs, side="left") - 1  # last starting before high
    clipped_highs = np.minimum(highs, segment_ends[np.maximum(before, 0)])
    empty = (after >= len(segment_starts)) | (before < 0)
    return clipped_lows, np.where(empty, clipped_lows, clipped_highs)


def machine_level(rapl: pd.DataFrame, targets: tuple[str, ...] = MACHINE_TARGETS
                  ) -> pd.DataFrame:
    """The RAPL rows of each sensor's machine-level target: the first of ``targets``
    (setting order) the sensor has. Another of them is the same machine counted again
    (:func:`left_out` records it)."""
    machine = rapl[rapl["target"].isin(targets)]
    rank = machine["target"].astype(str).map({name: i for i, name in enumerate(targets)})
    first = rank.groupby(machine["sensor"].astype(str)).transform("min")
    return machine[rank == first]


def measured_energy(rapl: pd.DataFrame, window: str = "1min",
                    targets: tuple[str, ...] = MACHINE_TARGETS) -> pd.DataFrame:
    """RAPL energy of each sensor's machine-level target (:func:`machine_level`) per sensor,
    component and window (J); a series of one tick (no tick length) gives no row (see
    :func:`left_out`)."""
    window_ns = pd.Timedelta(window).value
    machine = machine_level(rapl, targets)
    parts = []
    for (sensor, target, domain), series in machine.groupby(["sensor", "target", "domain"],
                                                            sort=True):
        per_tick = series.groupby("timestamp", sort=True)["energy_j"].sum()  # over sockets
        times = _ns(per_tick.index.to_series())
        tick = _median_tick_ns(times)
        if not np.isfinite(tick):
            continue  # one tick: its length is unknown
        energy = _windows(times, per_tick.to_numpy(), tick, window_ns)
        parts.append(energy.assign(sensor=sensor, target=target,
                                   component=COMPONENTS.get(domain, domain)))
    return _table(parts, "measured")


def estimated_energy(power: pd.DataFrame, window: str = "1min",
                     ticks_ns: dict[str, float] | None = None) -> pd.DataFrame:
    """Estimated energy per sensor, target, component and window (J): power x tick.

    ``ticks_ns``: each sensor's median tick in ns (from its HWPC reports);
    a sensor not in it gets the median tick of its own power reports.
    """
    window_ns = pd.Timedelta(window).value
    ticks_ns = ticks_ns or {}
    component = power["scope"].fillna("cpu")
    socket = power["socket"].fillna(-1)
    parts = []
    frame = power.assign(component=component, socket_key=socket)
    for sensor, by_sensor in frame.groupby("sensor", sort=True):
        tick = ticks_ns.get(sensor, _median_tick_ns(_ns(by_sensor["timestamp"])))
        if not np.isfinite(tick):
            continue  # one report and no HWPC tick: its duration is unknown
        per_target = []
        for (target, comp, _), series in by_sensor.groupby(
                ["target", "component", "socket_key"], sort=True):
            # reports may arrive in any order (files read together, newest-first exports)
            series = series.sort_values("timestamp", kind="stable")
            times = _ns(series["timestamp"])
            energy = series["power_w"].to_numpy() * (tick / 1e9)
            steps = np.diff(times)
            energy[1:] = np.where(steps > GAP_TICKS * tick, energy[1:],
                                  series["power_w"].to_numpy()[1:] * steps / 1e9)
            per_target.append(_windows(times, energy, tick, window_ns).assign(
                sensor=sensor, target=target, component=comp))
        # over sockets, per aligned window: a socket's series may cover less of it
        series = pd.concat(per_target)
        series["window"] = _ns(series["window_start"]) // window_ns
        summed = series.groupby(["sensor", "target", "component", "window"], sort=True,
                                as_index=False).agg(
            window_start=("window_start", "min"), window_end=("window_end", "max"),
            energy_j=("energy_j", "sum"), covered_s=("covered_s", "min"))
        parts.append(summed)
    return _table(parts, "estimated")


def _table(parts: list[pd.DataFrame], method: str) -> pd.DataFrame:
    columns = ["sensor", "target", "component", "window_start", "window_end", "energy_j",
               "covered_s"]
    if not parts:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in columns}).assign(
            window_start=pd.DatetimeIndex([], tz="UTC"), window_end=pd.DatetimeIndex([], tz="UTC"),
            energy_j=np.empty(0), covered_s=np.empty(0), method=method)
    return pd.concat(parts, ignore_index=True)[columns].assign(method=method)


def hwpc_ticks_ns(rapl: pd.DataFrame, targets: tuple[str, ...] = MACHINE_TARGETS
                  ) -> dict[str, float]:
    """Each sensor's median tick (ns) from its machine-level target's report times; a
    sensor with one report time has none (its power reports then give their own)."""
    machine = machine_level(rapl, targets)
    ticks = {sensor: _median_tick_ns(_ns(series["timestamp"]))
             for sensor, series in machine.groupby("sensor", sort=True, observed=True)}
    return {sensor: tick for sensor, tick in ticks.items() if np.isfinite(tick)}


def window_energy(rapl: pd.DataFrame | None, power: pd.DataFrame | None,
                  window: str = "1min", targets: tuple[str, ...] = MACHINE_TARGETS
                  ) -> pd.DataFrame:
    """One row per sensor, target, component, window and method, with the estimation error.

    Columns: schemas.WINDOW_ENERGY_COLUMNS. Windows are aligned to multiples
    of ``window`` since the epoch; measured and estimated rows of a window
    share ``measured_j`` (RAPL), ``estimated_total_j`` (sum of the cgroup
    estimates) and ``relative_error``; ``covered_s``: the time of the row's
    interval its ticks cover (an estimate summed over sockets: its least covered
    socket's). ``targets``: the machine-level target names (:data:`MACHINE_TARGETS`).
    What gives no row: :func:`left_out`.
    """
    measured = measured_energy(rapl, window, targets) if rapl is not None else _table(
        [], "measured")
    ticks = hwpc_ticks_ns(rapl, targets) if rapl is not None else {}
    estimated = estimated_energy(power, window, ticks) if power is not None else _table(
        [], "estimated")
    table = pd.concat([measured, estimated], ignore_index=True)
    window_ns = pd.Timedelta(window).value
    table["window"] = _ns(table["window_start"]) // window_ns
    key = ["sensor", "component", "window"]
    totals = (measured.assign(window=_ns(measured["window_start"]) // window_ns)
              .groupby(key)["energy_j"].sum().rename("measured_j"))
    cgroups = estimated[~estimated["target"].isin(not_cgroups(targets))]
    estimates = (cgroups.assign(window=_ns(cgroups["window_start"]) // window_ns)
                 .groupby(key)["energy_j"].sum().rename("estimated_total_j"))
    table = table.join(totals, on=key).join(estimates, on=key)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["relative_error"] = np.where(table["measured_j"] > 0, (
            table["estimated_total_j"] - table["measured_j"]) / table["measured_j"], np.nan)
    table["duration_s"] = (_ns(table["window_end"]) - _ns(table["window_start"])) / 1e9
    return window_rows(table)


def window_rows(table: pd.DataFrame) -> pd.DataFrame:
    """``table``'s window rows (:func:`window_energy`'s, of sensors computed apart, together)
    in the table's order, validated: one row per sensor, component, window, method and target,
    so the order is the same whichever order they came in."""
    table = table.sort_values(["sensor", "component", "window_start", "method", "target"],
                              ignore_index=True)
    for name in ("sensor", "target", "component", "method"):
        table[name] = table[name].astype(str).astype(object)
    return validate(schemas.WINDOW_ENERGY_SCHEMA, table[schemas.WINDOW_ENERGY_COLUMNS],
                    "powerapi_window_energy")


def sensor_input(sensor: str) -> str:
    """The input a left-out record of ``sensor``'s reports names when nothing better is known."""
    return f"sensor {sensor!r}"


def left_out(rapl: pd.DataFrame | None, power: pd.DataFrame | None,
             targets: tuple[str, ...] = MACHINE_TARGETS,
             input_of: Callable[[str], str] = sensor_input) -> list[LeftOut]:
    """What :func:`window_energy` of the same frames leaves out, by sensor: RAPL energy of a
    target not in ``targets`` (not the machine's), of a machine-level target after the
    sensor's first (:func:`machine_level`), a machine-level RAPL series of one tick,
    and a sensor's power reports that all carry one timestamp without a tick from its
    machine-level HWPC reports. The frames do not say which file a report came from:
    ``input_of(sensor)`` names the input (the files or entry the caller read)."""
    records = []
    names = ", ".join(targets)
    if rapl is not None:
        counts = rapl.groupby(["sensor", "target"], sort=True, observed=True)[
            "timestamp"].nunique()
        counted = dict(machine_level(rapl, targets)[["sensor", "target"]].drop_duplicates()
                       .astype(str).itertuples(index=False))
        for (sensor, target), ticks in counts.items():
            if target not in targets:
                records.append(LeftOut(
                    FACTS_SOURCE, input_of(sensor), f"RAPL energy of target {target!r} "
                    f"({ticks} report(s))", f"not a machine-level target ({names}; the "
                    f"setting {MACHINE_TARGETS_ENV})"))
            elif target != counted[sensor]:
                records.append(LeftOut(
                    FACTS_SOURCE, input_of(sensor), f"RAPL energy of target {target!r} "
                    f"({ticks} report(s))", f"also present: counted once, under "
                    f"{counted[sensor]!r}"))
            elif ticks < 2:
                records.append(LeftOut(
                    FACTS_SOURCE, input_of(sensor), f"RAPL energy of target {target!r} "
                    "(1 report)", "one report: no tick length to measure over"))
    ticks_ns = hwpc_ticks_ns(rapl, targets) if rapl is not None else {}
    if power is not None:
        for sensor, reports in power.groupby("sensor", sort=True):
            if reports["timestamp"].nunique() < 2 and not np.isfinite(
                    ticks_ns.get(sensor, np.nan)):
                records.append(LeftOut(
                    FACTS_SOURCE, input_of(sensor), f"power reports ({len(reports)}, "
                    f"targets {', '.join(sorted(map(str, reports['target'].unique())))})",
                    "all carry one timestamp, and no HWPC reports of a machine-level target "
                    "of the sensor give its tick: no tick length, no energy"))
    return records


def energy_facts_rows(table: pd.DataFrame, targets: tuple[str, ...] = MACHINE_TARGETS
                      ) -> pd.DataFrame:
    """``energy_facts`` rows of a window_energy table: one per target, component, window, method.

    ``entity`` is ``<sensor>/<target>``; methods ``measured`` (RAPL) and
    ``estimated`` (power x tick) are separate rows. A formula's estimates of the
    whole machine (:func:`not_cgroups` of the machine-level ``targets``, those the
    table was made with) are left out: the measurement is
    the machine's fact, and with them a source's estimated rows would count the
    machine twice. Only fully covered rows are facts (``covered_s`` =
    ``duration_s``; the interval is already the covered one): a window with a gap
    inside is left out, see the module's docstring. Checked against ENERGY_FACTS_SCHEMA.
    """
    table = table[(table["method"] != "estimated")
                  | ~table["target"].isin(not_cgroups(targets))]
    table = table[table["covered_s"] >= table["duration_s"] - FULL_COVER_TOLERANCE_S]
    facts = pd.DataFrame({
        "source": FACTS_SOURCE,
        "entity": table["sensor"] + "/" + table["target"],
        "component": table["component"],
        "window_start": table["window_start"],
        "window_end": table["window_end"],
        "duration_s": table["duration_s"].astype("float64"),
        "energy_j": table["energy_j"].astype("float64"),
        "method": table["method"],
    }, columns=ENERGY_FACTS_COLUMNS)
    facts = facts.sort_values(["entity", "component", "window_start", "method"],
                              ignore_index=True)
    return validate(ENERGY_FACTS_SCHEMA, facts, "energy_facts")
