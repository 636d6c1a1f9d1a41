"""Measuring from inside a Python training loop: a context manager and a callback.

    from joulehouse.collect.api import Recorder

    with Recorder("/data/gpu", "power-limit", "bert", limits=Limits(power_limit_w=250)) as rec:
        rec.train_begin()
        for epoch in range(epochs):
            rec.epoch_begin(epoch)
            for batch, data in enumerate(loader):
                rec.batch_begin(batch)
                ...
                rec.batch_end(batch)
            rec.epoch_end(epoch)
        rec.train_end()

or ``fit(..., callbacks=[rec.callback()])`` with a framework that calls
Keras-named hooks (``on_train_begin``, ``on_epoch_begin(epoch)``,
``on_train_batch_begin(batch)`` ...). One ``with`` block is one repetition
(``experiment_begin`` at its start); the block's normal end or an
interruption (Ctrl-C, SIGTERM) completes it, the latter with an
``interrupted`` event (only part of the work measured), any other exception
leaves it incomplete, and limits are restored in every case.
"""

from __future__ import annotations

import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Self

from joulehouse.collect.interrupt import Interrupted, signals_held
from joulehouse.collect.limits import NO_LIMITS, Limits, applied
from joulehouse.collect.measurement import Measurement, new_repetition
from joulehouse.collect.nvml import Nvml
from joulehouse.collect.runner import Target


class Recorder:
    """One repetition of ``data_root/experiment/benchmark/run``, measured while inside.

    ``run`` defaults to the settings' name (``250W``, ``877MHz,1065MHz``: the
    limits asked for, else GPU 0's power limit now). ``interval_s`` is the
    gpu-power.csv polling interval.
    """

    def __init__(self, data_root: str | Path, experiment: str, benchmark: str,
                 run: str | None = None, *, limits: Limits = NO_LIMITS,
                 interval_s: float = 0.1) -> None:
        self.target = Target(Path(data_root), experiment, benchmark, run)
        self.limits = limits
        self.interval_s = interval_s
        self.measurement: Measurement | None = None
        self.ended: Measurement | None = None
        self._stack = ExitStack()

    def __enter__(self) -> Self:
        with ExitStack() as stack:
            nvml = stack.enter_context(Nvml())
            devices = stack.enter_context(applied(nvml.devices(), self.limits))
            folder = new_repetition(self.target.run_dir(self.limits, devices[0]))
            self.measurement = Measurement(nvml, devices, folder, self.interval_s)
            stack.callback(self._end, False)
            self.measurement.begin()
            self._stack = stack.pop_all()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: object) -> None:
        with self._stack:  # then limits restored, NVML shut down
            stopped = isinstance(error, KeyboardInterrupt)
            with signals_held():  # a second signal cannot come between the two
                if stopped and self.measurement is not None:
                    self.measurement.interrupt(error.signum if isinstance(error, Interrupted)
                                               else signal.SIGINT)
                self._end(error is None or stopped)

    def _end(self, complete: bool) -> None:
        """End the measurement once (the first call decides whether it is complete)."""
        measurement, self.measurement = self.measurement, None
        if measurement is not None:
            self.ended = measurement
            measurement.end(complete=complete)

    @property
    def folder(self) -> Path:
        """The repetition folder (being) written."""
        return (self.measurement or self.ended).folder

    def _event(self, name: str, index: int = 0) -> None:
        if self.measurement is None:
            raise RuntimeError("use the Recorder inside its with block")
        self.measurement.event(name, index)

    def train_begin(self) -> None:
        self._event("train_begin")

    def train_end(self) -> None:
        self._event("train_end")

    def epoch_begin(self, epoch: int) -> None:
        self._event("epoch_begin", epoch)

    def epoch_end(self, epoch: int) -> None:
        self._event("epoch_end", epoch)

    def batch_begin(self, batch: int) -> None:
        self._event("batch_begin", batch)

    def batch_end(self, batch: int) -> None:
        self._event("batch_end", batch)

    def callback(self) -> TrainingCallback:
        """A callback with Keras' hook names recording into this repetition."""
        return TrainingCallback(self)


class TrainingCallback:
    """Keras-named hooks (``logs`` ignored) forwarding to a :class:`Recorder`."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.recorder.train_begin()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.recorder.train_end()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.recorder.epoch_begin(epoch)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.recorder.epoch_end(epoch)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.recorder.batch_begin(batch)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.recorder.batch_end(batch)
