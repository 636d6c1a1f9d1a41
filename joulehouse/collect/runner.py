"""Wrapping a command: N repetitions measured, limits set around them all.

Exit status, as users of wrapper tools (``time``, ``timeout``, ``nice``)
expect: 0 when every repetition's command succeeded; else the failed
command's own status (128 + N when a signal N ended it), and the
repetitions after it are not run. A failed command's repetition is left
incomplete (its files kept, no ``experiment_end``): a failed run is no
measurement of the benchmark, and no sensor ingests it. SIGINT or SIGTERM
to the collector is passed on to the command (SIGINT after a second's
grace, as a terminal's Ctrl-C already reached it), the repetition is
completed with what was measured and an ``interrupted`` event (it measured
only part of the command; :data:`~joulehouse.collect.measurement.INTERRUPTED_EVENT`),
limits are restored, and the status is 128 + the signal's number (130, 143).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from joulehouse.collect.interrupt import Interrupted, signals_held
from joulehouse.collect.limits import NO_LIMITS, Limits, applied, run_name
from joulehouse.collect.measurement import Measurement, new_repetition
from joulehouse.collect.nvml import Device, Nvml

#: Seconds a command gets to exit after the signal passed on, before SIGKILL.
STOP_GRACE_S = 10.0
_PROGRESS_S = 1.0


@dataclass(frozen=True)
class Target:
    """Where repetitions go: ``data_root/experiment/benchmark/run/<number>``; ``run``
    None is the settings' name (:func:`~joulehouse.collect.limits.run_name`)."""

    data_root: Path
    experiment: str
    benchmark: str
    run: str | None = None

    def run_dir(self, limits: Limits, device: Device) -> Path:
        """The run folder, its name defaulted from ``limits`` and ``device``."""
        return (self.data_root / self.experiment / self.benchmark
                / (self.run or run_name(limits, device)))


@dataclass(frozen=True)
class Outcome:
    """One repetition: its folder, number (1-based) of how many, window (s), counter energy
    (J, summed over GPUs), the command's exit status, whether it is complete, whether a
    signal cut the command short (complete then, but only part of it measured), and the
    polling thread's CPU time (s: what sampling cost)."""

    folder: Path
    number: int
    total: int
    duration_s: float
    energy_j: float | None
    status: int
    complete: bool
    interrupted: bool
    sampling_cpu_s: float


def exit_status(returncode: int) -> int:
    """A shell's exit status for a Popen return code (signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _wait(process: subprocess.Popen, tick: Callable[[], None]) -> int:
    while True:
        try:
            return process.wait(timeout=_PROGRESS_S)
        except subprocess.TimeoutExpired:
            tick()


def _stop(process: subprocess.Popen, signum: int) -> None:
    """Pass ``signum`` on to the command and wait for it (SIGKILL after STOP_GRACE_S)."""
    if signum == signal.SIGINT:
        try:  # a terminal's Ctrl-C reached the command's process group already
            process.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
    if process.poll() is None:
        process.send_signal(signum)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def collect(command: list[str], target: Target, *, repetitions: int = 1,
            limits: Limits = NO_LIMITS, interval_s: float = 0.1,
            progress: Callable[[int, int, Measurement], None] = lambda *_: None,
            done: Callable[[Outcome], None] = lambda _: None) -> int:
    """Run ``command`` ``repetitions`` times, each measured as a new repetition of
    ``target``; return the exit status (module docstring).

    ``progress(number, total, measurement)`` is called about every second
    while a command runs; ``done(outcome)`` after each repetition. Raises
    NvmlUnavailable without NVML or a GPU, LimitPermissionError (nothing run)
    without the rights to set ``limits``, FileNotFoundError when the command
    does not exist (its repetition left incomplete), Interrupted after an
    interrupted repetition was completed.
    """
    with Nvml() as nvml, applied(nvml.devices(), limits) as devices:
        for number in range(1, repetitions + 1):
            folder = new_repetition(target.run_dir(limits, devices[0]))
            measurement = Measurement(nvml, devices, folder, interval_s,
                                      {"command": command})
            process = None
            try:
                measurement.begin()
                process = subprocess.Popen(command)
                status = exit_status(_wait(process, lambda n=number, m=measurement: progress(
                    n, repetitions, m)))
                with signals_held():  # a signal now is raised once it is ended and shown
                    measurement.end(complete=status == os.EX_OK)
                    done(_outcome(measurement, number, repetitions, status))
            except Interrupted as stop:
                with signals_held():  # a second signal does not cut this short
                    if not measurement.ended:
                        measurement.interrupt(stop.signum)
                    if process is not None:
                        _stop(process, stop.signum)
                    if not measurement.ended:  # else it was raised after the end, above
                        measurement.end(complete=True)
                        done(_outcome(measurement, number, repetitions, stop.exit_code))
                raise
            except BaseException:
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
                if not measurement.ended:
                    measurement.end(complete=False)
                raise
            if status != os.EX_OK:
                return status
    return os.EX_OK


def _outcome(measurement: Measurement, number: int, total: int, status: int) -> Outcome:
    return Outcome(measurement.folder, number, total, measurement.elapsed_s,
                   measurement.sampler.energy_j, status, measurement.writer.completed,
                   measurement.interrupted_by is not None, measurement.sampler.cpu_s)
