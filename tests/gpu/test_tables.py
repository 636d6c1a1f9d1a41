"""The per-setting and per-benchmark tables kept per setting (joulehouse/gpu/tables.py): after
a seeded random sequence of landings, fixes, re-landings and removals of repetitions, each
refreshed with only what it touched, both tables equal a rebuild from scratch, row for row."""

import random
from functools import partial

import numpy as np
import pandas as pd
import pytest

from joulehouse import entry_table
from joulehouse.gpu import aggregate
from joulehouse.gpu.tables import (
    BENCHMARK_TABLE,
    PENDING_TABLE,
    SETTING_TABLE,
    refresh_benchmarks,
    refresh_settings,
    setting_of,
)
from joulehouse.warehouse import Warehouse

#: (data root, experiment, benchmark) -> runs: 2 roots, 3 benchmarks, 7 settings.
RUNS = {("lab", "power-limit", "bert"): ["150W", "200W", "250W"],
        ("lab", "power-limit", "resnet"): ["150W", "250W"],
        ("b", "clock-limit", "bert"): ["877MHz,1065MHz", "877MHz,1215MHz"]}
KEYS = [f"{root}/{experiment}/{benchmark}/{run}/{rep}"
        for (root, experiment, benchmark), runs in RUNS.items() for run in runs
        for rep in range(3)]
#: The registered keys as Dagster lists them: in registration order (a key registered
#: again moves to the end), not sorted.
REGISTERED = random.Random(0).sample(KEYS, len(KEYS))


def energy(key: str, rng: np.random.Generator) -> pd.DataFrame:
    """One repetition's stored energy as the setting table reads it: an experiment row
    (random totals; the external meter sometimes missing) and a train row it ignores."""
    root, experiment, benchmark, run, _ = key.split("/")
    duration = rng.uniform(50, 150)
    counter = duration * rng.uniform(100, 300)
    external = np.nan if rng.random() < 0.3 else counter * rng.uniform(2, 3)
    mhz = run.split(",")[0].removesuffix("MHz")
    row = {"data_root": root, "experiment": experiment, "benchmark": benchmark, "run": run,
           "repetition": key.split("/", 1)[1], "label": run,
           "memory_clock_mhz": int(mhz) if mhz.isdigit() else pd.NA, "sm_clock_mhz": pd.NA,
           "power_limit_w": float(run.removesuffix("W")) if run.endswith("W") else np.nan,
           "duration_s": duration, "gpu_energy_counter_j": counter,
           "gpu_energy_power_j": counter * rng.uniform(0.98, 1.02),
           "gpu_energy_samples_j": counter * rng.uniform(0.98, 1.02),
           "external_energy_j": external, "gpu_energy_j": counter}
    frame = pd.DataFrame([row | {"phase": "experiment"},
                          row | {"phase": "train", "duration_s": 1.0, "gpu_energy_j": 1.0}])
    return frame.astype({"memory_clock_mhz": "Int64", "sm_clock_mhz": "Int64"})


