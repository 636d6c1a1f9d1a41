"""Per-setting statistics and per-benchmark choices on small hand-made tables."""

import numpy as np
import pandas as pd
import pytest

from joulehouse.gpu.aggregate import benchmark_table, pareto_front, setting_table
from joulehouse.gpu.schemas import BENCHMARK_SCHEMA, SETTING_SCHEMA


def repetitions(rows):
    """Per-repetition rows (experiment phase) from (run, rep, duration, counter, power, samples,
    external) tuples; the train row of each must be ignored."""
    records = []
    for run, rep, duration, counter, power, samples, external in rows:
        base = {"data_root": "lab", "experiment": "power-limit", "benchmark": "bert", "run": run,
                "repetition": f"power-limit/bert/{run}/{rep}", "label": run,
                "memory_clock_mhz": pd.NA, "sm_clock_mhz": pd.NA,
                "power_limit_w": float(run.rstrip("W")), "duration_s": duration,
                "gpu_energy_counter_j": counter, "gpu_energy_power_j": power,
                "gpu_energy_samples_j": samples, "external_energy_j": external,
                "gpu_energy_j": counter if not np.isnan(counter) else power}
        records.append(base | {"phase": "experiment"})
        records.append(base | {"phase": "train", "duration_s": 1.0, "gpu_energy_j": 1.0})
    frame = pd.DataFrame(records)
    frame[["memory_clock_mhz", "sm_clock_mhz"]] = frame[
        ["memory_clock_mhz", "sm_clock_mhz"]].astype("Int64")
    return frame


NAN = float("nan")
TABLE = repetitions([
    ("150W", 0, 100.0, 10000.0, 10100.0, 10050.0, 30000.0),
    ("150W", 1, 110.0, 11000.0, 11100.0, 11050.0, NAN),
    ("150W", 2, 120.0, 12000.0, 12100.0, 12050.0, 36000.0),
    ("250W", 0, 80.0, 16000.0, 16100.0, 16050.0, 32000.0),
    ("250W", 1, 80.0, 16000.0, 16000.0, 16000.0, 32000.0),
])


def test_setting_statistics_from_repetition_totals():
    table = setting_table(TABLE).set_index("run")
    SETTING_SCHEMA.validate(table.reset_index())
    low = table.loc["150W"]
    assert low.repetitions == 3 and low.power_limit_w == 150.0
    assert (low.duration_s_mean, low.duration_s_min, low.duration_s_max) == (110.0, 100.0, 120.0)
    assert low.duration_s_std == pytest.approx(10.0)  # sample standard deviation
    assert low.gpu_energy_counter_j_mean == 11000.0
    assert low.gpu_energy_counter_j_std == pytest.approx(1000.0)
    assert low.external_energy_j_mean == 33000.0  # over the repetitions that have it
    # mean power = total energy / total time, never a mean of powers
    assert low.gpu_mean_power_counter_w == pytest.approx(33000.0 / 330.0)
    assert low.external_mean_power_w == pytest.approx(66000.0 / 220.0)
    assert low.edp_js == pytest.approx(11000.0 * 110.0)
    assert table.loc["250W"].duration_s_std == 0.0


def test_pareto_front():
    duration = np.array([10.0, 12.0, 11.0, 15.0, 12.0, 10.0])
    energy = np.array([100.0, 80.0, 90.0, 85.0, 80.0, 100.0])
    # 15 s / 85 J is beaten by 12 s / 80 J; exact ties dominate nothing
    assert list(pareto_front(duration, energy)) == [True, True, True, False, True, True]


def benchmark_input():
    runs = ["100W", "150W", "200W", "250W", "300W"]
    durations = [150.0, 104.0, 100.0, 98.0, 95.0]
    energies = [9000.0, 9500.0, 10000.0, 11000.0, 12500.0]
    return pd.DataFrame({
        "data_root": "lab", "experiment": "power-limit", "benchmark": "bert", "run": runs,
        "label": runs,
        "memory_clock_mhz": pd.array([pd.NA] * 5, dtype="Int64"),
        "sm_clock_mhz": pd.array([pd.NA] * 5, dtype="Int64"),
        "power_limit_w": [100.0, 150.0, 200.0, 250.0, 300.0],
        "duration_s_mean": durations, "gpu_energy_j_mean": energies,
        "edp_js": [d * e for d, e in zip(durations, energies, strict=True)],
    })


def test_benchmark_choices():
    table = benchmark_table(benchmark_input(), max_slowdown=0.1).set_index("run")
    BENCHMARK_SCHEMA.validate(table.reset_index())
    assert list(table.index[table.pareto_optimal]) == ["100W", "150W", "200W", "250W", "300W"]
    assert list(table.index[table.least_energy]) == ["100W"]
    # EDP: 1.35e6, 0.988e6, 1.0e6, 1.078e6, 1.1875e6 J*s
    assert list(table.index[table.least_edp]) == ["150W"]
    # within 10% of the fastest (95 s -> 104.5 s): 150W uses least energy
    assert list(table.index[table.least_energy_within_slowdown]) == ["150W"]
    assert table.loc["150W"].slowdown_pct == pytest.approx((104 / 95 - 1) * 100)
    assert table.loc["150W"].energy_saving_pct == pytest.approx((1 - 9500 / 12500) * 100)
    strict = benchmark_table(benchmark_input(), max_slowdown=0.04).set_index("run")
    assert list(strict.index[strict.least_energy_within_slowdown]) == ["250W"]


def test_benchmarks_chosen_separately():
    two = pd.concat([benchmark_input(), benchmark_input().assign(benchmark="resnet")])
    table = benchmark_table(two)
    assert table.groupby("benchmark")["least_energy"].sum().to_dict() == {"bert": 1,
                                                                          "resnet": 1}
