"""A GPU benchmark run (one setting folder) as a TAUdb trial; ``docs/taudb-mapping.md``.

The run ``data-root/experiment/benchmark/run`` becomes the trial
``experiment/benchmark/run``. Its threads are its repetitions (node = the
repetition's position in key order, context 0, thread 0), so TAU's MEAN and
STDDEV threads are statistics over repetitions. Timers are the windows of
:func:`~joulehouse.gpu.energy.repetition_energy` as callpaths
(``experiment``, ``experiment => train``, ``experiment => train => epoch N``;
epochs hang under ``experiment`` when there is no train window), each with
1 call and its children as subroutines. Metrics: ``TIME`` (µs) and the
energy methods in J; exclusive = inclusive minus the children's inclusive.
User events: power, clocks, temperature and utilisation samples inside the
experiment window. Metadata per repetition: its key and fingerprint, its
window, the run's settings and the flattened ``system_info.json``.

Values come from the core (``read_repetition``, ``repetition_energy``);
nothing is parsed or integrated here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulehouse.digest import digest_pairs
from joulehouse.errors import InputError
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.layout import fingerprint, run_repetitions
from joulehouse.gpu.readers import POWER_SAMPLES, Repetition, read_repetition
from joulehouse.gpu.store import SAMPLES_PREFIX
from joulehouse.taudb.model import CALLPATH_SEPARATOR, DATA_SOURCE_OTHER, THREAD_COLUMNS, TrialData

TIME_METRIC = "TIME"
#: ``repetition_energy`` column (J) -> metric name. A metric is kept when
#: every window of every repetition of the run has a value (its source exists).
ENERGY_METRICS = {
    "gpu_energy_counter_j": "GPU_ENERGY_COUNTER (J)",
    "gpu_energy_power_j": "GPU_ENERGY_POWER (J)",
    "gpu_energy_samples_j": "GPU_ENERGY_SAMPLES (J)",
    "external_energy_j": "EXTERNAL_ENERGY (J)",
}
PHASE_GROUP = "TAU_PHASE"
EXPERIMENT = "experiment"
TRAIN = EXPERIMENT + CALLPATH_SEPARATOR + "train"
#: ``system_info.json`` keys holding the installed packages: kept as one value.
PACKAGE_KEYS = ("python_packages", "packages", "installed_packages")


@dataclass(frozen=True)
class Counter:
    """A TAU user event: one column of one frame of a repetition."""

    name: str
    frame: str  # attribute of Repetition
    column: str


COUNTERS = (
    Counter("GPU_POWER (W)", "gpu_power", "power_w"),
    Counter("GPU_POWER_SAMPLES (W)", "power_samples", "power_w"),
    Counter("EXTERNAL_POWER (W)", "external_power", "external_power_w"),
    Counter("SM_CLOCK (MHz)", "gpu_power", "clock_sm_mhz"),
    Counter("MEMORY_CLOCK (MHz)", "gpu_power", "clock_mem_mhz"),
    Counter("GPU_TEMPERATURE (°C)", "gpu_power", "temperature_c"),
    Counter("GPU_UTILIZATION (%)", "gpu_power", "util_gpu_pct"),
    Counter("MEMORY_UTILIZATION (%)", "gpu_power", "util_mem_pct"),
)

#: The stored frames (``joulehouse.gpu.store``) a trial reads: the counters' and the
#: system information (the windows come from the energy rows).
TRIAL_FRAMES = ("gpu_power", f"{SAMPLES_PREFIX}{POWER_SAMPLES}", "external_power",
                "system_info")


@dataclass(frozen=True)
class MeasuredRepetition:
    """One repetition of a run: its validated frames, its ``repetition_energy``
    rows and a fingerprint of what they were computed from."""

    repetition: Repetition
    energy: pd.DataFrame
    fingerprint: str


# --- reading a run ---------------------------------------------------------------------------

def run_fingerprint(fingerprints: Mapping[str, str]) -> str:
    """Digest of the repetitions' fingerprints (repetition key -> fingerprint)."""
    return digest_pairs(fingerprints)


