"""PowerAPI reports as TAUdb trials (mapping/powerapi.py): one per sensor and day, targets as
threads, a timer per window with measured and estimated energy, power as user events."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse.errors import InputError
from joulehouse.powerapi import layout
from joulehouse.powerapi.reports import read_reports
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.mapping.powerapi import read_trials, session_trials
from joulehouse.taudb.read import read_trial_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"
HWPC = EXAMPLES / "smartwatts_timeline.jsonl"
POWER = EXAMPLES / "power.jsonl"
FIXTURE_J = 12.19696044921875
JOULEHOUSE = Path(sys.executable).with_name("joulehouse")
METRICS = ["TIME", "MEASURED CPU ENERGY (J)", "ESTIMATED CPU ENERGY (J)"]
TARGETS = ["all", "influxdb", "mongo", "powerapi-sensor", "rapl"]


def _values(trial) -> dict[tuple[int, str, str], float]:
    return {(node, name, metric): value for node, name, metric, value in trial.timer_values[
        ["node_rank", "name", "metric", "inclusive"]].itertuples(index=False)}


def _power_reports() -> pd.DataFrame:
    """power.jsonl parsed with json alone: target and power per report."""
    reports = [json.loads(line) for line in POWER.read_text().splitlines()]
    return pd.DataFrame({"target": [r["target"] for r in reports],
                         "power": [r["power"] for r in reports]})


def test_the_example_folder_is_one_trial_of_its_sensor_and_day():
    trial = read_trial_source(EXAMPLES)
    assert trial.name == "sensor_test/2021-01-13" and trial.data_source == 999
    assert trial.metrics == METRICS
    assert trial.source_key == f"{EXAMPLES}#sensor_test/2021-01-13"
    assert trial.trial_metadata == {"joulehouse.source": "powerapi sensor day",
                                    "powerapi.sensor": "sensor_test",
                                    "powerapi.day": "2021-01-13", "powerapi.window": "1min"}
    assert trial.threads.to_numpy().tolist() == [[node, 0, 0] for node in range(5)]
    metadata = trial.metadata.pivot(index="node_rank", columns="name", values="value")
    assert metadata["target"].tolist() == TARGETS
    assert metadata["method"].tolist() == ["measured"] + ["estimated"] * 4
    # one window (the fixture's 10.041 s), entered by every target once
    assert trial.timers[["node_rank", "name", "group_names", "calls", "subroutines"]
                        ].values.tolist() == [[node, "window 09:51:00", "POWERAPI_WINDOW", 1.0,
                                               0.0] for node in range(5)]
    values = _values(trial)
    assert len(values) == 15
    assert values[(0, "window 09:51:00", "MEASURED CPU ENERGY (J)")] == FIXTURE_J
    estimated = {TARGETS[node]: values[(node, "window 09:51:00", "ESTIMATED CPU ENERGY (J)")]
                 for node in range(1, 5)}
    assert estimated == pytest.approx({"influxdb": 0.928093265, "mongo": 5.36458944,
                                       "powerapi-sensor": 4.684579202, "rapl": 12.196961691},
                                      rel=1e-12)
    # a target has one method: the other metric is 0 (TAUdb has no missing values)
    assert values[(0, "window 09:51:00", "ESTIMATED CPU ENERGY (J)")] == 0.0
    assert all(values[(node, "window 09:51:00", "MEASURED CPU ENERGY (J)")] == 0.0
               for node in range(1, 5))
    assert [values[(node, "window 09:51:00", "TIME")] for node in range(5)] == pytest.approx(
        [10.041e6] * 5)
    assert (trial.timer_values["exclusive"] == trial.timer_values["inclusive"]).all()


def test_power_reports_and_the_estimates_error_are_user_events():
    trial = read_trial_source(EXAMPLES)
    events = trial.counters.set_index(["node_rank", "name"])
    assert list(events.index) == [(0, "CPU ESTIMATE ERROR (%)")] + [
        (node, "CPU POWER (W)") for node in range(1, 5)]
    power = _power_reports()  # one socket: a report is a tick's power
    for node, target in enumerate(TARGETS[1:], start=1):
        samples = power.loc[power["target"] == target, "power"].to_numpy()
        row = events.loc[(node, "CPU POWER (W)")]
        assert row["sample_count"] == 10
        assert (row["maximum"], row["minimum"]) == (samples.max(), samples.min())
        assert row["mean"] == pytest.approx(samples.mean(), rel=1e-12)
        assert row["sum_squares"] == pytest.approx(np.sum(samples**2), rel=1e-12)
    cgroups = 0.928093265 + 5.36458944 + 4.684579202
    error = events.loc[(0, "CPU ESTIMATE ERROR (%)")]
    assert error["sample_count"] == 1
    assert error["mean"] == pytest.approx((cgroups - FIXTURE_J) / FIXTURE_J * 100, rel=1e-9)
    assert error["mean"] == pytest.approx(-10.0, abs=1e-4)


def test_two_second_windows_are_timers_whose_energies_add_up():
    items = [layout.classify(HWPC), layout.classify(POWER)]
    found = read_reports(items)
    trial, = session_trials(found.window_energy("2s"), found.power, window="2s",
                            source="s", fingerprint="f")
    names = [f"window 09:51:{second}" for second in ("20", "22", "24", "26", "28", "30")]
    assert sorted(trial.timers["name"].unique()) == names
    values = _values(trial)
    assert sum(values[(0, name, "MEASURED CPU ENERGY (J)")] for name in names) == pytest.approx(
        FIXTURE_J, rel=1e-12)
    assert values[(0, names[0], "TIME")] == pytest.approx(0.374e6)  # 21.626 to 22
    assert values[(0, names[1], "TIME")] == pytest.approx(2e6)
    assert values[(0, names[-1], "TIME")] == pytest.approx(1.667e6)  # 30 to 31.667
    assert trial.counters.loc[trial.counters["node_rank"] == 0, "sample_count"].tolist() == [6]


def test_windows_must_be_whole_seconds_dividing_a_day():
    found = read_reports([layout.classify(HWPC)])
    for window in ("7s", "500ms"):
        with pytest.raises(ValueError, match="whole seconds dividing a day"):
            session_trials(found.window_energy(window), None, window=window, source="s",
                           fingerprint="f")


def _sensors_and_days(folder: Path) -> Path:
    """The fixture as sensor_test and node2 on 2021-01-13, and sensor_test again a day later."""
    folder.mkdir()
    for name, old, new in (("a.jsonl", "", ""), ("b.jsonl", "sensor_test", "node2"),
                           ("c.jsonl", "2021-01-13", "2021-01-14")):
        text = HWPC.read_text()
        (folder / name).write_text(text.replace(old, new) if old else text)
    shutil.copy(POWER, folder / "power.jsonl")
    return folder


def test_one_trial_per_sensor_and_day(tmp_path):
    folder = _sensors_and_days(tmp_path / "reports")
    trials = read_trials(folder)
    assert [(t.name, t.source_key, len(t.threads)) for t in trials] == [
        ("node2/2021-01-13", f"{folder}#node2/2021-01-13", 1),  # its HWPC reports only
        ("sensor_test/2021-01-13", f"{folder}#sensor_test/2021-01-13", 5),
        ("sensor_test/2021-01-14", f"{folder}#sensor_test/2021-01-14", 1)]
    assert trials[0].metrics == ["TIME", "MEASURED CPU ENERGY (J)"]
    assert _values(trials[0])[(0, "window 09:51:00", "MEASURED CPU ENERGY (J)")] == FIXTURE_J
    assert trials[0].counters.empty  # no power reports, no estimates to compare
    with pytest.raises(InputError, match="3 trials, not one: node2/2021-01-13, "):
        read_trial_source(folder)


def test_loaded_and_loaded_again_replaces_each_trial(tmp_path):
    folder = _sensors_and_days(tmp_path / "reports")
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        for _ in range(2):
            for trial in read_trials(folder):
                load_trial(db, trial)
        trials = list_trials(db)
    assert [(t["name"], t["total_threads"], t["source_key"]) for t in trials] == [
        ("node2/2021-01-13", 1, f"{folder}#node2/2021-01-13"),
        ("sensor_test/2021-01-13", 5, f"{folder}#sensor_test/2021-01-13"),
        ("sensor_test/2021-01-14", 1, f"{folder}#sensor_test/2021-01-14")]


def test_taudb_load_takes_powerapi_paths(tmp_path):
    folder = _sensors_and_days(tmp_path / "reports")
    url = f"sqlite:///{tmp_path}/taudb.sqlite"
    done = subprocess.run([str(JOULEHOUSE), "taudb", "load", url, str(EXAMPLES), str(folder)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == [
        f"trial 1: sensor_test/2021-01-13 (5 threads) from {EXAMPLES}",
        f"trial 2: node2/2021-01-13 (1 threads) from {folder}",
        f"trial 3: sensor_test/2021-01-13 (5 threads) from {folder}",
        f"trial 4: sensor_test/2021-01-14 (1 threads) from {folder}"]
    done = subprocess.run([str(JOULEHOUSE), "taudb", "load", url, str(folder), "--name", "x"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"joulehouse: {folder}: --name names one trial; this holds 3\n"


def test_what_holds_powerapi_reports():
    gpu_data = EXAMPLES.parent / "gpu-data"
    assert layout.holds_reports(EXAMPLES) and layout.holds_reports(POWER)
    assert layout.holds_reports(EXAMPLES / "hwpc-csv" / "rapl.csv")
    # a GPU benchmark's gpu-power.csv has a power column but no sensor nor target
    gpu_power = gpu_data / "power-limit" / "bert" / "150W" / "0" / "gpu-power.csv"
    assert layout.classify(gpu_power).kind == layout.OTHER
    assert not layout.holds_reports(gpu_data)
    assert not layout.holds_reports(EXAMPLES.parent / "tau-profiles")
    assert not layout.holds_reports(EXAMPLES / "no-such-file")


def test_reports_without_energy_are_an_error_naming_the_path(tmp_path):
    one = tmp_path / "one.jsonl"  # a single power report: its tick, hence its energy, unknown
    one.write_text(POWER.read_text().splitlines()[0] + "\n")
    with pytest.raises(InputError, match="no energy in its reports"):
        read_trials(one)
