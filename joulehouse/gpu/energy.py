"""Energy of one repetition per window, measured four ways.

Windows: the whole experiment (``experiment_begin``..``experiment_end``),
training (``train_begin``..``train_end``) and each epoch (``epoch_begin`` /
``epoch_end`` paired by their ``data`` index; an unpaired event is left
out). Batch events are too short for a counter that updates every ~100 ms
and are not windows here.

Methods, each in J over the window:

- ``counter``: delta of gpu-power's ``total_energy_j``, aware of resets;
- ``power``: trapezoid of gpu-power's ``power_w``;
- ``samples``: trapezoid of the ~50 Hz ``total_power`` samples;
- ``external``: trapezoid of the external meter's ``external_power_w``.

``gpu_energy_j`` is the preferred GPU figure (counter, else power); the
energy-delay product ``edp_js`` uses it. Mean powers are energy / duration.
Disagreement is ``(method - counter) / counter`` in %.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
from joulehouse.facts_entries import Ownership
from joulehouse.gpu.layout import is_root_name, root_name
from joulehouse.gpu.readers import Repetition
from joulehouse.integrate import counter_energy, trapezoid_energy
from joulehouse.leftout import LeftOut
from joulehouse.timeutil import epoch_ns_to_utc, seconds_since
from joulehouse.validation import validate

FACTS_SOURCE = "gpu-benchmark"
#: A repetition (its partition key) owns one entity in energy_facts, its key
#: (:func:`energy_facts_rows`; ``joulehouse.facts_entries``).
FACTS_OWNERSHIP = Ownership(prefix=lambda key: key, owner_of=lambda entity: entity)


@dataclass(frozen=True)
class Method:
    """One way of measuring energy, and the column names it fills."""

    name: str
    energy: str
    mean_power: str
    component: str

    @property
    def gap_count(self) -> str:
        return f"{self.name}_gap_count"

    @property
    def gap_s(self) -> str:
        return f"{self.name}_gap_s"


METHODS = (
    Method("counter", "gpu_energy_counter_j", "gpu_mean_power_counter_w", "gpu"),
    Method("power", "gpu_energy_power_j", "gpu_mean_power_power_w", "gpu"),
    Method("samples", "gpu_energy_samples_j", "gpu_mean_power_samples_w", "gpu"),
    Method("external", "external_energy_j", "external_mean_power_w", "external"),
)

SETTINGS_COLUMNS = ["label", "memory_clock_mhz", "sm_clock_mhz", "power_limit_w"]
KEY_COLUMNS = ["data_root", "repetition", "experiment", "benchmark", "run", *SETTINGS_COLUMNS]
WINDOW_COLUMNS = ["phase", "epoch", "window_start", "window_end", "duration_s"]
REPETITION_ENERGY_COLUMNS = [
    *KEY_COLUMNS,
    *WINDOW_COLUMNS,
    *(m.energy for m in METHODS),
    "gpu_energy_j",
    "gpu_energy_method",
    *(m.mean_power for m in METHODS),
    "edp_js",
    "power_vs_counter_pct",
    "samples_vs_counter_pct",
    "counter_resets",
    *(col for m in METHODS for col in (m.gap_count, m.gap_s)),
]
def _windows(timestamps: pd.DataFrame) -> list[tuple[str, int | None, int, int]]:
    """(phase, epoch, start, end) for the experiment, training and each epoch.

    ``start`` and ``end`` are UTC ns since the epoch. A phase runs from the
    first begin event to the last end event; epochs pair ``epoch_begin`` and
    ``epoch_end`` by their ``data`` index.
    """
    events = timestamps["event"].to_numpy()
    times = np.asarray(timestamps["time"].values, dtype="datetime64[ns]").view("int64")  # UTC
    data = timestamps["data"].to_numpy()

    def first(event: str) -> dict[int, int]:
        chosen = events == event
        return dict(zip(data[chosen][::-1].tolist(), times[chosen][::-1].tolist(), strict=True))

    def last(event: str) -> dict[int, int]:
        chosen = events == event
        return dict(zip(data[chosen].tolist(), times[chosen].tolist(), strict=True))

    windows = [("experiment", None, int(times[events == "experiment_begin"].min()),
                int(times[events == "experiment_end"].max()))]
    train_begin, train_end = events == "train_begin", events == "train_end"
    if train_begin.any() and train_end.any():
        windows.append(("train", None, int(times[train_begin].min()),
                        int(times[train_end].max())))
    begins, ends = first("epoch_begin"), last("epoch_end")
    windows += [("epoch", int(epoch), begins[epoch], ends[epoch])
                for epoch in sorted(begins.keys() & ends.keys()) if ends[epoch] >= begins[epoch]]
    return windows


def _series(
    frame: pd.DataFrame | None, column: str, origin: pd.Timestamp,
    cache: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(seconds since origin, values) of the rows where ``column`` has a value.

    ``cache`` (one per frame) keeps the frame's seconds for its next column.
    """
    if frame is None or column not in frame.columns:
        return None
    values = frame[column].to_numpy(dtype="float64")
    if cache is None:
        seconds = seconds_since(frame["time"], origin)
    elif "seconds" in cache:
        seconds = cache["seconds"]
    else:
        seconds = cache["seconds"] = seconds_since(frame["time"], origin)
    present = ~np.isnan(values)
    if present.all():
        return seconds, values
    return (seconds[present], values[present]) if present.any() else None


