"""Energy of generated repetitions against their exact ground truth."""

import numpy as np
import pandas as pd
import pytest

from joulehouse.gpu.energy import REPETITION_ENERGY_COLUMNS, repetition_energy
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.schemas import REPETITION_ENERGY_SCHEMA


def relative_error(measured: pd.Series, truth: pd.Series) -> np.ndarray:
    return np.abs(measured.to_numpy() / truth.to_numpy() - 1)


@pytest.mark.parametrize("hz", [7.0, 50.0])
def test_every_method_matches_the_ground_truth(make_repetition, tmp_path, hz):
    ref, truth = make_repetition(tmp_path, gpu_power_interval_s=1 / hz, samples_hz=hz,
                                 external_interval_s=1 / hz, seed=int(hz))
    energy = repetition_energy(read_repetition(ref))
    expected = truth.windows
    assert list(energy["phase"]) == ["experiment", "train", "epoch", "epoch", "epoch"]
    assert list(energy["epoch"].astype("float").fillna(-1)) == [-1, -1, 0, 1, 2]
    assert (energy["window_start"] == expected["window_start"]).all()
    assert (energy["window_end"] == expected["window_end"]).all()
    np.testing.assert_allclose(energy["duration_s"], expected["duration_s"], atol=1e-6)
    assert relative_error(energy["gpu_energy_counter_j"], expected["gpu_energy_j"]).max() < 1e-3
    for column in ("gpu_energy_power_j", "gpu_energy_samples_j"):
        assert relative_error(energy[column], expected["gpu_energy_j"]).max() < 5e-3, column
    assert relative_error(energy["external_energy_j"], expected["external_energy_j"]).max() < 5e-3
    assert (energy["counter_resets"] == 0).all()
    assert (energy[["power_gap_count", "samples_gap_count", "external_gap_count"]] == 0).all().all()


def test_output_columns_types_and_derived_values(repetition, tmp_path):
    ref, _ = repetition
    energy = repetition_energy(read_repetition(ref))
    assert list(energy.columns) == REPETITION_ENERGY_COLUMNS
    assert REPETITION_ENERGY_COLUMNS[:5] == [
        "data_root", "repetition", "experiment", "benchmark", "run"]
    REPETITION_ENERGY_SCHEMA.validate(energy)
    row = energy.iloc[0]
    assert (row.data_root, row.repetition, row.experiment, row.benchmark, row.run) == (
        tmp_path.name, "power-limit/bert/250W/0", "power-limit", "bert", "250W")
    named = repetition_energy(read_repetition(ref), data_root="cluster-a")
    assert (named["data_root"] == "cluster-a").all()
    with pytest.raises(ValueError, match="not be empty"):
        repetition_energy(read_repetition(ref), data_root="")
    assert row.power_limit_w == 250.0 and row.label == "250W"
    assert row.gpu_energy_method == "counter"
    assert row.gpu_energy_j == row.gpu_energy_counter_j
    assert row.gpu_mean_power_power_w == pytest.approx(row.gpu_energy_power_j / row.duration_s)
    assert row.edp_js == pytest.approx(row.gpu_energy_counter_j * row.duration_s)
    assert row.power_vs_counter_pct == pytest.approx(
        (row.gpu_energy_power_j / row.gpu_energy_counter_j - 1) * 100)


def test_local_timezone_gives_the_same_utc_windows_and_energy(make_repetition, tmp_path):
    ref_utc, truth = make_repetition(tmp_path / "utc")
    ref_ny, _ = make_repetition(tmp_path / "ny", timezone="America/New_York")
    text = (ref_ny.path / "timestamps.csv").read_text()
    assert "2020-11-16 07:49:17,experiment_begin" in text  # local, UTC-5, no fraction
    utc = repetition_energy(read_repetition(ref_utc), data_root="lab")
    ny = repetition_energy(read_repetition(ref_ny, timezone="America/New_York"), data_root="lab")
    pd.testing.assert_frame_equal(utc, ny)
    assert utc["window_start"].iloc[0] == truth.windows["window_start"].iloc[0]


def test_counter_reset_is_counted_and_energy_stays_right(make_repetition, tmp_path):
    ref, truth = make_repetition(tmp_path, counter_reset_at_s=20.0)
    energy = repetition_energy(read_repetition(ref)).set_index(["phase", "epoch"], drop=False)
    assert list(energy["counter_resets"]) == [1, 1, 1, 0, 0]  # epoch 0 holds 20 s
    lost = truth.max_gpu_power_w * truth.max_gpu_power_interval_s  # one polling interval
    error = (energy["gpu_energy_counter_j"].to_numpy() - truth.windows["gpu_energy_j"].to_numpy())
    assert np.all(error <= 1e-3 * truth.windows["gpu_energy_j"].to_numpy() + 1e-6)
    assert np.all(-error <= lost)
    assert abs(error[3]) < 1e-3 * truth.windows["gpu_energy_j"].iloc[3]  # epoch 1: no reset