def read_run(run_dir: str | Path, *, timezone: str = "UTC", external_power_unit: str = "mW",
             max_gap_s: float = 5.0) -> TrialData:
    """Read every repetition of a run folder with the core and map the run to a trial.

    Raises the core's InputError for a bad repetition (IncompleteInputError
    while one is still being written): a run is loaded whole or not at all.
    """
    measured = []
    for ref in run_repetitions(run_dir):
        rep = read_repetition(ref, timezone=timezone, external_power_unit=external_power_unit)
        measured.append(MeasuredRepetition(rep, repetition_energy(rep, max_gap_s=max_gap_s),
                                           fingerprint(ref.path)))
    if not measured:
        raise InputError(run_dir, "a GPU benchmark run folder without repetitions")
    return run_trial(Path(run_dir).resolve(), measured)


# --- the mapping -----------------------------------------------------------------------------

def run_trial(run_dir: Path, measured: Sequence[MeasuredRepetition]) -> TrialData:
    """The trial of one run from its repetitions (any order; threads follow key order).

    ``source_key`` is ``run_dir`` (a reload replaces the trial); ``fingerprint``
    is :func:`run_fingerprint` of the repetitions' fingerprints.
    """
    ordered = sorted(measured, key=lambda m: m.repetition.ref.key)
    refs = [m.repetition.ref for m in ordered]
    runs = {(r.experiment, r.benchmark, r.run) for r in refs}
    if len(runs) != 1:
        raise ValueError(f"repetitions of several runs: {sorted(runs)}")
    metrics = [TIME_METRIC] + [
        metric for column, metric in ENERGY_METRICS.items()
        if all(m.energy[column].notna().all() for m in ordered)]
    threads = pd.DataFrame({"node_rank": np.arange(len(ordered)), "context_rank": 0,
                            "thread_rank": 0})
    timers, values, counters, metadata = [], [], [], []
    for node, m in enumerate(ordered):
        rank = {"node_rank": node, "context_rank": 0, "thread_rank": 0}
        entries, entry_values = _timers(m.energy, metrics)
        timers.append(entries.assign(**rank))
        values.append(entry_values.assign(**rank))
        start, end = _experiment_window(m.energy)
        counters.append(_counters(m.repetition, start, end).assign(**rank))
        attributes = _attributes(m, start, end)
        metadata.append(pd.DataFrame({**rank, "name": list(attributes),
                                      "value": list(attributes.values())}))
    ref = refs[0]
    return TrialData(
        name=f"{ref.experiment}/{ref.benchmark}/{ref.run}",
        data_source=DATA_SOURCE_OTHER,
        metrics=metrics,
        threads=threads,
        timers=_frame(timers, ["name", "group_names", "calls", "subroutines"]),
        timer_values=_frame(values, ["name", "metric", "inclusive", "exclusive"]),
        counters=_frame(counters, ["name", "sample_count", "maximum", "minimum", "mean",
                                   "sum_squares"]),
        metadata=_frame(metadata, ["name", "value"]),
        source_key=str(run_dir),
        fingerprint=run_fingerprint({r.key: m.fingerprint for r, m in zip(refs, ordered)}),
        trial_metadata={"joulehouse.source": "gpu-benchmark run"},
    )