def _percent(value: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """How far ``value`` is from ``reference``, in % of it (NaN without a reference)."""
    return np.where(reference > 0, (value - reference) / reference * 100.0, np.nan)


def repetition_energy(rep: Repetition, *, data_root: str | None = None,
                      max_gap_s: float = 5.0) -> pd.DataFrame:
    """One row per window (experiment, train, each epoch) with every method's energy.

    Columns: REPETITION_ENERGY_COLUMNS; ``data_root`` is the name of the
    repetition's data root (the partition key prefix), by default its folder's
    name (``layout.root_name``); an empty name is refused (ValueError). A
    method whose source is missing has NaN energy and NA gaps; gaps longer
    than ``max_gap_s`` are not bridged.
    Callers that store or print the table check it against
    REPETITION_ENERGY_SCHEMA (the asset per partition, the CLI once for all).
    """
    if data_root is None:
        data_root = root_name(rep.ref.data_root)
    elif not is_root_name(data_root):
        raise ValueError(f"data_root must name the data root, not be empty or hold '/': "
                         f"{data_root!r}")
    windows = _windows(rep.timestamps)
    origin = pd.Timestamp(windows[0][2], unit="ns", tz="UTC")
    gpu_seconds: dict[str, np.ndarray] = {}  # gpu-power's times, converted once for both
    series = {
        "counter": _series(rep.gpu_power, "total_energy_j", origin, gpu_seconds),
        "power": _series(rep.gpu_power, "power_w", origin, gpu_seconds),
        "samples": _series(rep.power_samples, "power_w", origin),
        "external": _series(rep.external_power, "external_power_w", origin),
    }
    settings = rep.settings
    key = {
        "data_root": data_root,
        "repetition": rep.ref.key,
        "experiment": rep.ref.experiment,
        "benchmark": rep.ref.benchmark,
        "run": rep.ref.run,
        "label": settings.label,
        "memory_clock_mhz": settings.memory_clock_mhz,
        "sm_clock_mhz": settings.sm_clock_mhz,
        "power_limit_w": settings.power_limit_w,
    }
    starts_ns = np.array([w[2] for w in windows], dtype="int64")
    ends_ns = np.array([w[3] for w in windows], dtype="int64")
    starts, ends = epoch_ns_to_utc(starts_ns), epoch_ns_to_utc(ends_ns)
    t0, t1 = seconds_since(starts, origin), seconds_since(ends, origin)
    duration = t1 - t0
    count = len(windows)
    missing, missing_count = np.full(count, np.nan), pd.array([None] * count, dtype="Int64")
    columns: dict[str, Any] = {
        name: [value] * count for name, value in key.items()
        if name not in ("memory_clock_mhz", "sm_clock_mhz", "power_limit_w")
    }
    columns |= {
        "memory_clock_mhz": pd.array([settings.memory_clock_mhz] * count, dtype="Int64"),
        "sm_clock_mhz": pd.array([settings.sm_clock_mhz] * count, dtype="Int64"),
        "power_limit_w": np.full(count, np.nan if settings.power_limit_w is None
                                 else settings.power_limit_w, dtype="float64"),
        "phase": [w[0] for w in windows],
        "epoch": pd.array([w[1] for w in windows], dtype="Int64"),
        "window_start": starts,
        "window_end": ends,
        "duration_s": duration,
        "counter_resets": missing_count,
    }
    with np.errstate(invalid="ignore", divide="ignore"):
        for method in METHODS:
            data = series[method.name]
            if data is None:  # source missing
                columns |= {method.energy: missing, method.mean_power: missing,
                            method.gap_count: missing_count, method.gap_s: missing}
                continue
            integrate = counter_energy if method.name == "counter" else trapezoid_energy
            result = integrate(*data, t0, t1, max_gap_s)
            columns |= {
                method.energy: result.energy_j,
                method.mean_power: np.where(duration > 0, result.energy_j / duration, np.nan),
                method.gap_count: _int64(result.gap_count),
                method.gap_s: result.gap_s,
            }
            if method.name == "counter":
                columns["counter_resets"] = _int64(result.counter_resets)
        counter = columns["gpu_energy_counter_j"]
        use_counter = ~np.isnan(counter)
        columns["gpu_energy_method"] = np.where(use_counter, "counter", "power")
        columns["gpu_energy_j"] = np.where(use_counter, counter, columns["gpu_energy_power_j"])
        columns["edp_js"] = columns["gpu_energy_j"] * duration
        columns["power_vs_counter_pct"] = _percent(columns["gpu_energy_power_j"], counter)
        columns["samples_vs_counter_pct"] = _percent(columns["gpu_energy_samples_j"], counter)
    return pd.DataFrame({name: columns[name] for name in REPETITION_ENERGY_COLUMNS})


def _int64(values: np.ndarray) -> pd.arrays.IntegerArray:
    """A nullable Int64 array of int values without NA (no per-value conversion)."""
    values = np.asarray(values, dtype="int64")
    return pd.arrays.IntegerArray(values, np.zeros(len(values), dtype=bool))


def energy_facts_rows(per_repetition: pd.DataFrame) -> pd.DataFrame:
    """The ``energy_facts`` rows of GPU benchmarks: experiment windows, one row per method.

    ``entity`` is the repetition's partition key, ``<data_root>/<repetition>``.
    Methods without a value (source missing) give no row, and neither do
    methods with unbridged gaps in the window (``{method}_gap_count > 0``):
    their energy leaves out the gaps, and a fact covers its whole window.
    Rows are checked
    against ENERGY_FACTS_SCHEMA (InputError naming ``energy_facts``).
    """
    experiment = per_repetition[per_repetition["phase"] == "experiment"]
    parts = [
        pd.DataFrame(
            {
                "source": FACTS_SOURCE,
                "entity": experiment["data_root"] + "/" + experiment["repetition"],
                "component": method.component,
                "window_start": experiment["window_start"],
                "window_end": experiment["window_end"],
                "duration_s": experiment["duration_s"].astype("float64"),
                "energy_j": experiment[method.energy].astype("float64"),
                "method": method.name,
            },
            columns=ENERGY_FACTS_COLUMNS,
        )[~(experiment[method.gap_count].fillna(0) > 0).to_numpy()].dropna(subset=["energy_j"])
        for method in METHODS
    ]
    parts = [part for part in parts if len(part)] or [pd.DataFrame(columns=ENERGY_FACTS_COLUMNS)]
    facts = pd.concat(parts, ignore_index=True)
    facts = facts.sort_values(["entity", "component", "method"], ignore_index=True)
    return validate(ENERGY_FACTS_SCHEMA, facts, "energy_facts") if len(facts) else facts


#: Where each method's readings come from, as a left-out record names it.
METHOD_SOURCES = {"counter": "total_energy_j of gpu-power.csv",
                  "power": "power_w of gpu-power.csv",
                  "samples": "total_power_samples.csv",
                  "external": "power-external.csv"}


def left_out(per_repetition: pd.DataFrame, repetition_folder: str) -> list[LeftOut]:
    """What :func:`energy_facts_rows` leaves out of one repetition's energy
    (:func:`repetition_energy`, read from ``repetition_folder``): one record per method of
    its experiment window that gives no fact, either its source missing (no value) or
    unbridged gaps in the window (a fact covers its whole window)."""
    records = []
    for row in per_repetition[per_repetition["phase"] == "experiment"].to_dict("records"):
        for method in METHODS:
            gaps = row[method.gap_count]
            if pd.isna(row[method.energy]):
                why = f"no readings: {METHOD_SOURCES[method.name]} missing or empty"
            elif not pd.isna(gaps) and gaps > 0:
                why = (f"{gaps} unbridged gap(s), {row[method.gap_s]:g} s of "
                       f"{row['duration_s']:g} s: a fact covers its whole window")
            else:
                continue
            records.append(LeftOut(FACTS_SOURCE, repetition_folder,
                                   f"its {method.name} energy_facts row", why))
    return records
