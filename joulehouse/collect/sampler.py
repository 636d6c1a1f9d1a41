"""Sampling during a repetition: gpu-power.csv polled, NVML's sample buffers drained.

One thread (:class:`Sampler`) polls every GPU's readings at the configured
interval into ``gpu-power.csv`` and reads each ``nvmlDeviceGetSamples``
buffer about every second into ``{kind}_samples.csv``, carrying the last
timestamp seen (µs) so that each sample is written once. A buffer holds a
few seconds of ~50 Hz samples (the size is not documented), so reading it
every second loses none. Rows are written and flushed about every second.

Window edges are aligned to the energy counter: the counter updates only
about every 100 ms, so a window edge read between two updates would be off
by up to 100 ms of energy. :meth:`Sampler.edge` waits (at most
``TICK_TIMEOUT_S``) for GPU 0's counter to change and takes a reading of
every GPU right then; the repetition's begin and end are stamped with that
reading's time, so the counter's delta covers exactly the window (the end
edge adds at most one update period of what follows the command).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from joulehouse.collect.nvml import Device
from joulehouse.collect.writer import CsvWriter, RepetitionWriter
from joulehouse.gpu.readers import GPU_POWER_FILE, SAMPLES_SUFFIX

#: How long an edge waits for the energy counter to change (s); then it is taken anyway.
TICK_TIMEOUT_S = 0.3
_TICK_POLL_S = 0.0005
BUFFER_INTERVAL_S = 1.0
FLUSH_INTERVAL_S = 1.0


@dataclass
class DeviceFiles:
    """One GPU's files in a repetition (GPU 0's in the folder, GPU i's in ``gpu{i}/``)
    and what was last read from it."""

    device: Device
    columns: list[str]
    power: CsvWriter
    samples: dict[str, CsvWriter]
    last_seen_us: dict[str, int]
    rows: list[tuple] = field(default_factory=list)
    sample_rows: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    first_energy_mj: float | None = None
    energy_mj: float | None = None
    power_mw: float | None = None

    @classmethod
    def open(cls, device: Device, writer: RepetitionWriter, prefix: str) -> DeviceFiles:
        """Create the GPU's gpu-power.csv and one ``*_samples.csv`` per buffer it keeps;
        samples already in a buffer before now are not this repetition's."""
        columns = device.supported_readings()
        start_us = time.time_ns() // 1000
        kinds = device.supported_samples()
        return cls(
            device, columns, writer.csv(prefix + GPU_POWER_FILE, columns),
            {kind: writer.csv(prefix + kind + SAMPLES_SUFFIX, ["value"],
                              iso_time=False) for kind in kinds},
            dict.fromkeys(kinds, start_us), sample_rows={kind: [] for kind in kinds})

    def poll(self) -> int:
        """Read every column now; keep the row; return its time (ns since the epoch)."""
        now = time.time_ns()
        values = self.device.read(self.columns)
        self.rows.append((now, *values))
        reading = dict(zip(self.columns, values, strict=True))
        self.power_mw = reading.get("power", self.power_mw)
        if "total-energy" in reading:
            self.energy_mj = reading["total-energy"]
            if self.first_energy_mj is None:
                self.first_energy_mj = self.energy_mj
        return now

    def drain(self) -> None:
        """Take every buffered sample newer than the last one seen, per kind."""
        for kind, rows in self.sample_rows.items():
            new = self.device.samples(kind, self.last_seen_us[kind])
            if new:
                rows.extend(new)
                self.last_seen_us[kind] = new[-1][0]

    def flush(self) -> None:
        """Write what was read since the last flush."""
        self.power.write(self.rows)
        self.rows = []
        for kind, rows in self.sample_rows.items():
            self.samples[kind].write(rows)
            rows.clear()


class Sampler:
    """The polling thread of one repetition over every GPU's :class:`DeviceFiles`.

    :meth:`start` takes the begin edge and starts the thread; :meth:`stop`
    stops it and takes the end edge, buffers drained and rows flushed.
    """

    def __init__(self, files: list[DeviceFiles], interval_s: float) -> None:
        self.files = files
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="joulehouse-sampler",
                                        daemon=True)
        self.error: BaseException | None = None
        self.cpu_s = 0.0  # the polling thread's CPU time once stopped: the collector's cost

    def edge(self) -> int:
        """Wait for GPU 0's energy counter to change (at most TICK_TIMEOUT_S), then poll
        every GPU; return the time of GPU 0's reading (ns), the window edge."""
        first = self.files[0]
        if "total-energy" in first.columns:
            before = first.device.energy_mj()
            deadline = time.monotonic() + TICK_TIMEOUT_S
            while first.device.energy_mj() == before and time.monotonic() < deadline:
                time.sleep(_TICK_POLL_S)
        with self._lock:
            times = [files.poll() for files in self.files]
        return times[0]

    def start(self) -> int:
        """Take the begin edge and start polling; return the begin time (ns)."""
        begin = self.edge()
        self._thread.start()
        return begin

    def stop(self) -> int:
        """Stop polling, take the end edge, drain the buffers and flush; return the end
        time (ns). Re-raises an error the thread met."""
        self._stop.set()
        self._thread.join()
        end = self.edge()
        for files in self.files:
            files.drain()
            files.flush()
        if self.error is not None:
            raise self.error
        return end

    def _loop(self) -> None:
        start = time.monotonic()  # start() has just polled
        next_poll, next_drain, next_flush = (start + self.interval_s, start + BUFFER_INTERVAL_S,
                                             start + FLUSH_INTERVAL_S)
        try:
            while not self._stop.wait(max(0.0, next_poll - time.monotonic())):
                now = time.monotonic()
                with self._lock:
                    for files in self.files:
                        files.poll()
                        if now >= next_drain:
                            files.drain()
                        if now >= next_flush:
                            files.flush()
                next_poll += self.interval_s
                if next_poll < now:  # fell behind (a loaded machine): no burst to catch up
                    next_poll = now + self.interval_s
                if now >= next_drain:
                    next_drain = now + BUFFER_INTERVAL_S
                if now >= next_flush:
                    next_flush = now + FLUSH_INTERVAL_S
        except BaseException as err:  # noqa: BLE001 -- handed to stop(), raised in the caller
            self.error = err
        finally:
            self.cpu_s = time.thread_time()

    @property
    def power_w(self) -> float | None:
        """The latest power reading summed over the GPUs (W), for progress."""
        readings = [f.power_mw for f in self.files if f.power_mw is not None]
        return sum(readings) / 1e3 if readings else None

    @property
    def energy_j(self) -> float | None:
        """Energy since the begin edge by the counters, summed over the GPUs (J)."""
        deltas = [f.energy_mj - f.first_energy_mj for f in self.files
                  if f.energy_mj is not None and f.first_energy_mj is not None]
        return sum(deltas) / 1e3 if deltas else None