def energy_of(stored: dict[str, pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    """The stored energy of those of ``keys`` stored (the registered keys include others)."""
    frames = [stored[key] for key in keys if key in stored]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rebuilt(stored: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables from every stored repetition, read in key order as a rebuild reads them."""
    settings = aggregate.setting_table(pd.concat([stored[key] for key in sorted(stored)],
                                                 ignore_index=True))
    return settings, aggregate.benchmark_table(settings)


def kept(tables: Warehouse, table: str) -> pd.DataFrame:
    return tables.read_table(table).sort_values(aggregate.SETTING_KEY, ignore_index=True)


def refresh(tables: Warehouse, stored: dict[str, pd.DataFrame], touched: list[str] | None
            ) -> None:
    refresh_settings(tables, REGISTERED, partial(energy_of, stored), touched)
    settings = None if touched is None else pd.DataFrame(
        [setting_of(key) for key in touched], columns=aggregate.SETTING_KEY)
    refresh_benchmarks(tables, settings)


def assert_rebuilt(tables: Warehouse, stored: dict[str, pd.DataFrame]) -> None:
    settings, benchmarks = rebuilt(stored)
    pd.testing.assert_frame_equal(kept(tables, SETTING_TABLE), settings, check_exact=True)
    pd.testing.assert_frame_equal(kept(tables, BENCHMARK_TABLE), benchmarks, check_exact=True)


def test_a_random_sequence_of_changes_keeps_both_tables_equal_to_a_rebuild(tmp_path):
    rng, pick = np.random.default_rng(1), random.Random(1)
    tables = Warehouse(tmp_path / "warehouse")
    stored = {key: energy(key, rng) for key in pick.sample(KEYS, 4)}
    refresh(tables, stored, sorted(stored))
    assert_rebuilt(tables, stored)
    for step in range(6):
        absent = [key for key in KEYS if key not in stored]
        landed = pick.sample(absent, min(len(absent), pick.randint(1, 3)))
        fixed = pick.sample(sorted(stored), min(len(stored), pick.randint(0, 2)))
        removed = pick.sample(sorted(set(stored) - set(fixed)),
                              min(len(stored) - len(fixed), pick.randint(0, 3)))
        for key in [*landed, *fixed]:  # a landing, or a fix / re-landing in place
            stored[key] = energy(key, rng)
        for key in removed:  # its files deleted, its partition deleted from Dagster
            del stored[key]
        if step == 3:
            refresh(tables, stored, None)  # a run without partitions: every setting
        else:
            refresh(tables, stored, [*landed, *fixed, *removed])
        assert_rebuilt(tables, stored)


def test_a_setting_whose_repetitions_are_all_gone_loses_its_rows(tmp_path):
    rng = np.random.default_rng(0)
    tables = Warehouse(tmp_path / "warehouse")
    resnet = [key for key in KEYS if "/resnet/" in key]
    stored = {key: energy(key, rng) for key in KEYS}
    refresh(tables, stored, None)
    version = entry_table._open(tables, SETTING_TABLE).version()
    for key in resnet:
        del stored[key]
    refresh(tables, stored, resnet)
    assert entry_table._open(tables, SETTING_TABLE).version() == version + 1  # one commit
    assert "resnet" not in set(kept(tables, SETTING_TABLE)["benchmark"])
    assert "resnet" not in set(kept(tables, BENCHMARK_TABLE)["benchmark"])
    assert len(kept(tables, SETTING_TABLE)) == 5
    assert_rebuilt(tables, stored)


def test_a_refresh_reads_only_the_touched_settings_repetitions(tmp_path):
    rng = np.random.default_rng(0)
    tables = Warehouse(tmp_path / "warehouse")
    stored = {key: energy(key, rng) for key in KEYS}
    read: list[str] = []

    def reading(keys: list[str]) -> pd.DataFrame:
        read.extend(keys)
        return energy_of(stored, keys)

    refresh(tables, stored, None)
    read.clear()
    touched = "lab/power-limit/bert/200W/1"
    stored[touched] = energy(touched, rng)
    written = refresh_settings(tables, REGISTERED, reading, [touched])
    assert sorted(read) == [f"lab/power-limit/bert/200W/{rep}" for rep in range(3)]
    assert written.recomputed == 1 and written.read == 3 and len(written.rows) == 1
    benchmarks = refresh_benchmarks(tables, pd.DataFrame([setting_of(touched)],
                                                         columns=aggregate.SETTING_KEY))
    assert benchmarks.read == 3 and set(benchmarks.rows["run"]) == {"150W", "200W", "250W"}
    assert_rebuilt(tables, stored)


@pytest.mark.parametrize("rebuild", [False, True])
def test_a_stop_between_the_two_commits_heals_at_the_next_run(tmp_path, rebuild):
    """A run (over repetitions, or without partitions) stops after its settings' commit,
    before its benchmarks': the next run, over a setting of another benchmark, recomputes
    the benchmarks left pending too (one of them now without a setting)."""
    rng = np.random.default_rng(2)
    tables = Warehouse(tmp_path / "warehouse")
    stored = {key: energy(key, rng) for key in KEYS}
    refresh(tables, stored, None)
    fixed, gone = "lab/power-limit/bert/200W/1", [key for key in KEYS if key.startswith("b/")]
    stored[fixed] = energy(fixed, rng)
    for key in gone:
        del stored[key]
    refresh_settings(tables, REGISTERED, partial(energy_of, stored),
                     None if rebuild else [fixed, *gone])  # then the stop
    other = "lab/power-limit/resnet/150W/0"
    stored[other] = energy(other, rng)
    refresh(tables, stored, [other])
    assert_rebuilt(tables, stored)
    assert entry_table.read(tables, PENDING_TABLE).empty

def test_a_key_that_names_no_repetition_is_refused():
    with pytest.raises(ValueError, match="no repetition's key"):
        setting_of("lab/power-limit/bert/250W")


def test_both_tables_are_compacted_through_entry_sync(tmp_path, monkeypatch):
    from joulehouse import entry_sync

    due: list[str] = []
    monkeypatch.setattr(entry_sync, "compact_if_due",
                        lambda warehouse, table, above=None: due.append(table))
    rng = np.random.default_rng(0)
    refresh(Warehouse(tmp_path / "warehouse"), {KEYS[0]: energy(KEYS[0], rng)}, [KEYS[0]])
    assert due == [SETTING_TABLE, BENCHMARK_TABLE]
