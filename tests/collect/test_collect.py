"""``joulehouse collect`` against the fake NVML: files the readers validate, energy
matching the fake's ground truth, every buffered sample, limits and errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pynvml
import pytest
from conftest import PYTHON, sleep_command
from fake_nvml import POWER_SAMPLE_US, true_energy_j

from joulehouse.cli import main
from joulehouse.collect.limits import Limits
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.layout import RepetitionRef, is_complete, parse_settings
from joulehouse.gpu.readers import read_gpu_power, read_repetition, read_samples

SYSTEM_INFO_FIELDS = {"device_name", "compute_capability", "driver_version", "cuda_version",
                      "nvml_version", "os", "python_packages", "enforced_power_limit"}


def _collect(root, *options: str, command: list[str]) -> int:
    return main(["collect", "--data-root", str(root), "--experiment", "power-limit",
                 "--benchmark", "bert", "--interval", "0.05", *options, "--", *command])


def test_repetition_validates_and_matches_ground_truth(tmp_path, fake_nvml, capsys):
    fake = fake_nvml(gpus=2)
    assert _collect(tmp_path, "--power-limit", "250", command=sleep_command(2.5)) == 0
    ref = RepetitionRef.from_key(tmp_path, "power-limit/bert/250W/0")
    assert is_complete(ref.path)
    rep = read_repetition(ref)  # the platform's own readers and schemas
    assert rep.settings.power_limit_w == 250.0
    assert set(rep.samples) == {"total_power", "gpu_utilization", "memory_utilization"}
    assert "pci_tx_kib_s" not in rep.gpu_power  # not supported by the GPU: left out
    assert (rep.gpu_power["enforced_power_limit_w"] == 250.0).all()
    info = rep.system_info
    assert SYSTEM_INFO_FIELDS <= info.keys()
    assert info["device_name"] == "NVIDIA H100 80GB HBM3" and info["cuda_version"] == "12.4"
    assert info["enforced_power_limit"] == 250_000 and info["gpu_count"] == 2

    experiment = repetition_energy(rep).iloc[0]
    truth = true_energy_j(experiment.window_start.timestamp(), experiment.window_end.timestamp())
    assert experiment.duration_s >= 2.5
    assert experiment.gpu_energy_method == "counter"
    assert experiment.gpu_energy_j == pytest.approx(truth, rel=0.005)
    assert experiment.gpu_energy_samples_j == pytest.approx(truth, rel=0.005)
    # the part-time power readings (25 ms of every 100 ms) disagree, but not wildly
    assert experiment.power_vs_counter_pct != 0 and abs(experiment.power_vs_counter_pct) < 10

    # GPU 1: the same files in gpu1/, valid for the same readers
    second = ref.path / "gpu1"
    assert len(read_gpu_power(second / "gpu-power.csv")) == len(rep.gpu_power)
    # (the last read of each buffer may come either side of a new sample)
    assert abs(len(read_samples(second / "total_power_samples.csv"))
               - len(rep.power_samples)) <= 1
    assert json.loads((second / "system_info.json").read_text())["gpu_index"] == 1

    # limits: set on both GPUs, restored on both
    assert fake.calls == [("power_limit", 0, 250_000), ("power_limit", 1, 250_000),
                          ("power_limit", 1, 700_000), ("power_limit", 0, 700_000)]
    assert "repetition 1 of 1" in capsys.readouterr().err


def _sample_gaps(path) -> np.ndarray:
    stamps = np.loadtxt(path, delimiter=",", skiprows=1, usecols=1, dtype="int64")
    return np.diff(stamps)


def test_sample_buffer_read_often_enough_to_lose_nothing(tmp_path, fake_nvml):
    fake = fake_nvml(power_buffer=100)  # 2 s of 50 Hz samples; read every second
    assert _collect(tmp_path, "--run", "kept", command=sleep_command(3.0)) == 0
    folder = tmp_path / "power-limit/bert/kept/0"
    gaps = _sample_gaps(folder / "total_power_samples.csv")
    assert fake.lost == 0
    assert len(gaps) > 3.0 / 0.02 and (gaps == POWER_SAMPLE_US).all()  # every sample, once


def test_a_buffer_too_small_loses_samples_and_the_fake_counts_them(tmp_path, fake_nvml):
    fake = fake_nvml(power_buffer=10)  # 0.2 s: overwritten between two reads
    assert _collect(tmp_path, "--run", "lossy", command=sleep_command(2.0)) == 0
    gaps = _sample_gaps(tmp_path / "power-limit/bert/lossy/0/total_power_samples.csv")
    assert (gaps > POWER_SAMPLE_US).any()  # holes where the buffer was overwritten
    # the fake counts those, and the samples before the first read that were lost too
    assert fake.lost >= (gaps // POWER_SAMPLE_US - 1).sum() > 0


def test_run_names_are_the_settings_the_readers_parse_back(tmp_path, fake_nvml):
    fake = fake_nvml()
    assert _collect(tmp_path, "--clocks", "877,1065", "--repetitions", "2",
                    command=[PYTHON, "-c", "pass"]) == 0
    assert _collect(tmp_path, command=[PYTHON, "-c", "pass"]) == 0  # no limit: GPU 0's now
    run = tmp_path / "power-limit/bert"
    assert sorted(p.name for p in run.iterdir()) == ["700W", "877MHz,1065MHz"]
    assert sorted(p.name for p in (run / "877MHz,1065MHz").iterdir()) == ["0", "1"]
    assert fake.calls == [("clocks", 0, 877, 1065), ("clocks", 0, 2619, 1980)]
    for limits in (Limits(power_limit_w=250), Limits(power_limit_w=187.5),
                   Limits(clocks_mhz=(877, 1065))):
        settings = parse_settings(limits.run_name, "clock-limit")
        assert (settings.power_limit_w, settings.memory_clock_mhz, settings.sm_clock_mhz) == (
            limits.power_limit_w, *(limits.clocks_mhz or (None, None)))


def test_failed_command_status_passed_on_limits_restored_repetition_incomplete(
        tmp_path, fake_nvml, capsys):
    fake = fake_nvml()
    code = _collect(tmp_path, "--power-limit", "300", "--repetitions", "3",
                    command=[PYTHON, "-c", "import sys; sys.exit(3)"])
    assert code == 3
    run = tmp_path / "power-limit/bert/300W"
    assert [p.name for p in run.iterdir()] == ["0"]  # no repetition after the failure
    assert not is_complete(run / "0")
    assert fake.calls == [("power_limit", 0, 300_000), ("power_limit", 0, 700_000)]
    assert "left incomplete: the command exited with 3" in capsys.readouterr().err


def test_command_not_found_is_127_with_limits_restored(tmp_path, fake_nvml, capsys):
    fake = fake_nvml()
    assert _collect(tmp_path, "--power-limit", "300", command=["no-such-command-xyz"]) == 127
    assert "no-such-command-xyz: command not found" in capsys.readouterr().err
    assert fake.calls[-1] == ("power_limit", 0, 700_000)


def test_without_rights_to_set_limits_nothing_runs(tmp_path, fake_nvml, capsys):
    fake_nvml(permission=False)
    marker = tmp_path / "ran"
    code = _collect(tmp_path / "root", "--power-limit", "250",
                    command=[PYTHON, "-c", f"open({str(marker)!r}, 'w')"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no permission to set the power limit (NVMLError_NoPermission)" in err
    assert "nothing run" in err and "Traceback" not in err
    assert not marker.exists() and not (tmp_path / "root").exists()


def test_power_limit_outside_the_gpu_range_is_a_usage_error(tmp_path, fake_nvml, capsys):
    fake = fake_nvml()
    assert _collect(tmp_path, "--power-limit", "900", command=[PYTHON, "-c", "pass"]) == 2
    assert "outside what it accepts, 200-700 W" in capsys.readouterr().err
    assert fake.calls == []


def test_no_gpu_is_exit_2_with_the_error_explained(tmp_path, fake_nvml, capsys):
    fake_nvml(absent=True)
    assert _collect(tmp_path, command=[PYTHON, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "NVMLError_LibraryNotFound" in err and "no NVIDIA driver" in err


def test_no_gpu_with_the_real_pynvml(tmp_path):
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    result = subprocess.run([sys.executable, "-m", "joulehouse.cli", "collect", "--data-root",
                             str(tmp_path), "--experiment", "e", "--benchmark", "b", "--",
                             "true"], check=False, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("joulehouse: NVML not found (NVMLError_LibraryNotFound)")
    assert "Traceback" not in result.stderr and not any(tmp_path.iterdir())


def test_usage_errors_run_nothing(tmp_path, fake_nvml, capsys):
    fake = fake_nvml()
    for options in (["--"], ["--power-limit", "250", "--clocks", "877,1065", "--", "true"],
                    ["--clocks", "877", "--", "true"], ["--interval", "0", "--", "true"]):
        with pytest.raises(SystemExit) as stop:
            main(["collect", "--data-root", str(tmp_path), "--experiment", "e",
                  "--benchmark", "b", *options])
        assert stop.value.code == 2, options
    assert "give the command to measure after --" in capsys.readouterr().err
    assert fake.initialised == 0 and not any(tmp_path.iterdir())


def test_a_gpu_lost_while_measuring_leaves_the_repetition_incomplete(
        tmp_path, fake_nvml, capsys):
    fake = fake_nvml(lost_after_s=1.0)
    assert _collect(tmp_path, "--power-limit", "300", command=sleep_command(2.0)) == 2
    err = capsys.readouterr().err
    assert "sampling stopped early: NVML error (NVMLError_GpuIsLost)" in err
    assert "Traceback" not in err
    folder = tmp_path / "power-limit/bert/300W/0"
    assert not is_complete(folder)
    assert len(read_gpu_power(folder / "gpu-power.csv")) > 5  # what was read is kept
    assert fake.calls[-1] == ("power_limit", 0, 700_000)


@pytest.mark.parametrize(("option", "call"), [
    (["--power-limit", "250"], "nvmlDeviceSetPowerManagementLimit"),
    (["--clocks", "877,1065"], "nvmlDeviceSetApplicationsClocks")])
def test_sigterm_while_a_limit_is_being_set_restores_it(tmp_path, fake_nvml, capsys, option,
                                                        call):
    fake = fake_nvml(gpus=2)
    fake.interrupt(signal.SIGTERM, call)  # arrives while NVML sets GPU 0's limit
    marker = tmp_path / "ran"
    code = _collect(tmp_path / "root", *option,
                    command=[PYTHON, "-c", f"open({str(marker)!r}, 'w')"])
    assert code == 143 and "interrupted (SIGTERM)" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "root").exists()  # nothing run
    # GPU 0's limit was set and is restored; GPU 1's was never touched
    assert [gpu.power_limit_mw for gpu in fake.gpus] == [700_000, 700_000]
    assert [gpu.app_clocks for gpu in fake.gpus] == [(2619, 1980), (2619, 1980)]
    assert len(fake.calls) == 2 and fake.calls[0][1] == fake.calls[1][1] == 0
