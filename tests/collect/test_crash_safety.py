"""A collector killed, interrupted or terminated, in a subprocess with the fake NVML:
SIGKILL leaves an incomplete repetition no sensor takes; SIGINT and SIGTERM leave a
complete, valid one, limits restored."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import PYTHON, sleep_command

from joulehouse.collect.interrupt import Interrupted
from joulehouse.collect.limits import Limits
from joulehouse.collect.runner import Target, collect
from joulehouse.errors import IncompleteInputError
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.layout import RepetitionRef, is_complete
from joulehouse.gpu.readers import read_gpu_power, read_repetition
from joulehouse.gpu.scan import ScanState, scan

KEY = "power-limit/bert/250W/0"


def _args(root, command: list[str] | None = None) -> list[str]:
    return ["collect", "--data-root", str(root), "--experiment", "power-limit",
            "--benchmark", "bert", "--power-limit", "250", "--interval", "0.05", "--",
            *(command or sleep_command(60))]


def _ready(root) -> list[str]:
    """The repetitions the sensor's scan hands out (quiet period long past)."""
    result = scan(root, ScanState(), quiet_s=1, now=time.time() + 100)
    return [ready.ref.key for ready in result.ready]


def test_sigkill_leaves_an_incomplete_repetition_the_sensor_does_not_take(tmp_path, collector):
    root = tmp_path / "root"
    run = collector(_args(root))
    folder = root / KEY
    run.wait_for_rows(folder / "gpu-power.csv", 30)  # measured for a while, flushed
    os.killpg(run.process.pid, signal.SIGKILL)  # the collector and its command
    run.process.wait()
    assert not is_complete(folder)
    with pytest.raises(IncompleteInputError, match="no experiment_end event yet"):
        read_repetition(RepetitionRef.from_key(root, KEY))
    assert _ready(root) == []
    assert len(read_gpu_power(folder / "gpu-power.csv")) >= 30  # what was measured is kept
    # the limit stays set: only SIGKILL can do that (the log has the set, no restore)
    assert run.calls() == [["power_limit", 0, 250_000]]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_sigterm_leave_a_complete_valid_repetition_limits_restored(
        tmp_path, collector, signum):
    root = tmp_path / "root"
    run = collector(_args(root))
    run.wait_for_rows(root / KEY / "gpu-power.csv", 20)
    run.process.send_signal(signum)  # the collector only, as `kill` does
    assert run.process.wait(timeout=60) == 128 + signum
    assert "marked interrupted (only part of the command)" in run.process.stderr.read()
    rep = read_repetition(RepetitionRef.from_key(root, KEY))
    # complete and valid, and marked: the command was measured only up to the signal
    events = rep.timestamps[["event", "data"]].itertuples(index=False, name=None)
    assert list(events) == [("experiment_begin", 0), ("interrupted", signum),
                            ("experiment_end", 0)]
    assert len(rep.gpu_power) >= 20 and len(rep.power_samples) > 0
    assert list(repetition_energy(rep)["phase"]) == ["experiment"]  # no window of its own
    assert _ready(root) == [KEY]
    assert run.calls() == [["power_limit", 0, 250_000], ["power_limit", 0, 700_000]]


def test_a_second_sigterm_while_the_command_stops_waits_until_the_repetition_is_complete(
        tmp_path, collector):
    root, marker = tmp_path / "root", tmp_path / "stopping"
    # a command that takes a while to stop after SIGTERM: the collector waits for it
    slow_stop = [PYTHON, "-c", ("import signal, sys, time\n"
                                "def stop(*_):\n"
                                f"    open({str(marker)!r}, 'w').close(); time.sleep(5)\n"
                                "    sys.exit(0)\n"
                                "signal.signal(signal.SIGTERM, stop); time.sleep(60)")]
    run = collector(_args(root, slow_stop))
    run.wait_for_rows(root / KEY / "gpu-power.csv", 20)
    run.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:  # the command got it
        time.sleep(0.05)
    run.process.send_signal(signal.SIGTERM)  # the sampler thread is alive: it may receive it
    assert run.process.wait(timeout=60) == 143
    assert is_complete(root / KEY)
    rep = read_repetition(RepetitionRef.from_key(root, KEY))
    assert list(rep.timestamps["event"]) == ["experiment_begin", "interrupted", "experiment_end"]
    assert run.calls() == [["power_limit", 0, 250_000], ["power_limit", 0, 700_000]]


def test_a_sigterm_while_a_finished_repetition_ends_waits_until_it_is_complete(
        tmp_path, fake_nvml):
    fake = fake_nvml()

    def arm(*_) -> None:  # called while the command runs: the next main-thread counter
        # read is the end edge's, after the command finished
        fake.interrupt(signal.SIGTERM, "nvmlDeviceGetTotalEnergyConsumption")
    with pytest.raises(Interrupted) as stop:
        collect(sleep_command(1.5), Target(tmp_path, "power-limit", "bert"), repetitions=2,
                limits=Limits(power_limit_w=250), interval_s=0.05, progress=arm)
    assert stop.value.signum == signal.SIGTERM
    assert "nvmlDeviceGetTotalEnergyConsumption" not in vars(fake)  # it was sent
    rep = read_repetition(RepetitionRef.from_key(tmp_path, KEY))  # complete and valid
    assert list(rep.timestamps["event"]) == ["experiment_begin", "experiment_end"]
    assert not (tmp_path / KEY).with_name("1").exists()  # no repetition after the signal
    assert fake.calls == [("power_limit", 0, 250_000), ("power_limit", 0, 700_000)]
