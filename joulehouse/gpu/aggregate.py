"""Per-setting and per-benchmark tables from the per-repetition energy.

Only ``phase == "experiment"`` rows are aggregated. Statistics are taken
over repetitions' totals (energy in J, duration in s); a mean power is a
total energy divided by a total time, never an average of powers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from joulehouse.gpu.energy import METHODS, SETTINGS_COLUMNS
from joulehouse.gpu.schemas import BENCHMARK_SCHEMA, SETTING_SCHEMA
from joulehouse.validation import validate

SETTING_KEY = ["data_root", "experiment", "benchmark", "run"]
BENCHMARK_KEY = ["data_root", "experiment", "benchmark"]
#: Per-repetition quantities summarised per setting.
MEASURES = ["duration_s", *(m.energy for m in METHODS), "gpu_energy_j"]
STATISTICS = ["mean", "std", "min", "max"]


def setting_table(per_repetition: pd.DataFrame) -> pd.DataFrame:
    """One row per setting (data root, experiment, benchmark, run).

    Columns: the key, the settings (label, clocks, power limit),
    ``repetitions``, ``{measure}_{mean,std,min,max}`` for duration and each
    energy method (std: sample standard deviation, NaN for one repetition;
    statistics over the repetitions that have the method), mean powers
    ``{method}_mean_power_w`` = sum of energy / sum of duration over the
    repetitions having that method, and ``edp_js`` = mean preferred GPU
    energy x mean duration. A non-empty result is checked against
    SETTING_SCHEMA (InputError naming ``gpu_setting_energy``).
    """
    rows = per_repetition[per_repetition["phase"] == "experiment"]
    groups = rows.groupby(SETTING_KEY, sort=True, dropna=False)
    stats = groups[MEASURES].agg(STATISTICS)
    stats.columns = [f"{measure}_{stat}" for measure, stat in stats.columns]
    table = groups[SETTINGS_COLUMNS].first()
    table.insert(len(SETTINGS_COLUMNS), "repetitions", groups.size().astype("int64"))
    table = table.join(stats)
    for method in METHODS:
        has = rows[method.energy].notna()
        totals = rows[has].groupby(SETTING_KEY)[[method.energy, "duration_s"]].sum()
        table[method.mean_power] = totals[method.energy] / totals["duration_s"]
    table["edp_js"] = table["gpu_energy_j_mean"] * table["duration_s_mean"]
    table = table.reset_index()
    return validate(SETTING_SCHEMA, table, "gpu_setting_energy") if len(table) else table


def pareto_front(duration_s: np.ndarray, energy_j: np.ndarray) -> np.ndarray:
    """True for each point that no other point beats in both time and energy.

    A point is dominated when another is no slower and uses no more energy,
    and is strictly better in one of the two.
    """
    d, e = np.asarray(duration_s, dtype=float), np.asarray(energy_j, dtype=float)
    no_worse = (d[None, :] <= d[:, None]) & (e[None, :] <= e[:, None])
    better = (d[None, :] < d[:, None]) | (e[None, :] < e[:, None])
    return ~(no_worse & better).any(axis=1)


def _flag_benchmark(group: pd.DataFrame, max_slowdown: float) -> pd.DataFrame:
    duration, energy = group["duration_s"].to_numpy(), group["energy_j"].to_numpy()
    fastest = duration.min()
    allowed = duration <= fastest * (1 + max_slowdown)
    chosen = np.flatnonzero(allowed)[np.argmin(energy[allowed])]
    fastest_energy = energy[np.argmin(duration)]
    return group.assign(
        slowdown_pct=(duration / fastest - 1) * 100,
        energy_saving_pct=(1 - energy / fastest_energy) * 100,
        pareto_optimal=pareto_front(duration, energy),
        least_energy=np.arange(len(group)) == np.argmin(energy),
        least_edp=np.arange(len(group)) == np.argmin(group["edp_js"].to_numpy()),
        least_energy_within_slowdown=np.arange(len(group)) == chosen,
    )


def benchmark_table(setting_table: pd.DataFrame, max_slowdown: float = 0.1) -> pd.DataFrame:
    """Each setting of each benchmark (data root, experiment, benchmark), flagged for choosing.

    Columns: the setting key and settings, ``duration_s`` and ``energy_j``
    (means over repetitions, preferred GPU energy), ``edp_js``,
    ``slowdown_pct`` and ``energy_saving_pct`` against the fastest setting,
    and the flags ``pareto_optimal`` (time-energy Pareto front),
    ``least_energy``, ``least_edp`` and ``least_energy_within_slowdown`` (the
    least energy among settings at most ``max_slowdown`` slower than the
    fastest, as Zeus's power-limit optimizer chooses with a maximum
    slowdown). Ties go to the first setting in key order. A non-empty result
    is checked against BENCHMARK_SCHEMA (InputError naming
    ``gpu_benchmark_energy``).
    """
    table = setting_table[[*SETTING_KEY, *SETTINGS_COLUMNS]].assign(
        duration_s=setting_table["duration_s_mean"],
        energy_j=setting_table["gpu_energy_j_mean"],
        edp_js=setting_table["edp_js"],
    )
    table = table.dropna(subset=["duration_s", "energy_j"]).sort_values(SETTING_KEY)
    parts = [_flag_benchmark(group, max_slowdown)
             for _, group in table.groupby(BENCHMARK_KEY, sort=True)]
    columns = [*table.columns, "slowdown_pct", "energy_saving_pct", "pareto_optimal",
               "least_energy", "least_edp", "least_energy_within_slowdown"]
    if not parts:
        return pd.DataFrame(columns=columns)
    table = pd.concat(parts, ignore_index=True)[columns]
    return validate(BENCHMARK_SCHEMA, table, "gpu_benchmark_energy")
