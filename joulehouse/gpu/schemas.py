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
    return pd.Series(np.r_[True, values[1:] > values[:-1]], index=series.index)


def _non_decreasing(series: pd.Series) -> pd.Series:
    values = series.values  # numpy, UTC for tz-aware times (no Timestamp objects)
    return pd.Series(np.r_[True, values[1:] >= values[:-1]], index=series.index)


def _time(strict: bool = True) -> pa.Column:
    order = _strictly_increasing if strict else _non_decreasing
    name = "strictly_increasing" if strict else "non_decreasing"
    return pa.Column(UTC_TIME, pa.Check(order, name=name), nullable=False)


def _power(nullable: bool = False, maximum: float | None = MAX_GPU_POWER_W, **kw) -> pa.Column:
    check = pa.Check.ge(0) if maximum is None else pa.Check.in_range(0, maximum)
    return pa.Column(float, check, nullable=nullable, **kw)


def _optional(checks: list[pa.Check] | None = None) -> pa.Column:
    return pa.Column(float, checks, nullable=True, required=False)


_PERCENT = [pa.Check.in_range(0, 100)]
_NON_NEGATIVE = [pa.Check.ge(0)]


def _has_event(name: str) -> pa.Check:
    return pa.Check(lambda df: bool((df["event"] == name).any()), name=f"has_{name}")


def _all_str(series: pd.Series) -> bool:
    """Every value a str: one vectorised pass (pandera's ``str`` dtype maps each value)."""
    return pd.api.types.infer_dtype(series, skipna=False) == "string"


TIMESTAMPS_SCHEMA = pa.DataFrameSchema(
    {
        "time": _time(strict=False),
        "event": pa.Column(object, pa.Check(_all_str, name="str"), nullable=False),
        "data": pa.Column("int64"),
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
        "power_w": _power(),
        "total_energy_j": _optional(_NON_NEGATIVE),
        "enforced_power_limit_w": _optional([pa.Check.in_range(0, MAX_GPU_POWER_W)]),
        "util_gpu_pct": _optional(_PERCENT),
        "util_mem_pct": _optional(_PERCENT),
        "clock_sm_mhz": _optional(_NON_NEGATIVE),
        "clock_mem_mhz": _optional(_NON_NEGATIVE),
        "app_clock_sm_mhz": _optional(_NON_NEGATIVE),
        "app_clock_mem_mhz": _optional(_NON_NEGATIVE),
        "power_state": _optional(_NON_NEGATIVE),
        "temperature_c": _optional(),
        "pci_tx_kib_s": _optional(_NON_NEGATIVE),
        "pci_rx_kib_s": _optional(_NON_NEGATIVE),
    },
    name="gpu-power",
)

EXTERNAL_POWER_SCHEMA = pa.DataFrameSchema(
    {
        "time": _time(),
        r"^d\d+c\d+_w$": _power(maximum=None, regex=True),
        "external_power_w": _power(maximum=None),
    },
    name="power-external",
)

POWER_SAMPLES_SCHEMA = pa.DataFrameSchema(
    {"time": _time(), "power_w": _power()}, name="total_power_samples"
)

SAMPLES_SCHEMA = pa.DataFrameSchema(
    {"time": _time(), "value": pa.Column(float, nullable=False)}, name="samples"
)

_SETTINGS = {
    "data_root": pa.Column(str),
    "experiment": pa.Column(str),
    "benchmark": pa.Column(str),
    "run": pa.Column(str),
    "label": pa.Column(str),
    "memory_clock_mhz": pa.Column("Int64", nullable=True),
    "sm_clock_mhz": pa.Column("Int64", nullable=True),
    "power_limit_w": pa.Column(float, nullable=True),
}


def _energy(nullable: bool = True) -> pa.Column:
    return pa.Column(float, pa.Check.ge(0), nullable=nullable)


REPETITION_ENERGY_SCHEMA = pa.DataFrameSchema(
    {
        **_SETTINGS,
        "repetition": pa.Column(str),
        "phase": pa.Column(str, pa.Check.isin(["experiment", "train", "epoch"])),
        "epoch": pa.Column("Int64", nullable=True),
        "window_start": pa.Column(UTC_TIME),
        "window_end": pa.Column(UTC_TIME),
        "duration_s": pa.Column(float, pa.Check.ge(0)),
        "gpu_energy_counter_j": _energy(),
        "gpu_energy_power_j": _energy(),
        "gpu_energy_samples_j": _energy(),
        "external_energy_j": _energy(),
        "gpu_energy_j": _energy(),
        "gpu_energy_method": pa.Column(str, pa.Check.isin(["counter", "power"])),
        "edp_js": _energy(),
        "counter_resets": pa.Column("Int64", pa.Check.ge(0), nullable=True),
    },
    checks=pa.Check(lambda df: df["window_end"] >= df["window_start"], name="window_ordered"),
    unique=["data_root", "repetition", "phase", "epoch"],
    name="repetition_energy",
)

_STAT = r"^(duration_s|gpu_energy_\w+_j|gpu_energy_j|external_energy_j)_(mean|std|min|max)$"

SETTING_SCHEMA = pa.DataFrameSchema(
    {
        **_SETTINGS,
        "repetitions": pa.Column("int64", pa.Check.ge(1)),
        _STAT: pa.Column(float, nullable=True, regex=True),
        r"^\w+_mean_power_w$": pa.Column(float, pa.Check.ge(0), nullable=True, regex=True),
        "edp_js": _energy(),
    },
    unique=["data_root", "experiment", "benchmark", "run"],
    name="setting_energy",
)

BENCHMARK_SCHEMA = pa.DataFrameSchema(
    {
        **_SETTINGS,
        "duration_s": pa.Column(float, pa.Check.gt(0)),
        "energy_j": _energy(nullable=False),
        "edp_js": _energy(nullable=False),
        "slowdown_pct": pa.Column(float, pa.Check.ge(0)),
        "energy_saving_pct": pa.Column(float),
        "pareto_optimal": pa.Column(bool),
        "least_energy": pa.Column(bool),
        "least_edp": pa.Column(bool),
        "least_energy_within_slowdown": pa.Column(bool),
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
    "TIMESTAMPS_SCHEMA",
]
