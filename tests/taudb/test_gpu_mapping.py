"""GPU benchmark runs as TAUdb trials: the mapping against the core's own figures, and a load."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse.errors import IncompleteInputError, InputError
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import find_repetitions
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.store import load_repetition, save_repetition
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.mapping.gpu import (
    ENERGY_METRICS,
    TIME_METRIC,
    TRIAL_FRAMES,
    MeasuredRepetition,
    flatten_system_info,
    read_run,
    run_trial,
)
from joulehouse.taudb.model import DATA_SOURCE_OTHER
from joulehouse.taudb.read import read_trial_source
from joulehouse.warehouse import Warehouse

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_GPU_DATA = PROJECT_ROOT / "examples" / "gpu-data"
REPETITIONS = 3
RUNS = {"power-limit": {"bert": ["150W", "250W"]}}
SMALL = RepetitionSpec(duration_s=8.0, epochs=3)
ALL_ENERGY = list(ENERGY_METRICS.values())


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """3 repetitions per run; the 250W run has no external meter and no samples."""
    root = tmp_path_factory.mktemp("gpu") / "lab"
    bare = {"with_external": False, "with_samples": False}
    write_data_root(root, RUNS, repetitions=REPETITIONS, base=SMALL,
                    overrides={f"power-limit/bert/250W/{i}": bare for i in range(REPETITIONS)})
    return root


@pytest.fixture(scope="module")
def run_150(data_root):
    return data_root / "power-limit" / "bert" / "150W"


@pytest.fixture(scope="module")
def core(run_150):
    """What the core computes for each repetition of the 150W run, by node rank."""
    refs = [r for r in find_repetitions(run_150.parents[2]) if r.run == "150W"]
    reps = [read_repetition(ref) for ref in refs]
    return [(rep, repetition_energy(rep)) for rep in reps]


def _values(trial, node: int, metric: str) -> pd.DataFrame:
    frame = trial.timer_values
    chosen = frame[(frame["node_rank"] == node) & (frame["metric"] == metric)]
    return chosen.set_index("name")[["inclusive", "exclusive"]]


def test_a_run_is_a_trial_whose_threads_are_its_repetitions(run_150):
    trial = read_run(run_150)
    assert trial.name == "power-limit/bert/150W"
    assert trial.data_source == DATA_SOURCE_OTHER
    assert trial.source_key == str(run_150.resolve())
    assert trial.threads.values.tolist() == [[i, 0, 0] for i in range(REPETITIONS)]
    assert trial.metrics == [TIME_METRIC, *ALL_ENERGY]
    names = sorted(trial.timers.loc[trial.timers["node_rank"] == 0, "name"])
    assert names == ["experiment", "experiment => train",
                     *(f"experiment => train => epoch {e}" for e in range(3))]


def test_metrics_only_where_the_source_exists(data_root):
    trial = read_run(data_root / "power-limit" / "bert" / "250W")
    assert trial.metrics == [TIME_METRIC, "GPU_ENERGY_COUNTER (J)", "GPU_ENERGY_POWER (J)"]
    assert "EXTERNAL_POWER (W)" not in set(trial.counters["name"])
    assert "GPU_POWER_SAMPLES (W)" not in set(trial.counters["name"])


def test_timer_values_are_the_cores_window_figures(run_150, core):
    trial = read_run(run_150)
    for node, (_, energy) in enumerate(core):
        experiment = energy[energy["phase"] == "experiment"].iloc[0]
        epoch_1 = energy[(energy["phase"] == "epoch") & (energy["epoch"] == 1)].iloc[0]
        time = _values(trial, node, TIME_METRIC)
        assert time.loc["experiment", "inclusive"] == experiment["duration_s"] * 1e6
        for column, metric in ENERGY_METRICS.items():
            values = _values(trial, node, metric)
            assert values.loc["experiment", "inclusive"] == experiment[column]
            assert values.loc["experiment => train => epoch 1", "inclusive"] == epoch_1[column]
            assert values.loc["experiment => train => epoch 1", "exclusive"] == epoch_1[column]


def test_exclusive_is_inclusive_minus_the_childrens(run_150):
    trial = read_run(run_150)
    calls = trial.timers[trial.timers["node_rank"] == 1].set_index("name")
    assert calls.loc["experiment", "subroutines"] == 1
    assert calls.loc["experiment => train", "subroutines"] == 3
    assert (calls["calls"] == 1).all()
    for metric in trial.metrics:
        v = _values(trial, 1, metric)
        epochs = v.loc[v.index.str.contains("epoch"), "inclusive"].sum()
        assert v.loc["experiment => train", "exclusive"] == pytest.approx(
            v.loc["experiment => train", "inclusive"] - epochs, rel=1e-12)
        assert v.loc["experiment", "exclusive"] == pytest.approx(
            v.loc["experiment", "inclusive"] - v.loc["experiment => train", "inclusive"],
            rel=1e-12)
    assert _values(trial, 1, "GPU_ENERGY_COUNTER (J)").loc["experiment", "exclusive"] > 0


def test_counters_summarise_the_samples_in_the_experiment_window(run_150, core):
    trial = read_run(run_150)
    rep, energy = core[2]
    window = energy[energy["phase"] == "experiment"].iloc[0]
    inside = rep.gpu_power["time"].between(window["window_start"], window["window_end"])
    power = rep.gpu_power.loc[inside, "power_w"]
    counters = trial.counters[trial.counters["node_rank"] == 2].set_index("name")
    gpu = counters.loc["GPU_POWER (W)"]
    assert gpu["sample_count"] == inside.sum() < len(rep.gpu_power)
    assert gpu["maximum"] == power.max() and gpu["minimum"] == power.min()
    assert gpu["mean"] == pytest.approx(power.mean(), rel=1e-12)
    assert gpu["sum_squares"] == pytest.approx((power**2).sum(), rel=1e-12)
    samples = rep.power_samples["time"].between(window["window_start"], window["window_end"])
    assert counters.loc["GPU_POWER_SAMPLES (W)", "sample_count"] == samples.sum()
    assert counters.loc["SM_CLOCK (MHz)", "maximum"] == rep.gpu_power["clock_sm_mhz"].max()


def test_metadata_per_repetition(run_150):
    meta = read_run(run_150).metadata
    first = meta[meta["node_rank"] == 0].set_index("name")["value"]
    assert first["repetition"] == "power-limit/bert/150W/0"
    assert first["settings.power_limit_w"] == "150.0"
    assert first["system_info.device_name"] == "Tesla V100-SXM2-32GB"
    assert first["system_info.compute_capability"] == "7, 0"
    assert first["system_info.python_packages"] == "pynvml==8.0.4, torch==1.7.0"
    assert len(meta[meta["name"] == "repetition.fingerprint"]["value"].unique()) == REPETITIONS


def test_flatten_system_info_joins_nested_keys_and_lists():
    info = {"gpu": {"name": "A100", "clocks": {"max": 1410}}, "flags": ["a", 1, True],
            "installed_packages": ["torch==2.1", "numpy==1.26"], "ecc": None}
    assert flatten_system_info(info) == {
        "system_info.gpu.name": "A100", "system_info.gpu.clocks.max": "1410",
        "system_info.flags": "a, 1, true", "system_info.installed_packages":
        "numpy==1.26, torch==2.1", "system_info.ecc": "null"}


def _scalar(db: TaudbDatabase, sql: str, params: tuple = ()):
    return db.query(sql, params)[0][0]


MEAN_EXPERIMENT = (
    "SELECT v.inclusive_value FROM timer_value v "
    "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
    "JOIN timer_callpath c ON d.timer_callpath = c.id JOIN timer t ON c.timer = t.id "
    "JOIN metric m ON v.metric = m.id "
    "WHERE h.trial = ? AND h.thread_index = ? AND t.name = 'experiment' AND c.parent IS NULL "
    "AND m.name = ?")


def test_load_gives_taus_mean_over_repetitions_and_a_reload_replaces(tmp_path, run_150, core):
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        first = load_trial(db, read_trial_source(run_150))  # the CLI's path
        trial_id = load_trial(db, read_run(run_150))
        assert trial_id != first
        assert [(t["id"], t["total_threads"]) for t in list_trials(db)] == [(trial_id, 3)]
        assert _scalar(db, "SELECT count(*) FROM thread WHERE trial = ?", (trial_id,)) == 3 + 7
        experiment = [e[e["phase"] == "experiment"].iloc[0] for _, e in core]
        for metric, column in [("GPU_ENERGY_COUNTER (J)", "gpu_energy_counter_j"),
                               ("EXTERNAL_ENERGY (J)", "external_energy_j")]:
            expected = [row[column] for row in experiment]
            mean = _scalar(db, MEAN_EXPERIMENT, (trial_id, -1, metric))
            mean_all = _scalar(db, MEAN_EXPERIMENT, (trial_id, -6, metric))
            assert mean == mean_all == pytest.approx(np.mean(expected), rel=1e-12)
            assert _scalar(db, MEAN_EXPERIMENT, (trial_id, -5, metric)) == max(expected)
        primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                                (trial_id,)))
        assert primary["settings.label"] == "150W"
        assert primary["system_info.driver_version"] == "450.80.02"
        assert "repetition" not in primary  # differs per repetition: secondary
        secondary = _scalar(db, "SELECT count(*) FROM secondary_metadata WHERE trial = ? "
                            "AND name = 'repetition'", (trial_id,))
        assert secondary == 3
        samples = _scalar(db, "SELECT sum(v.sample_count) FROM counter_value v JOIN counter c "
                          "ON v.counter = c.id WHERE c.trial = ? AND c.name = 'GPU_POWER (W)'",
                          (trial_id,))
        trial = read_run(run_150)
        assert samples == trial.counters.loc[trial.counters["name"] == "GPU_POWER (W)",
                                             "sample_count"].sum()


def test_wrong_folders_say_what_was_expected(data_root, run_150, tmp_path):
    with pytest.raises(InputError, match="repetition folder.*give its run folder"):
        read_trial_source(run_150 / "0")
    with pytest.raises(InputError, match=r"GPU benchmark folder.*run folders \(150W, 250W\)"):
        read_trial_source(run_150.parent)
    with pytest.raises(InputError, match="not a trial source: expected a .ppk file"):
        read_trial_source(data_root)


def test_an_incomplete_repetition_holds_the_run_back(run_150, tmp_path):
    run = tmp_path / "e" / "b" / "r"
    shutil.copytree(run_150, run)
    timestamps = run / "1" / "timestamps.csv"
    timestamps.write_text("".join(timestamps.read_text().splitlines(True)[:-1]))
    with pytest.raises(IncompleteInputError, match="experiment_end"):
        read_trial_source(run)


def test_example_gpu_data_one_trial_per_run():
    if not EXAMPLE_GPU_DATA.is_dir():
        pytest.skip(f"{EXAMPLE_GPU_DATA} is not bundled")
    by_run: dict[Path, int] = {}
    for ref in find_repetitions(EXAMPLE_GPU_DATA):
        by_run[ref.path.parent] = by_run.get(ref.path.parent, 0) + 1
    for run, repetitions in by_run.items():
        trial = read_trial_source(run)
        assert len(trial.threads) == repetitions
        assert trial.name == run.relative_to(EXAMPLE_GPU_DATA).as_posix()


@pytest.mark.parametrize("run", ["150W", "250W"])
def test_trial_from_the_frames_it_reads_is_the_trial_from_every_frame(data_root, tmp_path, run):
    """A trial built from the stored repetitions reads only TRIAL_FRAMES (not the
    timestamps or the utilisation samples) and is the trial built from all of them."""
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    refs = [r for r in find_repetitions(data_root) if r.run == run]
    for ref in refs:
        save_repetition(warehouse, ref.key, read_repetition(ref))
    trials = [run_trial(refs[0].run_dir.resolve(), [
        MeasuredRepetition(load_repetition(warehouse, ref.key, ref, frames=frames),
                           repetition_energy(read_repetition(ref)), ref.key)
        for ref in refs]) for frames in (None, TRIAL_FRAMES)]
    for name in ("threads", "timers", "timer_values", "counters", "metadata"):
        pd.testing.assert_frame_equal(getattr(trials[0], name), getattr(trials[1], name),
                                      check_exact=True)
    assert trials[0].fingerprint == trials[1].fingerprint
    assert len(trials[0].counters) == REPETITIONS * (8 if run == "150W" else 6)