def _frame(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    return pd.concat(parts, ignore_index=True)[THREAD_COLUMNS + columns]


def _timers(energy: pd.DataFrame, metrics: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The windows as callpath entries (name, group, calls, subroutines) and their values.

    Inclusive: the window's duration (µs) or energy (J); exclusive: inclusive
    minus the sum of the children's inclusive.
    """
    phase = energy["phase"].to_numpy()
    epoch_parent = TRAIN if (phase == "train").any() else EXPERIMENT
    parents = np.array([None if p == "experiment" else EXPERIMENT if p == "train" else epoch_parent
                        for p in phase], dtype=object)
    names = [EXPERIMENT if p == "experiment" else TRAIN if p == "train"
             else f"{epoch_parent}{CALLPATH_SEPARATOR}epoch {e}"
             for p, e in zip(phase, energy["epoch"])]
    columns = {TIME_METRIC: energy["duration_s"].to_numpy(dtype="float64") * 1e6}
    columns |= {metric: energy[column].to_numpy(dtype="float64")
                for column, metric in ENERGY_METRICS.items() if metric in metrics}
    inclusive = pd.DataFrame(columns, index=pd.Index(names, name="name"))
    children = inclusive.groupby(parents).sum().reindex(names, fill_value=0.0)
    exclusive = inclusive - children.to_numpy()
    subroutines = pd.Series(parents).value_counts().reindex(names, fill_value=0)
    entries = pd.DataFrame({"name": names, "group_names": PHASE_GROUP, "calls": 1.0,
                            "subroutines": subroutines.to_numpy(dtype="float64")})
    values = pd.concat([
        pd.DataFrame({"name": names, "metric": metric, "inclusive": inclusive[metric].to_numpy(),
                      "exclusive": exclusive[metric].to_numpy()})
        for metric in metrics], ignore_index=True)
    return entries, values


def _experiment_window(energy: pd.DataFrame) -> tuple[pd.Timestamp, pd.Timestamp]:
    first = int(np.flatnonzero(energy["phase"].to_numpy() == "experiment")[0])
    return energy["window_start"].iloc[first], energy["window_end"].iloc[first]


def _counters(rep: Repetition, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """One row per user event with samples in ``[start, end]``: count, max, min, mean, SumSqr."""
    rows = []
    inside_of: dict[str, np.ndarray] = {}  # frame -> its samples' mask, made once
    for counter in COUNTERS:
        frame = getattr(rep, counter.frame)
        if frame is None or counter.column not in frame.columns:
            continue
        if counter.frame not in inside_of:
            inside_of[counter.frame] = frame["time"].between(start, end).to_numpy()
        samples = frame[counter.column].to_numpy(dtype="float64", na_value=np.nan)[
            inside_of[counter.frame]]
        samples = samples[~np.isnan(samples)]
        if len(samples):
            rows.append({"name": counter.name, "sample_count": len(samples),
                         "maximum": samples.max(), "minimum": samples.min(),
                         "mean": samples.mean(), "sum_squares": float(np.sum(samples**2))})
    return pd.DataFrame(rows, columns=["name", "sample_count", "maximum", "minimum", "mean",
                                       "sum_squares"])


def _attributes(m: MeasuredRepetition, start: pd.Timestamp, end: pd.Timestamp) -> dict[str, str]:
    """The metadata of one repetition (thread), as strings."""
    rep = m.repetition
    settings = {f"settings.{name}": _text(value)
                for name, value in dataclasses.asdict(rep.settings).items() if value is not None}
    return {
        "repetition": rep.ref.key,
        "repetition.fingerprint": m.fingerprint,
        "window.experiment_begin (UTC)": start.isoformat(),
        "window.experiment_end (UTC)": end.isoformat(),
        **settings,
        **flatten_system_info(rep.system_info or {}),
    }


def flatten_system_info(info: Mapping[str, Any], prefix: str = "system_info") -> dict[str, str]:
    """``system_info.json`` as flat ``name -> value`` strings.

    Nested keys are joined with ``.``; lists are joined with ``", "``; the
    installed packages (:data:`PACKAGE_KEYS`) are one value, ``name==version``
    sorted and joined with ``", "``.
    """
    flat: dict[str, str] = {}
    for key, value in info.items():
        name = f"{prefix}.{key}"
        if key in PACKAGE_KEYS and isinstance(value, Mapping):
            flat[name] = ", ".join(sorted(f"{k}=={_text(v)}" for k, v in value.items()))
        elif key in PACKAGE_KEYS and isinstance(value, list):
            flat[name] = ", ".join(sorted(_text(v) for v in value))
        elif isinstance(value, Mapping):
            flat |= flatten_system_info(value, name)
        elif isinstance(value, list):
            flat[name] = ", ".join(_text(v) for v in value)
        else:
            flat[name] = _text(value)
    return flat


def _text(value: Any) -> str:
    """Strings as they are; numbers, booleans, null and nested values as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
