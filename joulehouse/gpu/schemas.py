"""pandera schemas of the GPU benchmark frames and energy tables.

Input frames (one per file, as :mod:`joulehouse.gpu.readers` returns them)
carry units in their column names, a tz-aware UTC ``time`` column strictly
increasing, and ranges: power in [0, 5 kW] per GPU reading, utilisation in
[0, 100] %. Output schemas describe the energy tables. They are applied
with :func:`joulehouse.validation.validate`, whose InputError names the
file and the failing rows' lines (frame index + 2: 1-based and counting the
header line).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa

from joulehouse.facts import ENERGY_FACTS_SCHEMA

#: Largest plausible power of one GPU reading (W); larger is a unit or sensor error.
MAX_GPU_POWER_W = 5000.0

UTC_TIME = pd.DatetimeTZDtype("ns", "UTC")


def _strictly_increasing(series: pd.Series) -> pd.Series:
    values = series.values  # numpy, UTC for tz-aware times (no Timestamp objects)
    return pd.Series(np.r_[True, values[1:] > values[:-1]][:len(values)], index=series.index)


def _non_decreasing(series: pd.Series) -> pd.Series:
    values = series.values  # numpy, UTC for tz-aware times (no Timestamp objects)
    return pd.Series(np.r_[True, values[1:] >= values[:-1]][:len(values)], index=series.index)


def _time(strict: bool = True, description: str = "Time of the reading (UTC).") -> pa.Column:
    order = _strictly_increasing if strict else _non_decreasing
    name = "strictly_increasing" if strict else "non_decreasing"
    return pa.Column(UTC_TIME, pa.Check(order, name=name), nullable=False,
                     description=description)


def _power(nullable: bool = False, maximum: float | None = MAX_GPU_POWER_W, **kw) -> pa.Column:
    check = pa.Check.ge(0) if maximum is None else pa.Check.in_range(0, maximum)
    return pa.Column(float, check, nullable=nullable, **kw)


def _optional(description: str, checks: list[pa.Check] | None = None) -> pa.Column:
    return pa.Column(float, checks, nullable=True, required=False, description=description)


_PERCENT = [pa.Check.in_range(0, 100)]
_NON_NEGATIVE = [pa.Check.ge(0)]


def _has_event(name: str) -> pa.Check:
    return pa.Check(lambda df: bool((df["event"] == name).any()), name=f"has_{name}")


def _all_str(series: pd.Series) -> bool:
    """Every value a str: one vectorised pass (pandera's ``str`` dtype maps each value)."""
    return pd.api.types.infer_dtype(series, skipna=False) == "string"


TIMESTAMPS_SCHEMA = pa.DataFrameSchema(
    {
        "time": _time(strict=False, description="Time of the event (UTC)."),
        "event": pa.Column(object, pa.Check(_all_str, name="str"), nullable=False,
                           description="Event, e.g. experiment_begin, epoch_end."),
        "data": pa.Column("int64", description="The event's number, e.g. the epoch."),
    },
    checks=[
        _has_event("experiment_begin"),
        # experiment_end: read_timestamps raises IncompleteInputError before validating
        pa.Check(lambda df: ~df.duplicated(["time", "event", "data"]), name="not_duplicated"),
    ],
    name="timestamps",
)

GPU_POWER_SCHEMA = pa.DataFrameSchema(
    {
        "time": _time(),
        "power_w": _power(description="GPU power draw (W)."),
        "total_energy_j": _optional("GPU energy counter since the driver loaded (J).",
                                    _NON_NEGATIVE),
        "enforced_power_limit_w": _optional("Enforced power limit (W).",
                                            [pa.Check.in_range(0, MAX_GPU_POWER_W)]),
        "util_gpu_pct": _optional("GPU utilisation (%).", _PERCENT),
        "util_mem_pct": _optional("Time memory was read or written (%).", _PERCENT),
        "clock_sm_mhz": _optional("SM clock (MHz).", _NON_NEGATIVE),
        "clock_mem_mhz": _optional("Memory clock (MHz).", _NON_NEGATIVE),
        "app_clock_sm_mhz": _optional("Application SM clock (MHz).", _NON_NEGATIVE),
        "app_clock_mem_mhz": _optional("Application memory clock (MHz).", _NON_NEGATIVE),
        "power_state": _optional("Performance state (P-state number, 0 = P0).", _NON_NEGATIVE),
        "temperature_c": _optional("GPU temperature (°C)."),
        "pci_tx_kib_s": _optional("PCIe transmit throughput (KiB/s).", _NON_NEGATIVE),
        "pci_rx_kib_s": _optional("PCIe receive throughput (KiB/s).", _NON_NEGATIVE),
    },
    name="gpu-power",
)

EXTERNAL_POWER_SCHEMA = pa.DataFrameSchema(
    {
        "time": _time(),
        r"^d\d+c\d+_w$": _power(maximum=None, regex=True,
                                description="Power of one meter channel, device d channel c (W)."),
        "external_power_w": _power(maximum=None, description="Sum of the meter's channels (W)."),
    },
    name="power-external",
)

POWER_SAMPLES_SCHEMA = pa.DataFrameSchema(
    {"time": _time(), "power_w": _power(description="GPU power, 50 Hz sample (W).")},
    name="total_power_samples"
)

SAMPLES_SCHEMA = pa.DataFrameSchema(
    {"time": _time(), "value": pa.Column(float, nullable=False,
                                         description="Sampled value, in the unit of its file.")},
    name="samples"
)

#: system_info.json as stored: not validated beyond being a JSON object (see readers).
SYSTEM_INFO_SCHEMA = pa.DataFrameSchema(
    {"json": pa.Column(str, description="system_info.json: device, driver, CUDA, packages.")},
    name="system_info",
)

_SETTINGS = {
    "data_root": pa.Column(str, description="Data root's name (partition key prefix)."),
    "experiment": pa.Column(str, description="Experiment folder."),
    "benchmark": pa.Column(str, description="Benchmark folder."),
    "run": pa.Column(str, description="Run folder: the setting, e.g. 150W or 1215MHz."),
    "label": pa.Column(str, description="The setting as read from the run name."),
    "memory_clock_mhz": pa.Column("Int64", nullable=True,
                                  description="Memory clock of the setting (MHz)."),
    "sm_clock_mhz": pa.Column("Int64", nullable=True, description="SM clock of the setting (MHz)."),
    "power_limit_w": pa.Column(float, nullable=True, description="Power limit of the setting (W)."),
}


#: Mean powers by method: gpu_mean_power_{counter,power,samples}_w, external_mean_power_w.
_MEAN_POWER = r"^(gpu|external)_mean_power(_\w+)?_w$"


def _mean_power(how: str) -> pa.Column:
    return pa.Column(float, pa.Check.ge(0), nullable=True, regex=True,
                     description=f"Mean power by a method: {how} (W).")


def _energy(nullable: bool = True, description: str | None = None,
            required: bool = True) -> pa.Column:
    return pa.Column(float, pa.Check.ge(0), nullable=nullable, description=description,
                     required=required)


#: What the GPU step adds to a repetition's energy for fact_quality and waste
#: (``joulehouse/accounting/repetition.py``): each method's median step
#: (``<method>_step_s``), the waste rule gpu_idle's version and threshold, and its
#: figures of the experiment window (waste.gpu_idle's keys -> column).
STEP_SUFFIX = "_step_s"
IDLE_VERSION, IDLE_THRESHOLD = "gpu_idle_version", "gpu_idle_threshold"
IDLE_FIGURES = {"energy_j": "gpu_idle_judged_j", "idle_energy_j": "gpu_idle_energy_j",
                "idle_s": "gpu_idle_s"}

REPETITION_ENERGY_SCHEMA = pa.DataFrameSchema(
    {
        **_SETTINGS,
        "repetition": pa.Column(str, description="Repetition path in the data root."),
        "phase": pa.Column(str, pa.Check.isin(["experiment", "train", "epoch"]),
                           description="Window: experiment, train or epoch."),
        "epoch": pa.Column("Int64", nullable=True, description="Epoch number (epoch windows)."),
        "window_start": pa.Column(UTC_TIME, description="Window start (UTC)."),
        "window_end": pa.Column(UTC_TIME, description="Window end (UTC)."),
        "duration_s": pa.Column(float, pa.Check.ge(0), description="Window length (s)."),
        "gpu_energy_counter_j": _energy(
            description="GPU energy from the total-energy counter, resets handled (J)."),
        "gpu_energy_power_j": _energy(description="GPU energy, gpu-power integrated (J)."),
        "gpu_energy_samples_j": _energy(
            description="GPU energy, 50 Hz power samples integrated (J)."),
        "external_energy_j": _energy(description="Energy from the external meter (J)."),
        "gpu_energy_j": _energy(description="GPU energy by the preferred method (J)."),
        "gpu_energy_method": pa.Column(str, pa.Check.isin(["counter", "power"]),
                                       description="Method of gpu_energy_j."),
        "edp_js": _energy(description="Energy-delay product, gpu_energy_j x duration_s (J s)."),
        "counter_resets": pa.Column("Int64", pa.Check.ge(0), nullable=True,
                                    description="Resets of the energy counter in the window."),
        _MEAN_POWER: _mean_power("its energy / duration_s"),
        r"^\w+_vs_counter_pct$": pa.Column(
            float, nullable=True, regex=True,
            description="How far a method's energy is from the counter's (%)."),
        r"^\w+_gap_count$": pa.Column(
            "Int64", pa.Check.ge(0), nullable=True, regex=True,
            description="Gaps longer than max_gap_s in a method's series, not bridged."),
        r"^\w+_gap_s$": pa.Column(
            float, pa.Check.ge(0), nullable=True, regex=True,
            description="Time in gaps not bridged in a method's series (s)."),
        # Stored by the GPU step for fact_quality and waste (joulehouse/accounting/repetition.py)
        r"^\w+" + STEP_SUFFIX + "$": pa.Column(
            float, pa.Check.gt(0), nullable=True, regex=True, required=False,
            description="Median step between the readings of a method's frame (s)."),
        IDLE_VERSION: pa.Column(
            "int64", required=False,
            description="Version of the waste rule gpu_idle that judged the repetition."),
        IDLE_THRESHOLD: pa.Column(
            float, required=False,
            description="Utilisation (fraction) below which gpu_idle judged it idle."),
        IDLE_FIGURES["energy_j"]: _energy(
            required=False, description="gpu-power energy gpu_idle judged in the experiment "
                                        "window (J; NaN in other windows, or without "
                                        "utilisation readings)."),
        IDLE_FIGURES["idle_energy_j"]: _energy(
            required=False, description="Of it, spent below gpu_idle's threshold (J)."),
        IDLE_FIGURES["idle_s"]: pa.Column(
            float, pa.Check.ge(0), nullable=True, required=False,
            description="Time gpu_idle judged idle in the experiment window (s)."),
    },
    checks=pa.Check(lambda df: df["window_end"] >= df["window_start"], name="window_ordered"),
    unique=["data_root", "repetition", "phase", "epoch"],
    name="repetition_energy",
)

_STAT = r"^(duration_s|gpu_energy_\w+_j|gpu_energy_j|external_energy_j)_(mean|std|min|max)$"

SETTING_SCHEMA = pa.DataFrameSchema(
    {
        **_SETTINGS,
        "repetitions": pa.Column("int64", pa.Check.ge(1), description="Repetitions of the setting."),
        _STAT: pa.Column(float, nullable=True, regex=True,
                         description="Mean, std, min or max over the repetitions of the "
                                     "experiment window's time (s) or energy by a method (J)."),
        _MEAN_POWER: _mean_power("summed energy / summed time over the repetitions"),
        "edp_js": _energy(description="Energy-delay product of the means (J s)."),
    },
    unique=["data_root", "experiment", "benchmark", "run"],
    name="setting_energy",
)

BENCHMARK_SCHEMA = pa.DataFrameSchema(
    {
        **_SETTINGS,
        "duration_s": pa.Column(float, pa.Check.gt(0), description="Mean experiment time (s)."),
        "energy_j": _energy(nullable=False, description="Mean GPU energy (J)."),
        "edp_js": _energy(nullable=False, description="Energy-delay product (J s)."),
        "slowdown_pct": pa.Column(float, pa.Check.ge(0),
                                  description="Time over the fastest setting's (%)."),
        "energy_saving_pct": pa.Column(
            float, description="Energy saved against the fastest setting (%)."),
        "pareto_optimal": pa.Column(bool, description="On the time-energy Pareto front."),
        "least_energy": pa.Column(bool, description="Least energy of the benchmark."),
        "least_edp": pa.Column(bool, description="Least energy-delay product."),
        "least_energy_within_slowdown": pa.Column(
            bool, description="Least energy within 10% of the fastest time."),
    },
    unique=["data_root", "experiment", "benchmark", "run"],
    name="benchmark_energy",
)

__all__ = [
    "BENCHMARK_SCHEMA",
    "ENERGY_FACTS_SCHEMA",
    "EXTERNAL_POWER_SCHEMA",
    "GPU_POWER_SCHEMA",
    "POWER_SAMPLES_SCHEMA",
    "REPETITION_ENERGY_SCHEMA",
    "SAMPLES_SCHEMA",
    "SETTING_SCHEMA",
    "SYSTEM_INFO_SCHEMA",
    "TIMESTAMPS_SCHEMA",
]
