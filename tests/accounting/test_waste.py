"""Waste rules: idle GPU energy per repetition, low-load jobs' CPU energy, the user-week ranking."""

import numpy as np
import pandas as pd
import pytest

from joulehouse.accounting import waste
from joulehouse.facts import ENERGY_FACTS_COLUMNS

T0 = pd.Timestamp("2024-01-15 10:00", tz="UTC")


def gpu_power():
    """31 readings 1 s apart: 100 W at 0 % utilisation to t = 10 s, then 300 W at 80 %."""
    seconds = np.arange(31)
    return pd.DataFrame({"time": T0 + pd.to_timedelta(seconds, unit="s"),
                         "power_w": np.where(seconds <= 10, 100.0, 300.0),
                         "util_gpu_pct": np.where(seconds <= 10, 0.0, 80.0)})


def fact(source, entity, component, method, start, seconds, energy):
    return {"source": source, "entity": entity, "component": component, "window_start": start,
            "window_end": start + pd.Timedelta(seconds=seconds), "duration_s": float(seconds),
            "energy_j": float(energy), "method": method}


def test_gpu_idle_energy_of_known_readings():
    # Idle: the 10 intervals ending at a 0 % reading, 100 W each; (10, 11] ends busy.
    found = waste.gpu_idle(gpu_power(), T0, T0 + pd.Timedelta("30s"))
    assert found == pytest.approx({"energy_j": 1000 + 200 + 19 * 300, "idle_energy_j": 1000,
                                   "idle_s": 10})
    # A window starting half-way into the first interval prorates it.
    cut = waste.gpu_idle(gpu_power(), T0 + pd.Timedelta("0.5s"), T0 + pd.Timedelta("30s"))
    assert cut["idle_energy_j"] == pytest.approx(950) and cut["idle_s"] == pytest.approx(9.5)
    # At a 90 % threshold the 80 % readings are idle too: all the energy is.
    rule = waste.WasteRule("gpu_idle", 1, threshold=0.9)
    assert waste.gpu_idle(gpu_power(), T0, T0 + pd.Timedelta("30s"), rule)[
        "idle_energy_j"] == pytest.approx(6900)


def test_a_gpu_without_utilisation_readings_is_not_judged():
    facts = pd.DataFrame([fact("gpu-benchmark", "r/e/b/run/0", "gpu", "counter", T0, 30, 6900.0)],
                         columns=ENERGY_FACTS_COLUMNS)
    power = gpu_power().drop(columns="util_gpu_pct")  # e.g. a MIG instance
    assert waste.gpu_idle(power, T0, T0 + pd.Timedelta("30s")) is None
    assert waste.gpu_waste(facts, {"r/e/b/run/0": power}.get).empty
    assert len(waste.gpu_waste(facts, {"r/e/b/run/0": gpu_power()}.get)) == 1


def test_waste_table_names_rule_and_version_and_flags_low_load_jobs():
    facts = pd.DataFrame([
        fact("gpu-benchmark", "r/e/b/run/0", "gpu", "counter", T0, 30, 6900.0),
        fact("clustercockpit", "c/1/1", "cpu", "power", T0, 3600, 7.2e5),
        fact("clustercockpit", "c/2/1", "cpu", "power", T0, 7200, 2.0e6),
        fact("clustercockpit", "c/2/1", "cpu", "cc-backend", T0, 7200, 2.1e6),  # not counted
    ], columns=ENERGY_FACTS_COLUMNS)
    jobs = pd.DataFrame({"job": ["c/1/1", "c/2/1"], "hpc_user": ["ann", "bob"],
                         "num_nodes": [2, 1], "num_hwthreads": pd.array([144, 72], "Int64"),
                         "num_acc": pd.array([4, None], "Int64")})
    stats = pd.DataFrame({"job": ["c/1/1", "c/1/1", "c/2/1"],
                          "metric": ["cpu_load", "cpu_load", "cpu_user"],
                          "time_weighted_mean": [2.0, 3.0, 50.0]})  # 2.5/72 = 3.5 %; 50 %
    table = waste.waste(facts, waste.gpu_waste(facts, {"r/e/b/run/0": gpu_power()}.get), stats,
                        jobs)
    rows = table.set_index("entity")
    assert rows["rule"].to_dict() == {"r/e/b/run/0": "gpu_idle", "c/1/1": "cpu_low_load",
                                      "c/2/1": "cpu_low_load"}
    assert rows["version"].eq(1).all() and rows["threshold"].eq(0.1).all()
    assert rows.loc["r/e/b/run/0", "idle_energy_j"] == pytest.approx(1000)
    assert rows.loc["c/1/1", ["idle_energy_j", "flagged", "user"]].tolist() == [7.2e5, True, "ann"]
    assert rows.loc["c/1/1", "gpu_hours"] == pytest.approx(4.0)
    assert rows.loc["c/2/1", ["energy_j", "idle_energy_j", "flagged"]].tolist() == [
        2.0e6, 0.0, False]


def test_weekly_ranks_users_by_idle_energy_and_splits_at_monday():
    sunday = pd.Timestamp("2024-01-14 23:00", tz="UTC")
    table = waste._table([
        {"rule": "cpu_low_load", "version": 1, "threshold": 0.1, "source": "clustercockpit",
         "entity": "c/1/1", "user": "ann", "window_start": sunday,
         "window_end": sunday + pd.Timedelta("2h"), "gpu_hours": 8.0, "energy_j": 2000.0,
         "idle_energy_j": 2000.0, "idle_s": 7200.0},
        {"rule": "cpu_low_load", "version": 1, "threshold": 0.1, "source": "clustercockpit",
         "entity": "c/2/1", "user": "bob", "window_start": T0,
         "window_end": T0 + pd.Timedelta("1h"), "gpu_hours": 0.0, "energy_j": 5000.0,
         "idle_energy_j": 0.0, "idle_s": 0.0}])
    weeks = waste.weekly(table)
    assert weeks[["week", "user", "rank"]].astype(str).values.tolist() == [
        ["2024-01-08", "ann", "1"], ["2024-01-15", "ann", "1"], ["2024-01-15", "bob", "2"]]
    np.testing.assert_allclose(weeks["energy_j"], [1000.0, 1000.0, 5000.0])
    np.testing.assert_allclose(weeks["gpu_hours"], [4.0, 4.0, 0.0])
    np.testing.assert_allclose(weeks["idle_share"], [1.0, 1.0, 0.0])
