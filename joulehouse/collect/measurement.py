"""One repetition being measured on every GPU: its folder, files, sampler and events.

GPU 0's files (the one the readers take) are the repetition folder's own, as
in the seed; with several GPUs, GPU i's are the same files in ``gpu{i}/``
inside it (the seed's layout has one ``gpu-power.csv`` per repetition). Each
set has its ``system_info.json``: the driver, CUDA, NVML, OS and Python
packages, and the GPU's name, compute capability, UUID and enforced power
limit (mW).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from joulehouse.collect.interrupt import signals_held
from joulehouse.collect.nvml import Device, Nvml
from joulehouse.collect.sampler import DeviceFiles, Sampler
from joulehouse.collect.writer import RepetitionWriter
from joulehouse.gpu.layout import subdirs
from joulehouse.gpu.readers import SYSTEM_INFO_FILE

BEGIN_EVENT = "experiment_begin"
#: The event of a repetition whose measured work SIGINT or SIGTERM cut short: written at
#: the signal, its ``data`` the signal's number (2, 15). The repetition is complete and
#: valid but measured only part of the work.
INTERRUPTED_EVENT = "interrupted"


def new_repetition(run_dir: Path) -> Path:
    """A new repetition folder in ``run_dir``, made now: the number after the highest
    there (0 in a new run). Existing repetitions are never reused."""
    numbers = [int(name) for name in subdirs(run_dir, missing_ok=True) if name.isdigit()]
    number = max(numbers, default=-1) + 1
    while True:
        folder = run_dir / str(number)
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:  # another collector took it meanwhile
            number += 1


class Measurement:
    """``begin()``, then ``event(...)`` as the work goes, then ``end(complete=...)``.

    The folder is made and the files opened at construction; nothing is
    complete until ``end(complete=True)``.
    """

    def __init__(self, nvml: Nvml, devices: list[Device], folder: Path, interval_s: float,
                 extra_info: dict[str, Any] | None = None) -> None:
        self.folder = folder
        self.writer = RepetitionWriter(folder)
        common = nvml.system_info() | {"gpu_count": len(devices)} | (extra_info or {})
        files, since_us = [], time.time_ns() // 1000
        for number, device in enumerate(devices):
            prefix = "" if number == 0 else f"gpu{device.index}/"
            self.writer.json(prefix + SYSTEM_INFO_FILE, device.info() | common)
            files.append(DeviceFiles.open(device, self.writer, prefix, since_us))
        self.sampler = Sampler(files, interval_s)
        self.begin_ns: int | None = None
        self.end_ns: int | None = None
        self.ended = False  # end() was called (it is called once)
        self.interrupted_by: int | None = None  # the signal that cut the work short

    def begin(self) -> int:
        """Start sampling; write ``experiment_begin`` at the begin edge (ns, returned)."""
        self.begin_ns = self.sampler.start()
        self.writer.event(BEGIN_EVENT, self.begin_ns)
        return self.begin_ns

    def event(self, name: str, data: int = 0) -> None:
        """Record ``name`` (``epoch_begin`` ...) with its index ``data`` now."""
        self.writer.event(name, time.time_ns(), data)

    def interrupt(self, signum: int) -> None:
        """Record that signal ``signum`` cut the measured work short, now
        (:data:`INTERRUPTED_EVENT`); the measurement goes on until :meth:`end`."""
        self.interrupted_by = signum
        self.event(INTERRUPTED_EVENT, signum)

    def end(self, *, complete: bool) -> None:
        """Stop sampling; with ``complete``, write ``experiment_end`` last (the repetition
        is then ready for ingestion), else close the files without it. Called once;
        SIGINT and SIGTERM are held back meanwhile (raised after), so a signal cannot
        leave a repetition half ended."""
        if self.ended:
            raise RuntimeError(f"{self.folder}: the measurement has ended already")
        self.ended = True
        with signals_held():
            self._end(complete)

    def _end(self, complete: bool) -> None:
        if self.begin_ns is None:  # never began: nothing to measure
            self.writer.abandon()
            return
        try:
            self.end_ns = self.sampler.stop()
        except BaseException:
            self.writer.abandon()
            raise
        if complete:
            self.writer.complete(self.end_ns)
        else:
            self.writer.abandon()

    @property
    def elapsed_s(self) -> float:
        """Seconds since the begin edge (to the end edge once ended)."""
        if self.begin_ns is None:
            return 0.0
        return ((self.end_ns or time.time_ns()) - self.begin_ns) / 1e9