def test_gpu_without_counter_falls_back_to_power(make_repetition, tmp_path):
    ref, truth = make_repetition(tmp_path, gpu_model="P100")
    rep = read_repetition(ref)
    assert "total_energy_j" not in rep.gpu_power.columns
    energy = repetition_energy(rep)
    assert energy["gpu_energy_counter_j"].isna().all()
    assert energy["counter_resets"].isna().all() and energy["counter_gap_count"].isna().all()
    assert (energy["gpu_energy_method"] == "power").all()
    assert relative_error(energy["gpu_energy_j"], truth.windows["gpu_energy_j"]).max() < 5e-3
    assert energy["power_vs_counter_pct"].isna().all()


def test_missing_optional_files_leave_their_methods_empty(make_repetition, tmp_path):
    ref, _ = make_repetition(tmp_path, with_external=False, with_samples=False)
    (ref.path / "system_info.json").unlink()
    rep = read_repetition(ref)
    assert rep.external_power is None and rep.samples == {} and rep.system_info is None
    energy = repetition_energy(rep)
    assert energy["external_energy_j"].isna().all()
    assert energy["gpu_energy_samples_j"].isna().all()
    assert energy["gpu_energy_counter_j"].notna().all()


def test_gaps_in_gpu_power_are_reported_not_bridged(make_repetition, tmp_path):
    ref, truth = make_repetition(tmp_path)
    path = ref.path / "gpu-power.csv"
    lines = path.read_text().splitlines(keepends=True)
    times = pd.to_datetime([line.split(",")[1] for line in lines[1:]], format="ISO8601")
    hole = (times > pd.Timestamp("2020-11-16 12:49:37")) & (times < pd.Timestamp(
        "2020-11-16 12:49:47"))
    path.write_text("".join([lines[0], *(line for line, drop in zip(lines[1:], hole,
                                                                      strict=True) if not drop)]))
    kept = times[~hole]
    gap = (kept[np.argmax(kept > pd.Timestamp("2020-11-16 12:49:37"))]
           - kept[np.argmax(kept > pd.Timestamp("2020-11-16 12:49:37")) - 1]).total_seconds()
    energy = repetition_energy(read_repetition(ref), max_gap_s=5.0)
    experiment = energy.iloc[0]
    assert experiment.power_gap_count == 1
    assert experiment.power_gap_s == pytest.approx(gap)
    assert experiment.gpu_energy_power_j < 0.9 * truth.windows["gpu_energy_j"].iloc[0]
    assert experiment.counter_gap_count == 0  # the counter kept counting
    assert experiment.gpu_energy_counter_j == pytest.approx(
        truth.windows["gpu_energy_j"].iloc[0], rel=1e-3)
    bridged = repetition_energy(read_repetition(ref), max_gap_s=60.0).iloc[0]
    assert bridged.power_gap_count == 0


def test_batch_events_do_not_add_windows(make_repetition, tmp_path):
    ref, _ = make_repetition(tmp_path, batches_per_epoch=5)
    rep = read_repetition(ref)
    assert (rep.timestamps["event"] == "batch_begin").sum() == 15
    assert len(repetition_energy(rep)) == 5


@pytest.mark.parametrize(("unit", "scale"), [("mW", 1.0), ("cW", 10.0), ("W", 1000.0)])
def test_external_power_unit_is_configurable(make_repetition, tmp_path, unit, scale):
    ref, truth = make_repetition(tmp_path, external_unit="mW")
    rep = read_repetition(ref, external_power_unit=unit)
    experiment = repetition_energy(rep).iloc[0]
    assert experiment.external_energy_j == pytest.approx(
        truth.windows["external_energy_j"].iloc[0] * scale, rel=5e-3)
    assert list(rep.external_power.columns[:2]) == ["time", "external_power_w"]
    channels = rep.external_power[["d0c0_w", "d0c1_w", "d1c0_w", "d1c1_w"]].sum(axis=1)
    np.testing.assert_allclose(rep.external_power["external_power_w"], channels)


def test_energy_facts_rows_one_per_available_method(make_repetition, tmp_path):
    from joulehouse.facts import ENERGY_FACTS_COLUMNS, ENERGY_FACTS_SCHEMA
    from joulehouse.gpu.energy import energy_facts_rows

    ref, _ = make_repetition(tmp_path, with_external=False)
    energy = repetition_energy(read_repetition(ref))
    facts = energy_facts_rows(energy)
    ENERGY_FACTS_SCHEMA.validate(facts)
    assert list(facts.columns) == ENERGY_FACTS_COLUMNS
    assert list(zip(facts["component"], facts["method"], strict=True)) == [
        ("gpu", "counter"), ("gpu", "power"), ("gpu", "samples")]
    assert (facts["source"] == "gpu-benchmark").all()
    assert (facts["entity"] == f"{tmp_path.name}/{ref.key}").all()
    assert facts["energy_j"].iloc[0] == energy["gpu_energy_counter_j"].iloc[0]
    assert len(energy_facts_rows(energy.iloc[0:0])) == 0


def test_energy_facts_rows_leave_out_methods_with_unbridged_gaps(make_repetition, tmp_path):
    from joulehouse.gpu.energy import energy_facts_rows

    ref, _ = make_repetition(tmp_path, with_external=False)
    energy = repetition_energy(read_repetition(ref))
    energy.loc[energy["phase"] == "experiment", "power_gap_count"] = 1
    facts = energy_facts_rows(energy)
    assert list(facts["method"]) == ["counter", "samples"]
