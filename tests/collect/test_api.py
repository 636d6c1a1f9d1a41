"""The training-loop API: markers the readers parse, windows per epoch, and what an
exception or an interruption inside the block leaves."""

from __future__ import annotations

import os
import signal
import time

import pytest
from fake_nvml import true_energy_j

from joulehouse.collect.api import Recorder
from joulehouse.collect.interrupt import Interrupted, signals_raise
from joulehouse.collect.limits import Limits
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.layout import RepetitionRef, is_complete
from joulehouse.gpu.readers import read_repetition


def test_context_manager_and_callback_write_the_markers_the_readers_parse(tmp_path, fake_nvml):
    fake = fake_nvml()
    with Recorder(tmp_path, "power-limit", "bert", limits=Limits(power_limit_w=250),
                  interval_s=0.05) as recorder:
        callback = recorder.callback()
        callback.on_train_begin()
        for epoch in range(2):
            callback.on_epoch_begin(epoch)
            for batch in range(3):
                callback.on_train_batch_begin(batch)
                time.sleep(0.1)
                callback.on_train_batch_end(batch, {"loss": 0.1})
            callback.on_epoch_end(epoch, {"loss": 0.1})
        callback.on_train_end()
    assert recorder.folder == tmp_path / "power-limit/bert/250W/0"
    rep = read_repetition(RepetitionRef.from_key(tmp_path, "power-limit/bert/250W/0"))
    events = list(zip(rep.timestamps["event"], rep.timestamps["data"], strict=True))
    epoch = [("epoch_begin", 0), *[(f"batch_{edge}", b) for b in range(3)
                                   for edge in ("begin", "end")], ("epoch_end", 0)]
    assert events == [("experiment_begin", 0), ("train_begin", 0), *epoch,
                      *[(name, 1 if name.startswith("epoch") else data) for name, data in epoch],
                      ("train_end", 0), ("experiment_end", 0)]
    energy = repetition_energy(rep)
    assert list(energy["phase"]) == ["experiment", "train", "epoch", "epoch"]
    assert list(energy["epoch"].dropna()) == [0, 1]
    experiment = energy.iloc[0]
    truth = true_energy_j(experiment.window_start.timestamp(), experiment.window_end.timestamp())
    # a window of ~0.7 s: the edges' precision (1 ms each) is a larger share than in
    # test_collect's 2.5 s
    assert experiment.gpu_energy_j == pytest.approx(truth, rel=0.01)
    assert fake.calls == [("power_limit", 0, 250_000), ("power_limit", 0, 700_000)]


def test_an_exception_leaves_the_repetition_incomplete_an_interrupt_completes_it(
        tmp_path, fake_nvml):
    fake = fake_nvml()
    with pytest.raises(RuntimeError), Recorder(tmp_path, "e", "b", "failed") as recorder:
        recorder.epoch_begin(0)
        raise RuntimeError("training diverged")
    assert not is_complete(tmp_path / "e/b/failed/0")
    with pytest.raises(KeyboardInterrupt), Recorder(tmp_path, "e", "b", "stopped") as recorder:
        recorder.epoch_begin(0)
        raise KeyboardInterrupt
    stopped = read_repetition(RepetitionRef.from_key(tmp_path, "e/b/stopped/0"))  # valid
    events = stopped.timestamps[["event", "data"]].itertuples(index=False, name=None)
    assert list(events) == [("experiment_begin", 0), ("epoch_begin", 0),
                            ("interrupted", signal.SIGINT), ("experiment_end", 0)]
    assert fake.initialised == 0  # NVML shut down each time


def test_a_sigterm_while_the_block_ends_waits_until_the_repetition_is_complete(
        tmp_path, fake_nvml):
    fake = fake_nvml()
    with pytest.raises(Interrupted), Recorder(tmp_path, "e", "b", "r",
                                              limits=Limits(power_limit_w=250)) as recorder:
        recorder.epoch_begin(0)
        recorder.epoch_end(0)
        # the next main-thread counter read is the end edge's, as the block ends
        fake.interrupt(signal.SIGTERM, "nvmlDeviceGetTotalEnergyConsumption")
    rep = read_repetition(RepetitionRef.from_key(tmp_path, "e/b/r/0"))  # complete and valid
    assert list(rep.timestamps["event"]) == ["experiment_begin", "epoch_begin", "epoch_end",
                                             "experiment_end"]
    assert fake.calls == [("power_limit", 0, 250_000), ("power_limit", 0, 700_000)]
    assert fake.initialised == 0


def test_a_second_signal_while_an_interrupted_block_ends_waits_until_it_is_complete(
        tmp_path, fake_nvml):
    fake_nvml()
    with signals_raise(), pytest.raises(Interrupted) as stop, \
            Recorder(tmp_path, "e", "b", "r") as recorder:
        writer = recorder.measurement.writer
        write_event = writer.event

        def then_sigterm(name, *args):  # SIGTERM right after the interrupted event
            write_event(name, *args)
            if name == "interrupted":
                os.kill(os.getpid(), signal.SIGTERM)
        writer.event = then_sigterm
        raise KeyboardInterrupt
    assert stop.value.signum == signal.SIGTERM  # raised once the repetition was ended
    rep = read_repetition(RepetitionRef.from_key(tmp_path, "e/b/r/0"))  # complete and valid
    assert list(rep.timestamps["event"]) == ["experiment_begin", "interrupted",
                                             "experiment_end"]
