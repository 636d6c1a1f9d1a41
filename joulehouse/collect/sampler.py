"""Sampling during a repetition: gpu-power.csv polled, NVML's sample buffers drained.

One thread (:class:`Sampler`) polls every GPU's readings at the configured
interval into ``gpu-power.csv`` and reads each ``nvmlDeviceGetSamples``
buffer about every second into ``{kind}_samples.csv``, carrying the last
timestamp seen (µs) so that each sample is written once. A buffer holds a
few seconds of ~50 Hz samples (the size is not documented), so reading it
every second loses none. Rows are written and flushed about every second.

Window edges are aligned to the energy counter: the counter updates only
about every 100 ms, so a window edge read between two updates would be off
by up to 100 ms of energy. :meth:`Sampler.edge` reads GPU 0's counter in a
tight loop until it sees it change within ``EDGE_PRECISION_NS`` of the
previous read (a change seen later, after the thread was descheduled on a
loaded machine, waits for the next update; at most ``TICK_TIMEOUT_S`` in
all), and stamps GPU 0's reading with that read's time; the repetition's
begin and end are that time, so the counter's delta covers the window to
within the precision (the end edge adds at most about one update period of
what follows the command).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from joulehouse.collect.nvml import Device, explain
from joulehouse.collect.writer import CsvWriter, RepetitionWriter
from joulehouse.gpu.readers import GPU_POWER_FILE, SAMPLES_SUFFIX

#: How long an edge waits for a precisely seen counter update (s); then it is taken anyway.
TICK_TIMEOUT_S = 1.0
#: Most time between the last read of the old counter value and the first of the new (ns).
EDGE_PRECISION_NS = 1_000_000
_TICK_POLL_S = 0.0005
BUFFER_INTERVAL_S = 1.0
FLUSH_INTERVAL_S = 1.0


class SamplingFailed(Exception):
    """The polling thread stopped on an error: one line saying which."""


@dataclass
class DeviceFiles:
    """One GPU's files in a repetition (GPU 0's in the folder, GPU i's in ``gpu{i}/``)
    and what was last read from it."""

    device: Device
    columns: list[str]
    writer: RepetitionWriter
    prefix: str
    power: CsvWriter
    last_seen_us: dict[str, int]
    samples: dict[str, CsvWriter] = field(default_factory=dict)
    rows: list[tuple] = field(default_factory=list)
    sample_rows: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    first_energy_mj: float | None = None
    energy_mj: float | None = None
    power_mw: float | None = None

    @classmethod
    def open(cls, device: Device, writer: RepetitionWriter, prefix: str, since_us: int
             ) -> DeviceFiles:
        """Create the GPU's gpu-power.csv; a ``*_samples.csv`` per buffer it keeps comes
        with its first samples (a buffer without any in the repetition has no file).
        Samples up to ``since_us`` (µs since the epoch) are not this repetition's."""
        columns = device.supported_readings()
        kinds = device.supported_samples()
        return cls(device, columns, writer, prefix, writer.csv(prefix + GPU_POWER_FILE, columns),
                   dict.fromkeys(kinds, since_us), sample_rows={kind: [] for kind in kinds})

    def poll(self, at_ns: int | None = None) -> int:
        """Read every column now; keep the row, stamped ``at_ns`` (default: now); return
        its time (ns since the epoch)."""
        now = time.time_ns() if at_ns is None else at_ns
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
            if rows and kind not in self.samples:
                self.samples[kind] = self.writer.csv(self.prefix + kind + SAMPLES_SUFFIX,
                                                     ["value"], iso_time=False)
            if rows:
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
        """Poll every GPU at GPU 0's next counter update seen precisely (module
        docstring); return the time of GPU 0's reading (ns), the window edge."""
        first = self.files[0]
        at = self._counter_update(first.device) if "total-energy" in first.columns else None
        with self._lock:
            begin = first.poll(at)
            for files in self.files[1:]:
                files.poll()
        return begin

    @staticmethod
    def _counter_update(device: Device) -> int:
        """The time (ns) of the first read of a new counter value at most
        EDGE_PRECISION_NS after a read of the old one (or of the last read at the
        timeout). The counter keeps that value for about 100 ms after."""
        deadline = time.monotonic() + TICK_TIMEOUT_S
        last_ns, last = time.time_ns(), device.energy_mj()
        while True:
            now_ns, value = time.time_ns(), device.energy_mj()
            precise = now_ns - last_ns <= EDGE_PRECISION_NS
            if (value != last and precise) or time.monotonic() > deadline:
                return now_ns
            last_ns, last = now_ns, value
            time.sleep(_TICK_POLL_S)

    def start(self) -> int:
        """Take the begin edge and start polling; return the begin time (ns)."""
        begin = self.edge()
        self._thread.start()
        return begin

    def stop(self) -> int:
        """Stop polling, take the end edge, drain the buffers and flush; return the end
        time (ns). An error the thread met (a GPU lost ...) is raised as SamplingFailed."""
        self._stop.set()
        self._thread.join()
        try:
            end = self.edge()
            for files in self.files:
                files.drain()
        except Exception as err:  # noqa: BLE001 -- raised below as SamplingFailed
            self.error = self.error or err
        finally:
            for files in self.files:  # what was read is kept
                files.flush()
        if self.error is not None:
            raise SamplingFailed(f"sampling stopped early: {explain(self.error)}") from self.error
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
