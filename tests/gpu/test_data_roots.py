"""Two data roots with the same experiment/benchmark/run names stay apart in every table."""

from dataclasses import replace

import pandas as pd
import pytest

from joulehouse.gpu.aggregate import benchmark_table, setting_table
from joulehouse.gpu.energy import energy_facts_rows, repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import read_repetition

SMALL = RepetitionSpec(duration_s=20.0, epochs=2)
SLOW = replace(SMALL, duration_s=60.0)
#: (root, run, repetitions, base spec, seed): the same run names in both roots;
#: cluster-b's 150W runs three times as long, so there it takes more energy than 250W.
WRITTEN = [("cluster-a", "150W", 2, SMALL, 0), ("cluster-a", "250W", 2, SMALL, 10),
           ("cluster-b", "150W", 3, SLOW, 20), ("cluster-b", "250W", 3, SMALL, 30)]


@pytest.fixture
def two_roots(tmp_path):
    """The per-repetition energy of both roots and the ground truth per (root, key)."""
    truths = {}
    for name, run, repetitions, base, seed in WRITTEN:
        written = write_data_root(tmp_path / name, {"power-limit": {"bert": [run]}},
                                  repetitions=repetitions, base=base, seed=seed)
        truths |= {(name, key): truth for key, truth in written.items()}
    energy = pd.concat([repetition_energy(read_repetition(RepetitionRef.from_key(
        tmp_path / name, key))) for name, key in truths], ignore_index=True)
    return energy, truths


def test_setting_table_has_one_row_per_root(two_roots):
    energy, truths = two_roots
    table = setting_table(energy)
    keys = list(zip(table["data_root"], table["run"], strict=True))
    assert keys == [("cluster-a", "150W"), ("cluster-a", "250W"),
                    ("cluster-b", "150W"), ("cluster-b", "250W")]
    assert table["repetitions"].tolist() == [2, 2, 3, 3]
    for row in table.itertuples():
        windows = [t.windows.iloc[0] for (name, key), t in truths.items()
                   if name == row.data_root and key.startswith(f"power-limit/bert/{row.run}/")]
        assert len(windows) == row.repetitions
        truth = pd.DataFrame(windows)
        assert row.duration_s_mean == pytest.approx(truth["duration_s"].mean(), abs=1e-6)
        assert row.gpu_energy_counter_j_mean == pytest.approx(truth["gpu_energy_j"].mean(),
                                                              rel=1e-3)
        assert row.external_energy_j_mean == pytest.approx(
            truth["external_energy_j"].mean(), rel=5e-3)
    by_root = table.set_index(["data_root", "run"])["gpu_energy_j_mean"]
    assert by_root["cluster-b", "150W"] > 2 * by_root["cluster-a", "150W"]


def test_benchmark_choices_per_root(two_roots):
    energy, _ = two_roots
    table = benchmark_table(setting_table(energy))
    least = table[table["least_energy"]]
    assert list(zip(least["data_root"], least["run"], strict=True)) == [
        ("cluster-a", "150W"), ("cluster-b", "250W")]
    fastest = table[table["slowdown_pct"] == 0]
    assert list(zip(fastest["data_root"], fastest["run"], strict=True)) == [
        ("cluster-a", "250W"), ("cluster-b", "250W")]


def test_facts_entities_are_distinct_across_roots(two_roots):
    energy, truths = two_roots
    facts = energy_facts_rows(energy)
    assert set(facts["entity"]) == {f"{name}/{key}" for name, key in truths}
    assert facts["entity"].nunique() == len(truths) == 10
    counter = facts[facts["method"] == "counter"].set_index("entity")["energy_j"]
    for (name, key), truth in truths.items():
        assert counter[f"{name}/{key}"] == pytest.approx(
            truth.windows.iloc[0]["gpu_energy_j"], rel=1e-3)
